"""Datasets selected by `[environment] dataset` and `split`. Every row is gsm8k-shaped: {"question", "answer"} with
the answer ending in `#### N`.

- "gsm8k": Hugging Face `datasets` (openai/gsm8k, config "main"); needs the hub or a local cache. Offline (any
  profile but gpu: hermes_stack.hub.needs_hub, whatever the key file) the hub flags are set and only the cache is tried, which fails in milliseconds; online the hub is probed with
  a short timeout first, so an unreachable hub is a clear error instead of a ~50-second hang.
- "offline-arith": the built-in generated task (hermes_stack.tasks.offline_arith), made for the CPU tiny model.
- anything else: a path to a JSONL file in gsm8k's shape (relative paths: to the config directory, then to the
  working directory). Train/test are disjoint by a stable hash of the question (1 in 10 rows is test), so the split
  does not depend on the seed.

Rows are shuffled with `seed` (same seed, same order) and cut to `max_samples`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from dataclasses import dataclass, replace
from pathlib import Path

from hermes_stack.errors import InputError, Problem, StackError
from hermes_stack.tasks.reward import MARKER, after_marker

GSM8K_HUB_ID = "openai/gsm8k"
GSM8K_CONFIG = "main"
HUB_PROBE_TIMEOUT_S = 3.0
KEY = "[environment] dataset"
# The environment's shuffle of its split (HermesEnvConfig.seed; no config key sets another): the trainer's dry-run
# counts the same rows (trainer/prompt_check.py).
ROLLOUT_SEED = 0
ROW_HINT = 'each line is one object like {"question": "…", "answer": "… #### 42"}'
OFFLINE_HINT = 'use dataset = "offline-arith" (built in) or a JSONL file in gsm8k\'s shape'


def set_offline_flags() -> None:
    """Make Hugging Face libraries fail fast instead of retrying the hub (they read these at import time too)."""
    import sys

    from hermes_stack.hub import set_hub_access

    set_hub_access(False)  # the one owner of the three flags

    if "datasets" in sys.modules:  # already imported: flip its cached flag as well
        import datasets.config

        datasets.config.HF_HUB_OFFLINE = True


def load_items(
    dataset: str,
    split: str,
    max_samples: int,
    *,
    seed: int = 0,
    offline: bool,
    base_dir: Path | None = None,
    config_file: str = "config",
    shuffle: bool = True,
) -> list[dict]:
    """The rows of one split, shuffled with `seed` (unless `shuffle` is false: file order), at most `max_samples`."""
    if split not in ("train", "test"):
        raise InputError(Problem(config_file, "[environment] split", repr(split), '"train" or "test"'))
    if dataset == "offline-arith":
        from hermes_stack.tasks.offline_arith import offline_arith

        rows = offline_arith(split, seed=seed)
    elif dataset == "gsm8k":
        rows = _gsm8k(split, offline=offline, config_file=config_file)
    else:
        rows = [row for row in _jsonl(_resolve(dataset, base_dir, config_file), config_file) if _split_of(row) == split]
        if not rows:
            raise InputError(Problem(config_file, KEY, f"{dataset} with no {split} rows", "a file with rows for both "
                                     "splits", "1 row in 10 (by a hash of the question) is test; add more rows"))
    rows = [{"question": r["question"], "answer": r["answer"]} for r in rows]
    if shuffle:
        random.Random(seed).shuffle(rows)
    return rows[:max_samples]


BUILT_IN = ("gsm8k", "offline-arith")


def check_jsonl(dataset: str, base_dir: Path | None, config_file: str) -> list[Problem]:
    """For `validate`: the problems a JSONL dataset would raise in the environment (missing file, bad rows)."""
    try:
        _jsonl(_resolve(dataset, base_dir, config_file), config_file)
    except InputError as exc:
        return list(exc.problems)
    return []


def split_counts(dataset: str, base_dir: Path | None, config_file: str) -> dict[str, int]:
    """For `validate`: the rows of a JSONL dataset each split gets, as load_items splits them; InputError for a
    missing file or bad rows (check_jsonl's problems)."""
    read = _read(_resolve(dataset, base_dir, config_file), config_file)
    if read.problems:
        raise InputError(list(read.problems))
    if read.counts is None:
        test = sum(_split_of(row) == "test" for row in read.rows)
        read.counts = {"train": len(read.rows) - test, "test": test}
    return dict(read.counts)


def _split_of(row: dict) -> str:
    digest = hashlib.sha256(row["question"].encode("utf-8")).digest()
    return "test" if digest[0] % 10 == 0 else "train"


def _resolve(dataset: str, base_dir: Path | None, config_file: str) -> Path:
    path = Path(dataset)
    candidates = [path] if path.is_absolute() else [p for p in ((base_dir / path) if base_dir else None, path) if p]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    folders = [c for c in candidates if c.is_dir()]
    if folders:  # "no such file" would send the user looking for something that is there
        inside = sorted(p.name for p in folders[0].glob("*.jsonl"))[:3]
        hint = (f"name the JSONL file inside it: {', '.join(str(Path(dataset) / n) for n in inside)}" if inside
                else "name a JSONL file; this folder holds no .jsonl file")
        raise InputError(Problem(config_file, KEY, f"{dataset!r} (a folder, not a file: {folders[0]})",
                                 '"gsm8k", "offline-arith" or an existing JSONL file', hint))
    special = [c for c in candidates if c.exists()]
    if special:  # a device, a pipe or a socket: reading it would never end (/dev/zero) or wait on a writer
        raise InputError(Problem(config_file, KEY, f"{dataset!r} (not a regular file: {special[0]})",
                                 '"gsm8k", "offline-arith" or an existing JSONL file',
                                 "name a JSONL file saved on disk; a device, pipe or socket cannot be read as a dataset"))
    tried = ", ".join(str(c) for c in candidates)
    raise InputError(Problem(config_file, KEY, f"{dataset!r} (no such file: {tried})",
                             '"gsm8k", "offline-arith" or an existing JSONL file',
                             "relative paths are looked up next to the config files, then in the working directory"))


JSONL_HINT = ('JSONL is one JSON object per line, like {"question": "…", "answer": "… #### 42"}; a CSV or other table '
              "must be converted to that first")
NUMBER_HINT = ("the reward compares the number after the last #### with the model's (reward.py); with none there no "
               "completion can ever score")
# What reward.answers_agree can compare: the text after the last ####, read as an integer or by math-verify, which
# finds a number in it ("$1,000", "72.0", "18 apples", "1/2") or reads LaTeX math ("$\\pi$"). Without a digit or
# LaTeX ("seven", "NaN", nothing) it reads nothing. Mirrored, not run: math-verify costs ~0.3 s to import and ~1.5 ms
# a parse, too slow for validate.
_DIGIT = re.compile(r"\d")


def _comparable(reference: str) -> bool:
    return bool(_DIGIT.search(reference)) or "\\" in reference or reference.count("$") >= 2


def _not_an_object(line: str) -> str:
    """Why a line is no JSON object: the JSON error, or the kind of JSON value it is."""
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"invalid JSON ({exc.msg})"
    kinds = {list: "a JSON list", str: "a JSON string", bool: "a JSON boolean", type(None): "JSON null"}
    return kinds.get(type(value), "a JSON number")


@dataclass
class _Read:
    """One JSONL file as read: its text, and its rows or its problems."""

    where: tuple[str, str]  # (path, config_file): both are in the problems' text
    text: str
    rows: tuple[dict, ...] = ()
    problems: tuple[Problem, ...] = ()
    counts: dict[str, int] | None = None  # split_counts, once asked


# The last file read, reused while its text is the same: validate reads the dataset for the files as written and as
# resolved and for the controller's configs/ check, and the environment once per split (~0.2 s each at 80,000 rows).
# Compared by text, not by modification time, so an edit is never missed.
_last_read: list[_Read] = []


def _jsonl(path: Path, config_file: str) -> list[dict]:
    read = _read(path, config_file)
    if read.problems:
        raise InputError(list(read.problems))
    return list(read.rows)


def _read(path: Path, config_file: str) -> _Read:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InputError(Problem(str(path), "(file)", f"a file that cannot be read ({reason})",
                                 "a UTF-8 JSONL file", f"{config_file} {KEY} names it")) from exc
    where = (str(path), config_file)
    if not (_last_read and _last_read[0].where == where and _last_read[0].text == text):
        try:
            _last_read[:] = [_Read(where, text, rows=tuple(_rows(text, path, config_file)))]
        except InputError as exc:
            _last_read[:] = [_Read(where, text, problems=tuple(exc.problems))]
    return _last_read[0]


def _rows(text: str, path: Path, config_file: str) -> list[dict]:
    """The rows of a JSONL file's text; InputError with one Problem per kind of bad line, at its first line with how
    many lines have it (a CSV of 80,000 lines was 80,000 Problems: minutes of validate, a screen of repeats)."""
    rows: list[dict] = []
    # kind -> [lines with it, its first line, that line's Problem]: the detail is built once, the rest only counted.
    faults: dict[str, list] = {}

    def fault(kind: str, number: int, build) -> None:
        if kind in faults:
            faults[kind][0] += 1
        else:
            faults[kind] = [1, number, build(f"{path}:{number}")]

    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row = None
        if line.lstrip().startswith("{"):  # anything else is no object: no parse needed to count it
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                pass
        if not isinstance(row, dict):
            fault("line", number, lambda where, line=line: Problem(
                where, "line", f"{_not_an_object(line)}: {_show_line(line)}", "one JSON object per line", JSONL_HINT))
            continue
        if not isinstance(row.get("question"), str):
            fault("question", number, lambda where, row=row: Problem(
                where, "question", _show(row["question"]) if "question" in row else "no question", "a string",
                ROW_HINT))
            continue
        answer = row.get("answer")
        if not isinstance(answer, str) or MARKER not in answer:
            fault("answer", number, lambda where, row=row, answer=answer: Problem(
                where, "answer", "no answer" if "answer" not in row else _show(answer),
                'a string ending in "#### N"', "gsm8k's shape: the reference number after ####"))
            continue
        reference = after_marker(answer)
        if not _comparable(reference):
            fault("number", number, lambda where, reference=reference: Problem(
                where, "answer", f"{_show(reference)} after the last ####",
                'a number there, as in "#### 42" (a sign, commas, a decimal point or a unit are fine)', NUMBER_HINT))
            continue
        rows.append(row)
    if faults:
        raise InputError([replace(first, found=f"{first.found} (the first of {count} such lines)") if count > 1
                          else first for count, _, first in sorted(faults.values(), key=lambda f: f[1])])
    if not rows:
        raise InputError(Problem(str(path), "rows", "none", "one JSON object per line", f"{config_file} {KEY}"))
    return rows


# A KEY=value line: the file named as the dataset is an env or key file, and its value may be a secret (a short
# password the redactor cannot recognise by its shape).
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=")  # an env file's NAME=…; not TOML's `key = …`


def _show_line(line: str) -> str:
    if env := _ENV_LINE.match(line):
        return f"{env.group(1)}=… (an env file's line; its value is not shown)"
    return _show(line)


def _show(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def hub_endpoint() -> str:
    """The hub huggingface_hub itself would use (it honours HF_ENDPOINT): one definition, not a host name of ours."""
    if os.environ.get("HF_ENDPOINT"):
        return os.environ["HF_ENDPOINT"].rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def probe_hub(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when the hub answers within the timeout, else the reason it did not."""
    import httpx

    url = f"{hub_endpoint()}/api/datasets/{GSM8K_HUB_ID}"
    try:
        httpx.head(url, timeout=timeout_s, follow_redirects=True)
    except httpx.TimeoutException:
        return f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _gsm8k(split: str, *, offline: bool, config_file: str) -> list[dict]:
    reason = "the hub is off for this profile" if offline else probe_hub()
    if reason:
        set_offline_flags()  # the cache is the only source left; make `datasets` say so at once
    try:
        import datasets

        data = datasets.load_dataset(GSM8K_HUB_ID, GSM8K_CONFIG, split=split)
    except Exception as exc:
        if offline:
            raise InputError(Problem(config_file, KEY, '"gsm8k" in offline mode', "a dataset available offline",
                                     f"gsm8k is not in the local Hugging Face cache; {OFFLINE_HINT}")) from exc
        if reason:
            raise StackError(
                f"cannot reach the Hugging Face hub at {hub_endpoint()} ({reason}) and gsm8k is not in the local "
                f"cache; {OFFLINE_HINT} in {config_file} {KEY}"
            ) from exc
        raise StackError(f"loading gsm8k from the Hugging Face hub failed: {type(exc).__name__}: {exc}") from exc
    return [{"question": row["question"], "answer": row["answer"]} for row in data]

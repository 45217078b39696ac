"""Reading and editing config_<algo>.toml / settings_<algo>.json for the agent tools, safely.

A field is named as the profiles name overrides (hermes_stack.config.profiles.target_of): `<section>.<field>`, which
is the TOML's when it has that field, else the JSON's; `settings.<section>.<field>` forces the JSON.

An edit is validated before anything is written: the two candidate files are written into a scratch folder next to
configs/ (so relative paths resolve as they would in configs/), `hermes-stack validate`'s own checks run on it, and
only a candidate that adds no problem replaces the real files (atomically, one os.replace per file). A refused value
leaves both files byte for byte as they were. Locked fields (config.models.LOCKED_FIELDS) are refused unless the
server was started with --unlock: a tool call can never unlock them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import typing
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

from hermes_stack.config import profiles
from hermes_stack.config.models import LOCKED_FIELDS, AlgoConfig, Settings
from hermes_stack.errors import Problem
from hermes_stack.hub import is_hub_id

FILES = {"config": "config_{algo}.toml", "settings": "settings_{algo}.json"}
# Switching algorithm is the server's --algo (the stack's own rule: ALGO=ppo|grpo and nothing else).
NOT_EDITABLE = {("config", "algorithm", "name"): "the algorithm is chosen by the server's --algo",
                ("settings", "algorithm", "name"): "the algorithm is chosen by the server's --algo"}
# Values that name files: they must stay inside the project.
PATH_FIELDS = {("config", "environment", "dataset"), ("settings", "inference", "model_path")}


class EditRefused(Exception):
    def __init__(self, error: str, hint: str):
        super().__init__(error)
        self.error, self.hint = error, hint


@dataclass(frozen=True)
class Field:
    key: str = dc_field(compare=False)  # what the agent passes to rl_edit_config: `settings.trainer.x` is `trainer.x`
    where: str = ""  # config | settings
    section: str = ""
    name: str = ""


def _section_model(where: str, section: str):
    model = AlgoConfig if where == "config" else Settings
    return model.model_fields[section].annotation


def field_of(key: str) -> Field:
    try:
        where, section, name = profiles.target_of(key)
    except KeyError:
        raise EditRefused(f"unknown field {key!r}", "call rl_get_current_config for the field names "
                                                    "(e.g. rollout.group_size, tinker.learning_rate)") from None
    return Field(key, where, section, name)


def display_key(where: str, section: str, name: str) -> str:
    """The shortest name that reaches this field."""
    short = f"{section}.{name}"
    return short if profiles.target_of(short)[0] == where else f"settings.{short}"


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if not typing.get_args(annotation) else None
    return text or str(annotation).replace("typing.", "")


def _bounds(f: Field) -> list[str]:
    info = _section_model(f.where, f.section).model_fields[f.name]
    bounds = []
    for meta in info.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                bounds.append(f"{sign} {getattr(meta, attr)}")
    return bounds


def _describe(algo: str, f: Field) -> str:
    """Where the field is, what it means (the model's own description: an agent choosing an edit saw only the file
    and key), and its bounds."""
    bounds = _bounds(f)
    where = FILES[f.where].format(algo=algo)
    meaning = _section_model(f.where, f.section).model_fields[f.name].description
    return (f"{where} [{f.section}] {f.name}" + (f": {meaning}" if meaning else "")
            + (f" ({', '.join(bounds)})" if bounds else ""))


def locked(f: Field) -> bool:
    return f.where == "settings" and f"{f.section}.{f.name}" in LOCKED_FIELDS


def fields_of(stack, algo: str) -> tuple[list[dict], list[dict]]:
    """(configurable_fields, locked_fields) of a StackConfig: current_value as written in the files, and
    effective_value when the device profile overrides it."""
    configurable, locked_out = [], []
    for where, written, resolved in (("config", stack.config_as_written, stack.config),
                                     ("settings", stack.settings_as_written, stack.settings)):
        for section, sub in written:
            for name, value in sub:
                f = Field(display_key(where, section, name), where, section, name)
                info = _section_model(where, section).model_fields[name]
                entry = {"name": f.key, "type": _type_name(info.annotation),
                         "default": None if info.is_required() else info.default,
                         "description": _describe(algo, f), "current_value": value}
                effective = getattr(getattr(resolved, section), name)
                if effective != value:
                    entry["effective_value"] = effective
                    entry["note"] = f"the {stack.profile} profile runs with {effective!r} instead"
                if (where, section, name) in NOT_EDITABLE:
                    entry["editable"] = False
                if locked(f):
                    locked_out.append({**entry, "locked_value": LOCKED_FIELDS[f"{section}.{name}"]})
                else:
                    configurable.append(entry)
    return configurable, locked_out


def _accepts_str(annotation: Any) -> bool:
    if annotation is str:
        return True
    args = typing.get_args(annotation)
    return any(isinstance(a, str) or _accepts_str(a) for a in args)


def file_of(root: Path, algo: str, f: Field) -> Path:
    return root / "configs" / FILES[f.where].format(algo=algo)


def _expected(f: Field) -> str:
    """The field's type and range, as validate words a type: "an integer (>= 1, <= 1024)"."""
    annotation = _section_model(f.where, f.section).model_fields[f.name].annotation
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    kinds = " or ".join(words.get(a, _type_name(a)) for a in (typing.get_args(annotation) or (annotation,)))
    bounds = _bounds(f)
    return kinds + (f" ({', '.join(bounds)})" if bounds else "")


def coerce(file: Path, f: Field, value: Any) -> Any:
    """An agent often sends numbers as strings: "16" for an integer field is read as 16 (JSON literal syntax);
    a string field keeps the string. `file`: the field's file, named in a refusal."""
    annotation = _section_model(f.where, f.section).model_fields[f.name].annotation
    if isinstance(value, str) and not _accepts_str(annotation):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # not JSON: validate names it as the string it is
        except Exception:  # noqa: BLE001 - json's other refusals, which no value in range meets
            # (an integer past Python's digit limit: ValueError; nesting past the recursion limit: RecursionError)
            digits = value.strip().removeprefix("-")
            found = (f"a number of {len(digits)} digits" if digits.isascii() and digits.isdigit()
                     else f"JSON too deeply nested or with a number too long to read ({len(value)} characters)")
            raise EditRefused(Problem(str(file), f.key, found, _expected(f)).line(),
                              "send a value in that range (rl_get_current_config shows the current one); nothing "
                              "was written") from None
    return value


def _inside(root: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def check_path(root: Path, f: Field, value: Any) -> None:
    """A dataset file or a local model folder must be inside the project."""
    if (f.where, f.section, f.name) not in PATH_FIELDS or not isinstance(value, str):
        return
    if f.name == "dataset":
        if value in ("gsm8k", "offline-arith"):
            return
        base = root / "configs"
    else:
        # A hub id (owner/name, hub.is_hub_id) or a catalog name is no path; any other value with a separator is one
        # (configs/../../x), as for rules.model_path_local.
        looks_local = value.startswith(("./", "../", "/", "~")) or value in (".", "..")
        if not looks_local and ("/" not in value or is_hub_id(value, root)):
            return
        base = root
    if value.startswith("~") or not _inside(root, base / value):
        raise EditRefused(f"{f.key} = {value!r} names a path outside the project {root}",
                          "put the file inside the project (e.g. configs/) and name it relative to it")


def check_parseable(root: Path, algo: str, before) -> None:
    """Refuse any edit while either config file does not parse as it is (a syntax error, a BOM, a byte that is not
    UTF-8): an edit rewrites a whole file through tomlkit or json, which cannot read it either, and an edit to the
    other file would be written while validate could not check the pair. `before`: validate's outcome, whose line
    for the file is quoted."""
    import tomlkit

    from hermes_stack.textfile import decode_text, not_regular

    for where, name in FILES.items():
        path = root / "configs" / name.format(algo=algo)
        kind = not_regular(path)
        if kind is not None:  # a named pipe, a link to /dev/zero: the read below would wait or fill the memory
            raise EditRefused(f"{path}: (file): found {kind}, expected a regular file",
                              f"restore {path.relative_to(root)} from git (`git checkout -- "
                              f"{path.relative_to(root)}`); nothing was written")
        try:
            text, problem = decode_text(path.name, path.read_bytes())  # a BOM, a byte that is not UTF-8
            if problem is not None:
                raise ValueError(problem.line())
            tomlkit.parse(text) if where == "config" else json.loads(text)
        except OSError:
            continue  # a missing file: validate's own problem, and candidate_texts' (no edit can create it)
        except Exception as exc:  # noqa: BLE001 - tomlkit's parse errors share no base class with json's
            line = next((p.line() for p in before.errors if Path(p.file.partition(":")[0]).name == path.name), None)
            raise EditRefused((line or f"{path}: {type(exc).__name__}: {exc}").split(". Hint: ")[0],
                              f"fix {path.relative_to(root)} by hand first (`make validate ALGO={algo}` "
                              "shows the line); nothing was written") from None


def candidate_texts(root: Path, algo: str, f: Field, value: Any) -> dict[str, tuple[Path, bytes, bytes]]:
    """{where: (path, old bytes, new bytes)} for the files the edit changes (the TOML keeps its comments)."""
    import tomlkit

    paths = {w: root / "configs" / name.format(algo=algo) for w, name in FILES.items()}
    old = {w: p.read_bytes() for w, p in paths.items()}
    writes = {f.where: (f.section, f.name, value)}
    mirror = profiles.MIRRORED.get(f"{f.section}.{f.name}") if f.where == "config" else None
    settings_data = json.loads(old["settings"])
    if mirror:
        m_section, m_name = mirror.split(".")
        if settings_data.get(m_section, {}).get(m_name) is not None:  # written there too: keep the two agreeing
            writes["settings"] = (m_section, m_name, value)
    out = {}
    for where, (section, name, v) in writes.items():
        if where == "config":
            doc = tomlkit.parse(old["config"].decode("utf-8"))
            table = doc.setdefault(section, tomlkit.table())
            if v is None:
                table.pop(name, None)  # TOML has no null: absent is the field's default
            else:
                table[name] = v
            new = tomlkit.dumps(doc).encode("utf-8")
        else:
            data = settings_data
            data.setdefault(section, {})[name] = v
            new = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        if new != old[where]:
            out[where] = (paths[where], old[where], new)
    return out


def validate_candidate(root: Path, changes: dict[str, tuple[Path, bytes, bytes]], *, check, before) -> list[str]:
    """Run validate's checks on the candidate files in a scratch copy of configs/; EditRefused with the first new
    problem (one line: file, key, found, expected, hint). `check(config_dir)` is the server's own evaluation (its
    algo, device, model and unlock): an edit is judged exactly as rl_start_training (and `up`) will judge it; a
    check without the server's --model passed a trainer.minibatches that the model's batch refuses. Returns the
    warnings the edit adds (validate's, e.g. the gateway key handed to the inference container), for its answer."""
    scratch = Path(tempfile.mkdtemp(prefix=".hermes-config-check-", dir=root))
    configs = str(root / "configs")

    def same(p: Problem) -> tuple[str, ...]:
        # By key, found and expected, as they would read in configs/ (the scratch folder's name is in paths); not by
        # file, whose line number an edit may shift.
        return tuple(str(v).replace(str(scratch), configs) for v in (p.key, p.found, p.expected))

    try:
        for item in (root / "configs").iterdir():
            _place(item, scratch / item.name)
        for path, _, new in changes.values():
            (scratch / path.name).unlink()
            (scratch / path.name).write_bytes(new)
        outcome = check(scratch)
        known = {same(p) for p in before.errors}
        now = {same(p) for p in outcome.errors}
        new_problems = [p for p in outcome.errors if same(p) not in known]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if outcome.stack is None and not new_problems and not known - now:
        # The pair still does not load (a mistyped value): validate's rules never ran, so this edit was not checked
        # at all, and three edits that the rules refuse were written beside a group_size of 0.
        raise _blocked(root, before.errors)
    if new_problems:
        p = new_problems[0]
        # The scratch folder is gone once this returns: name the real configs/ in the line and in the hint.
        line = p.line().replace(str(scratch), configs)
        hint = (p.hint or "call rl_get_current_config for the allowed values").replace(str(scratch), configs)
        raise EditRefused(line.split(". Hint: ")[0], hint)
    return [w.replace(str(scratch), configs) for w in outcome.warnings
            if w.replace(str(scratch), configs) not in before.warnings]


def _blocked(root: Path, errors: list[Problem]) -> EditRefused:
    """The refusal of an edit beside a problem in the config files that stops validate's rules: that problem (not
    one of the key file's or the environment's, which no edit fixes), and how it can be fixed."""
    files = {str(root / "configs" / name.format(algo=algo)) for name in FILES.values() for algo in ("ppo", "grpo")}
    ours = [p for p in errors if p.file.split(":", 1)[0] in files] or errors
    if not ours:
        return EditRefused("not written: the config files do not load; until they do no edit can be checked",
                           "`make validate` names the problem; the user fixes it in the files")
    blocker = ours[0]
    try:
        field_of(blocker.key)
        fix = f"fix that value first (rl_edit_config on {blocker.key}); rl_get_current_config lists the problems"
    except EditRefused:  # an unknown or misspelt key: no edit reaches it
        fix = (f"the user fixes {blocker.key} in {blocker.file.split(':', 1)[0]} by hand (`make validate` checks "
               "it); rl_get_current_config lists the problems")
    return EditRefused(f"not written: {blocker.line().split('. Hint: ')[0]}; until that is fixed no other edit can be "
                       "checked", fix)


def _place(item: Path, target: Path) -> None:
    """`item` of configs/ in the scratch folder, at no copy's cost where it can be: a hard link for a file (a symlink
    resolved outside the scratch folder, and the GPU profile's rule that a JSONL dataset lies in the configs folder
    refused every dataset, and then every edit), a copy across file systems, a symlink for anything else."""
    if item.is_file():
        _link_or_copy(item, target)
    elif item.is_dir():  # a dataset in configs/data/: a symlinked folder resolved outside the scratch folder too
        shutil.copytree(item, target, copy_function=_link_or_copy)
    else:
        target.symlink_to(item.resolve())


def _link_or_copy(source, target) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def write_atomically(changes: dict[str, tuple[Path, bytes, bytes]]) -> None:
    """Each file replaced whole (os.replace): a reader sees the old file or the new one, never a part. The temporary
    name is unique, so a writer that does not hold the project lock (a hand edit's tool) cannot share it. When a
    later file cannot be written (a full disk, a read-only file), the ones already written get their old bytes back:
    a group_size edit left the TOML at 6 and the settings at 8, which validate then refused as disagreeing."""
    written: list[tuple[Path, bytes]] = []
    for path, old, new in changes.values():
        try:
            replace_whole(path, new, path.stat().st_mode & 0o7777)
        except OSError as exc:
            restored, lost = [], []
            for done, before in reversed(written):
                try:
                    replace_whole(done, before, done.stat().st_mode & 0o7777)
                    restored.append(done.name)
                except OSError:
                    lost.append(done.name)
            kept = (f"; {', '.join(restored)} restored as it was" if restored else "") + (
                f"; {', '.join(lost)} could not be restored and holds the edit" if lost else "")
            raise EditRefused(f"not written: {path.name}: {exc.strerror or type(exc).__name__}{kept}",
                              f"nothing changed; make {path} writable (or free disk space) and edit again") from exc
        written.append((path, old))


def replace_whole(path: Path, data: bytes, mode: int | None = None) -> None:
    """`path` replaced whole through a unique temporary name (os.replace): a reader sees the old file or the new
    one, never a part, and two writers never share a temporary file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".hermes-edit", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

"""`hermes-stack validate` on bad inputs, round 7b: a hub id the hub library refuses crashed validate on the GPU path;
a CSV named as the dataset took minutes and printed a line per row; answers with no number after #### could never
score; checkpoint folders the trainer cannot create, or that are the data volume's own entries; a file of
environments/ named like an installed library; the gateway key pasted as the inference key; port 0 shown as 80.

Same contract as test_validate_bad_inputs.py, whose machinery this reuses: the exact one-line messages, exit 2, no
call to the compose choke point, no new container, the key never printed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_config_rules import inputs
from test_validate_bad_inputs import GOOD_KEYFILE, GPU200, KEY, Case, build, run_case

from hermes_stack import hub
from hermes_stack.config import memory, rules
from hermes_stack.controller.cli import main
from hermes_stack.errors import Problem
from hermes_stack.keyfile import KeyFile

pytestmark = pytest.mark.usefixtures("isolated_secrets")

GPU80 = ["--device", "gpu", "--gpu-memory", "80"]
DATASET = [('dataset = "gsm8k"', 'dataset = "rows.jsonl"')]
CSV = [('dataset = "gsm8k"', 'dataset = "rows.csv"')]
CSV_TEXT = "question,answer\n" + "".join(f"What is {n}+1?,{n + 1}\n" for n in range(19_999))

H_HUB = ("expected a hub id (owner/name of letters, digits, -, _ and ., without -- or .., neither part starting or "
         "ending with - or ., at most 96 characters each) or a local model folder. Hint: copy the id from the model's "
         "hub page, e.g. Qwen/Qwen3-8B; write a local folder as ./path")
H_JSONL = ('expected one JSON object per line. Hint: JSONL is one JSON object per line, like {{"question": "…", '
           '"answer": "… #### 42"}}; a CSV or other table must be converted to that first')
H_NUMBER = ('expected a number there, as in "#### 42" (a sign, commas, a decimal point or a unit are fine). Hint: the '
            "reward compares the number after the last #### with the model's (reward.py); with none there no "
            "completion can ever score")
H_VOLUME = ("expected a folder of its own on the data volume (a relative path, or one under /data/checkpoints). Hint: "
            "relative paths land in <data>/checkpoints/; the seed uses ./temp/")
H_CONTROL = "expected a folder name of printable characters. Hint: remove the control character; "


def row(question: str, answer: str) -> str:
    return json.dumps({"question": question, "answer": answer}) + "\n"


# Answers math-verify reads as numbers (a fraction, currency, a unit, LaTeX math) between three it cannot read.
ANSWERS = ("#### 1/2", "#### seven", "#### $1,000", "#### 72.0", "#### NaN", "#### 18 apples", "#### -3",
           "#### $\\pi$", "#### ", "3 + 4 = 7\n#### 7")
ROWS = "".join(row(f"Question {n}?", answer) for n, answer in enumerate(ANSWERS, start=1))

MINE = ("from datasets import load_dataset\n"
        "import helpers\n"
        "from atroposlib.envs.base import BaseEnv\n\n\n"
        "class Mine(BaseEnv):\n"
        "    name = \"mine\"\n\n"
        "    async def get_next_item(self):\n"
        "        return helpers.item(load_dataset)\n\n"
        "    async def evaluate(self, *args, **kwargs):\n"
        "        return None\n\n"
        "    async def setup(self):\n"
        "        pass\n\n"
        "    async def collect_trajectories(self, item):\n"
        "        return None, []\n")
HELPERS = "import json\n\n\ndef item(load):\n    return json.dumps({})\n"
H_SHADOW = ("expected a module name only one of them has. Hint: rename {entry} (and the imports of it): the "
            "environment service puts environments/ first on sys.path, so one is imported in place of the other, "
            "for every library importing {module} too")

CASES = [
    # ---- a hub id huggingface_hub refuses: HFValidationError from the memory budget's cache lookup (exit 1)
    Case("model-path-trailing-full-stop", [
        "{json}: inference.model_path: found 'Qwen/Qwen3-8B.' (no such folder, and no hub id: '.' at the end of the "
        "name), " + H_HUB], json={"inference.model_path": "Qwen/Qwen3-8B."}, args=GPU200),
    Case("model-path-trailing-newline", [
        "{json}: inference.model_path: found 'Qwen/Qwen3-8B\\n' (no such folder, and no hub id: a control character "
        "U+000A), " + H_HUB], json={"inference.model_path": "Qwen/Qwen3-8B\n"}, args=GPU200),
    Case("model-path-double-hyphen", [
        "{json}: inference.model_path: found 'Qwen/Qwen3--8B' (no such folder, and no hub id: '--' in it), " + H_HUB],
         json={"inference.model_path": "Qwen/Qwen3--8B"}, args=GPU200),
    # expanduser raised RuntimeError ("Could not determine home directory"): exit 1
    Case("model-path-home-of-no-user", [
        ("{json}: inference.model_path: found '~nosuchuser7b/m' (no such folder: {root}/~nosuchuser7b/m), expected a "
         "local model folder holding config.json and the weights. Hint: copy or link the model there, or name a hub "
         "model such as Qwen/Qwen3-8B")], json={"inference.model_path": "~nosuchuser7b/m"}, args=GPU200),
    # ---- a CSV as the dataset: 11 lines and 26 s (20,000 rows), one line now
    Case("dataset-csv", [
        "{cdir}/rows.csv:1: line: found invalid JSON (Expecting value): 'question,answer' (the first of 20000 such "
        "lines), " + H_JSONL], toml=CSV, args=GPU80, files={"configs/rows.csv": CSV_TEXT}),
    Case("dataset-json-lists-and-a-bad-line", [
        "{cdir}/rows.jsonl:2: line: found a JSON list: '[\"1+1?\", \"#### 2\"]' (the first of 3 such lines), "
        + H_JSONL], toml=DATASET, args=GPU200,
         files={"configs/rows.jsonl": row("1+1?", "#### 2") + '["1+1?", "#### 2"]\n' + "{broken\n" + "42\n"}),
    # ---- answers with no number after #### (only the marker was checked): one line for the file
    Case("dataset-answers-without-a-number", [
        "{cdir}/rows.jsonl:2: answer: found 'seven' after the last #### (the first of 3 such lines), " + H_NUMBER],
         toml=DATASET, args=GPU200, files={"configs/rows.jsonl": ROWS}),
    Case("dataset-number-before-the-marker", [
        "{cdir}/rows.jsonl:1: answer: found '' after the last ####, " + H_NUMBER],
         toml=DATASET, args=GPU200, files={"configs/rows.jsonl": row("1+1?", "2 ####")}),
    # ---- checkpoint_dir: a folder the trainer cannot create, or one of the data volume's own entries
    Case("checkpoint-dir-nul", ["{json}: tinker.checkpoint_dir: found 'ck\\x00pt' (control character U+0000), "
                                + H_CONTROL + "the trainer cannot create a folder with a NUL in its name"],
         json={"tinker.checkpoint_dir": "ck\x00pt"}),
    Case("checkpoint-dir-newline", ["{json}: tinker.checkpoint_dir: found './temp/\\n' (control character U+000A), "
                                    + H_CONTROL + "it would name a folder nobody can see or type"],
         json={"tinker.checkpoint_dir": "./temp/\n"}),
    Case("checkpoint-dir-volume-root", [
        "{json}: tinker.checkpoint_dir: found '/data' (the data volume's root, beside weights/, metrics.jsonl and "
        "ready/), " + H_VOLUME], json={"tinker.checkpoint_dir": "/data"}),
    Case("checkpoint-dir-weights", [
        "{json}: tinker.checkpoint_dir: found '/data/weights' (the data volume's weights/, where the trainer exports "
        "and prunes step-<N> folders), " + H_VOLUME], algo="ppo", json={"tinker.checkpoint_dir": "/data/weights"}),
    Case("checkpoint-dir-metrics-file", [
        "{json}: tinker.checkpoint_dir: found '/data/metrics.jsonl' (the trainer's metrics file on the data volume), "
        + H_VOLUME], json={"tinker.checkpoint_dir": "/data/metrics.jsonl"}),
    Case("checkpoint-dir-ready-markers", [
        "{json}: tinker.checkpoint_dir: found '/data/ready/' (the data volume's ready/, the services' readiness "
        "markers), " + H_VOLUME], json={"tinker.checkpoint_dir": "/data/ready/"}),
    # ---- environments/datasets.py hides the datasets library from mine.py's import (ImportError in the container);
    # helpers.py, imported on purpose and installed nowhere, is fine
    Case("environment-file-named-like-a-library", [
        "environments/mine.py:1: import: found datasets, the name of both environments/datasets.py and a module the "
        "environment image installs, " + H_SHADOW.format(entry="environments/datasets.py", module="datasets")],
         toml=[('name = "gsm8k"', 'name = "mine"')],
         files={"environments/mine.py": MINE, "environments/helpers.py": HELPERS, "environments/datasets.py": "X = 1\n"}),
    # the standard library's json, imported by a helper the environment imports, and a package folder of that name
    Case("environment-package-named-like-the-stdlib", [
        "environments/helpers.py:1: import: found json, the name of both environments/json/ and a module the "
        "environment image installs, " + H_SHADOW.format(entry="environments/json/", module="json")],
         toml=[('name = "gsm8k"', 'name = "environments/mine.py"')],
         files={"environments/mine.py": MINE.replace("from datasets import load_dataset\n", "load_dataset = None\n"),
                "environments/helpers.py": HELPERS, "environments/json/__init__.py": ""}),
    # ---- port 0 was shown as port 80 (urlsplit's port 0 read as "no port")
    Case("atropos-url-port-0", [
        ("{json}: atropos.rollout_server_url: found port 0 (http://localhost:0), expected port 8000 ([atropos] "
         "api_port in {toml}). Hint: the services would wait for an Atropos that is not there; change one of the two")],
         json={"atropos.rollout_server_url": "http://localhost:0"}),
    Case("inference-url-port-0", [
        ("{json}: inference.base_url: found port 0 (http://localhost:0/v1), expected port 8001 (inference.port). Hint: "
         "the environment would call a port nobody serves")], algo="ppo",
         json={"inference.base_url": "http://localhost:0/v1"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_round7b_bad_input_is_one_line_each_exit_2_no_container(case, tmp_path, monkeypatch, capsys, compose_calls):
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


def test_a_csv_of_80000_lines_is_one_line(tmp_path, monkeypatch, capsys, compose_calls):
    """Was over 300 s and 11 lines: a Problem per line, de-duplicated by a list scan, and the file read five times
    (the time is bench/validate_speed.py's to measure; no test asserts one)."""
    text = "question,answer\n" + "".join(f"What is {n}+1?,{n + 1}\n" for n in range(79_999))
    case = Case("csv-80000", [(f"{{cdir}}/rows.csv:1: line: found invalid JSON (Expecting value): 'question,answer' "
                               f"(the first of 80000 such lines), {H_JSONL}")],
                toml=CSV, args=GPU80, files={"configs/rows.csv": text})
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


def test_a_valid_dataset_is_parsed_once_per_validate(tmp_path, monkeypatch, capsys):
    """Every row was parsed six times (the rows, each split's count, and all of it again for the configs/ check):
    1.6 s for 80,000 rows."""
    rows = "".join(row(f"Tom has {n} apples and buys 2. How many?", f"#### {n + 2}") for n in range(60))
    parsed = []
    loads = json.loads

    def counting(text, *args, **kwargs):
        if isinstance(text, str) and text.startswith('{"question": "Tom has'):
            parsed.append(text)
        return loads(text, *args, **kwargs)

    argv, _ = build(Case("ok", [], toml=DATASET, args=GPU200, files={"configs/rows.jsonl": rows}), tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(json, "loads", counting)
    assert main(argv) == 0, capsys.readouterr().err
    assert sorted(parsed) == sorted(rows.splitlines())


def test_check_removes_duplicates_without_comparing_each_finding_to_all_before(monkeypatch):
    """rules.check kept rule order with `p not in list`: quadratic in the findings (~4.5 million comparisons here).
    Counted, not timed: the comparisons a check makes, which a set keeps to the hash collisions."""
    many = [Problem("f", "k", str(n), "e") for n in range(3_000)]
    compared = []
    equal = Problem.__eq__
    monkeypatch.setattr(Problem, "__eq__", lambda a, b: compared.append(1) or equal(a, b))
    errors, cautions = rules.check(inputs("grpo"), rules=(lambda i: many + many[:3],))
    found = len(compared)
    monkeypatch.undo()
    assert (errors, cautions) == (many, [])
    assert found < 1_000, found


def test_the_gateway_key_as_the_inference_key_value_is_a_warning(tmp_path, monkeypatch, capsys):
    """The same effect as "api_key_env": "TAOTOKEN_API_KEY" (warned): the paid key reaches the inference container.
    Neither value is printed."""
    argv, fill = build(Case("same-key", [], keyfile=GOOD_KEYFILE + f"HERMES_INFERENCE_KEY={KEY}\n"), tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("warning: ")] == [
        (f"warning: {fill['kf']}: HERMES_INFERENCE_KEY: found the same value as TAOTOKEN_API_KEY, expected a key of "
         "its own (or no such line: one is then generated). Hint: the paid gateway key would also protect the local "
         "inference service and reach its container; remove the HERMES_INFERENCE_KEY line or put another key on it")]
    assert KEY not in err and KEY[-4:] not in err


def test_a_named_inference_key_with_the_gateway_value_is_a_warning():
    keys = KeyFile(path=Path("k.env"), values={"TAOTOKEN_API_KEY": KEY, "MY_KEY": KEY})
    got = rules.inference_key_is_not_the_gateway_key(inputs("grpo", settings={"inference.api_key_env": "MY_KEY"},
                                                            keyfile=keys))
    assert [(type(p), p.line()) for p in got] == [(rules.Caution, (
        "k.env: MY_KEY: found the same value as TAOTOKEN_API_KEY, expected a key of its own. Hint: the paid gateway "
        "key would also protect the local inference service and reach its container; put another key on the MY_KEY "
        "line"))]


@pytest.mark.parametrize("name", [
    "Qwen/Qwen3-8B", "_org/model_", "a/b", "Qwen/Qwen3-8B.", "Qwen/Qwen3-8B\n", "Qwen/-x", ".q/x", "a--b/c", "a/b..c",
    "a/b.git", "a/b.gi", "x" * 96 + "/y", "x" * 97 + "/y", "y/" + "x" * 97, "Qwen/Qwén", "Qwen/Qwen 3", "a/b/c",
])
def test_hub_ids_are_what_huggingface_hub_takes(name):
    """hermes_stack.hub mirrors validate_repo_id (org/name form) without importing huggingface_hub at validate time."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
        taken = name.count("/") == 1
    except HFValidationError:
        taken = False
    assert (hub.is_hub_id(name), hub.hub_id_flaw(name) is None) == (taken, taken)


def test_the_memory_budget_never_raises_on_a_name_the_hub_library_refuses(monkeypatch):
    """find_shape is also reached by the printed GPU split, outside the rule that refuses such a name."""
    monkeypatch.setattr(hub, "is_hub_id", lambda *args: True)  # as the old, looser pattern judged these
    assert memory.find_shape("Qwen/Qwen3-8B.") is None
    assert memory.find_shape("~nosuchuser7b/m") is None

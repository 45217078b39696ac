"""`hermes-stack validate` on bad inputs, round 4 (an exploratory sweep of ~155 mistakes, 2026-12-06): values that
pass but cannot train (both reward weights 0, rollouts longer than the trainer
takes), a key pasted with its code's `;`, the other algorithm's file copied
in (one line, not five), a --config-dir that is not a folder (one line, not one per file), and a key-file path
with `~`.

Same contract as test_validate_bad_inputs.py, whose machinery this reuses: the exact one-line messages, exit 2, no
call to the compose choke point, no new container, the key never printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_validate_bad_inputs import GOOD_KEYFILE, GPU200, KEY, Case, build, error_lines, run_case

from hermes_stack.controller.cli import main

pytestmark = pytest.mark.usefixtures("isolated_secrets")

ROOT = Path(__file__).resolve().parents[2]
ZERO_REWARDS = [("correctness_weight = 1.0", "correctness_weight = 0.0"), ("format_weight = 0.1", "format_weight = 0.0")]
H_KEYCHARS = ("expected a key of ASCII letters, digits, '-', '_' and '.'. Hint: remove the trailing {tail}; paste the "
              "key from your account page over the whole value of TAOTOKEN_API_KEY")

CASES = [
    Case("grpo-zero-rewards", [("{toml}: reward: found correctness_weight 0 and format_weight 0, expected at least one "
                               "weight > 0 (the seed uses 1.0 and 0.1). Hint: with both at 0 every reward is 0 and "
                               "nothing is learned")], toml=ZERO_REWARDS),
    Case("ppo-zero-rewards", [("{toml}: reward: found correctness_weight 0 and format_weight 0, expected at least one "
                              "weight > 0 (the seed uses 1.0 and 0.1). Hint: with both at 0 every reward is 0 and "
                              "nothing is learned")], algo="ppo", toml=ZERO_REWARDS),
    Case("ppo-file-copied-over-grpo", [("{toml}: algorithm.name: found 'ppo', expected 'grpo' (from --algo grpo). "
                                       "Hint: run with --algo ppo, or restore name = \"grpo\"; the ppo files are "
                                       "config_ppo.toml/settings_ppo.json")],
         files={"configs/config_grpo.toml": (ROOT / "configs" / "config_ppo.toml").read_text()}),
    Case("grpo-file-copied-over-ppo", [("{toml}: algorithm.name: found 'grpo', expected 'ppo' (from --algo ppo). "
                                       "Hint: run with --algo grpo, or restore name = \"ppo\"; the grpo files are "
                                       "config_grpo.toml/settings_grpo.json")], algo="ppo",
         files={"configs/config_ppo.toml": (ROOT / "configs" / "config_grpo.toml").read_text()}),
    Case("rollouts-longer-than-the-trainer-takes",
         [("{toml}: rollout.max_token_length: found 16000 with tinker.max_token_trainer_length 9000 in {json}, "
           "expected at most 9000. Hint: the trainer takes sequences below 9000 tokens and Atropos environments drop "
           "every group with a longer one; lower max_token_length (raising max_token_trainer_length needs --unlock)")],
         toml=[("max_token_length = 2048", "max_token_length = 16000")], args=["--device", "gpu", "--gpu-memory", "2000"]),
    Case("api-key-env-holds-the-key-offline",
         [("{json}: inference.api_key_env: found a key (sk-…cdef), expected the name of a key-file variable, e.g. "
           "HERMES_INFERENCE_KEY. Hint: put the key in the key file as HERMES_INFERENCE_KEY=… and leave api_key_env "
           "out (the default names it); a key in {json} is in clear wherever the file is copied")],
         json={"inference.api_key_env": KEY}),
    Case("api-key-env-holds-the-key-with-a-key-file",
         [("{json}: inference.api_key_env: found a key (sk-…cdef), expected the name of a key-file variable, e.g. "
           "HERMES_INFERENCE_KEY. Hint: put the key in the key file as HERMES_INFERENCE_KEY=… and leave api_key_env "
           "out (the default names it); a key in {json} is in clear wherever the file is copied")],
         json={"inference.api_key_env": KEY}, keyfile=GOOD_KEYFILE),
    Case("api-key-env-not-a-name",
         [("{json}: inference.api_key_env: found 'my inference key', expected the name of a key-file variable, e.g. "
           "HERMES_INFERENCE_KEY. Hint: a name is ASCII letters, digits and _, not starting with a digit")],
         json={"inference.api_key_env": "my inference key"}),
    Case("keyfile-empty", [("{kf}: (file): found an empty file, expected NAME=value lines (TAOTOKEN_API_KEY, "
                           "TAOTOKEN_BASE_URL). Hint: cp .env.taotoken.example {kf} and fill it in; to run offline, "
                           "leave out --keyfile and $HERMES_KEYFILE")], keyfile=""),
    Case("keyfile-only-comments", [("{kf}: (file): found only comments and blank lines, expected NAME=value lines "
                                   "(TAOTOKEN_API_KEY, TAOTOKEN_BASE_URL). Hint: cp .env.taotoken.example {kf} and "
                                   "fill it in; to run offline, leave out --keyfile and $HERMES_KEYFILE")],
         keyfile="# the gateway key goes here\n\n# TAOTOKEN_BASE_URL later\n"),
    Case("section-name-twice-as-a-prefix",
         [("{toml}: rollout.rollout: found an unknown key, expected one of batch_size, group_size, max_token_length, "
           "temperature, top_p. Hint: inside [rollout] write batch_size = … without the rollout. prefix")],
         toml=[("batch_size = 32", "rollout.batch_size = 32")]),
    Case("object-name-twice-in-json",
         [("{json}: trainer.trainer: found an unknown key, expected one of engine, epochs, lr_decay_start, "
           "lr_schedule, max_staleness, micro_batch_size, min_lr_ratio, minibatches, num_steps. Hint: inside the "
           "\"trainer\" object write \"num_steps\" directly, not in a \"trainer\" object")],
         json={"trainer.trainer": {"num_steps": 10}}),
    Case("section-as-an-inline-table-under-another",
         [("{toml}: algorithm.reward: found an unknown key, expected one of advantage_estimator, clip_epsilon, "
           "entropy_coef, gamma, kl_coef, kl_penalty, lam, name, value_loss_coef. Hint: [reward] is a section of its "
           "own: a key belongs to the [section] above it, so write [reward] with its keys under it, or move this line "
           "above the first [section]")],
         toml=[("[reward]\ncorrectness_weight = 1.0\nformat_weight = 0.1\n",
                "reward = { correctness_weight = 1.0, format_weight = 0.1 }\n")]),
    Case("environment-name-with-underscore", [("{toml}: environment.name: found 'hermes_math', expected an "
                                               "environment's name exactly ('hermes-math' is one). Hint: did you mean "
                                               "hermes-math? Names are the classes' `name` attributes")],
         toml=[('name = "gsm8k"', 'name = "hermes_math"')]),
    Case("environment-name-in-capitals", [("{toml}: environment.name: found 'GSM8K', expected an environment's name "
                                           "exactly ('gsm8k' is one). Hint: did you mean gsm8k? Names are the "
                                           "classes' `name` attributes")],
         toml=[('name = "gsm8k"', 'name = "GSM8K"')]),
    Case("keyfile-utf16", [("{kf}:1: (file): found a UTF-16 file (its byte-order mark), expected UTF-8 text. Hint: "
                            "save it as \"UTF-8\" (not \"Unicode\"); `iconv -f UTF-16 -t UTF-8` converts it")],
         keyfile=GOOD_KEYFILE.encode("utf-16")),
    Case("toml-utf16", [("{toml}:1: (file): found a UTF-16 file (its byte-order mark), expected UTF-8 text. Hint: "
                         "save it as \"UTF-8\" (not \"Unicode\"); `iconv -f UTF-16 -t UTF-8` converts it")],
         files={"configs/config_grpo.toml": (ROOT / "configs" / "config_grpo.toml").read_text().encode("utf-16")}),
    Case("json-null-value", [("{json}: trainer.num_steps: found null, expected an integer. Hint: write a value, or "
                              "leave num_steps out for its default")], json={"trainer.num_steps": None}),
    Case("toml-array-of-tables", [("{toml}: reward: found an array of tables, expected a table. Hint: [[reward]] "
                                   "makes an array of tables; write [reward] with single brackets")],
         toml=[("[reward]", "[[reward]]")]),
    Case("key-with-semicolon", ["{kf}:1: TAOTOKEN_API_KEY: found a value ending in ';', " + H_KEYCHARS.format(tail="';'")],
         keyfile=GOOD_KEYFILE.replace(KEY, KEY + ";")),
    Case("key-with-backslash", ["{kf}:1: TAOTOKEN_API_KEY: found a value ending in '\\\\', "
                                + H_KEYCHARS.format(tail="'\\\\'")],
         keyfile=GOOD_KEYFILE.replace(KEY, KEY + "\\")),
    # ---- the sweep's leftovers: what is there named as it is, and a hint for every range
    Case("json-windows-path", [("{json}:{line}:{col}: syntax: found invalid \\escape, expected valid JSON. Hint: a "
                                "backslash starts an escape in JSON: write it twice (C:\\\\data) or use forward "
                                "slashes (C:/data)")],
         json_text=lambda text: text.replace('"./temp/"', '"C:\\Users\\me\\temp"'),
         line_of='"C:\\Users', col_after='"checkpoint_dir": "C:'),
    Case("dataset-is-a-folder", [("{toml}: [environment] dataset: found 'data' (a folder, not a file: {cdir}/data), "
                                  "expected \"gsm8k\", \"offline-arith\" or an existing JSONL file. Hint: name the "
                                  "JSONL file inside it: data/rows.jsonl")],
         toml=[('dataset = "gsm8k"', 'dataset = "data"')],
         files={"configs/data/rows.jsonl": '{"question": "1+1?", "answer": "#### 2"}\n'}, args=GPU200),
    Case("dataset-is-a-folder-without-jsonl", [("{toml}: [environment] dataset: found 'data' (a folder, not a file: "
                                                "{cdir}/data), expected \"gsm8k\", \"offline-arith\" or an existing "
                                                "JSONL file. Hint: name a JSONL file; this folder holds no .jsonl file")],
         toml=[('dataset = "gsm8k"', 'dataset = "data"')], files={"configs/data/notes.txt": "rows come later"},
         args=GPU200),
    Case("dataset-is-a-device", [("{toml}: [environment] dataset: found '/dev/zero' (not a regular file: /dev/zero), "
                                  "expected \"gsm8k\", \"offline-arith\" or an existing JSONL file. Hint: name a "
                                  "JSONL file saved on disk; a device, pipe or socket cannot be read as a dataset")],
         toml=[('dataset = "gsm8k"', 'dataset = "/dev/zero"')], args=GPU200),
    # A class named like the built-in no longer breaks a config that selects the built-in (a warning says which runs);
    # selecting its file by path is refused only when the file holds a second environment to choose from.
    Case("user-environment-with-a-builtins-name-in-a-file-of-two", [(
        "{toml}: environment.name: found 'environments/clash.py' (the file defines 2 environments: gsm8k (Gsm8kClash, "
        "line 4), other (Other, line 8)), expected a file with one environment. Hint: select one by its name instead "
        "of the file; gsm8k is the built-in environment's name: give that class a `name` of its own to select it")],
         toml=[('name = "gsm8k"', 'name = "environments/clash.py"')],
         files={"environments/clash.py": ("from atroposlib.envs.base import BaseEnv\n\n\nclass Gsm8kClash(BaseEnv):\n"
                                          "    name = \"gsm8k\"\n\n\nclass Other(BaseEnv):\n    name = \"other\"\n")}),
    Case("environment-file-outside-the-folder", [("{toml}: environment.name: found '../envs/good.py' (outside "
                                                  "environments/), expected a file in environments/, e.g. "
                                                  "environments/my_env.py. Hint: move it into {root}/environments: only "
                                                  "that folder reaches the containers")],
         toml=[('name = "gsm8k"', 'name = "../envs/good.py"')]),
    # "auto: …, torch: …" describes the values, not the setting: the hint is the git line alone
    Case("engine-unknown", [("{json}: trainer.engine: found \"jax\", expected 'auto', 'torch' or 'tinker'. Hint: "
                            "`git diff configs/` shows what changed")], json={"trainer.engine": "jax"}),
    Case("model-path-no-hub-name", [("{json}: inference.model_path: found 'a/b/c' (no such folder: {root}/a/b/c), "
                                     "expected a local model folder holding config.json and the weights. Hint: copy or "
                                     "link the model there, or name a hub model such as Qwen/Qwen3-8B")],
         json={"inference.model_path": "a/b/c"}, args=GPU200),
    Case("model-path-is-a-file", [("{json}: inference.model_path: found 'models/m1/model.safetensors' (a file, not a "
                                   "folder: {root}/models/m1/model.safetensors), expected a local model folder holding "
                                   "config.json and the weights. Hint: name the folder that holds it: models/m1")],
         json={"inference.model_path": "models/m1/model.safetensors"},
         files={"models/m1/model.safetensors": "weights"}, args=GPU200),
    # Caught before only when the environment counted its prompts' tokens, after the build and the bring-up.
    Case("system-prompt-longer-than-a-sequence",
         [("{toml}: environment.system_prompt: found 20000 words (at least 20000 tokens), expected a system prompt "
           "that leaves every prompt at least 4 new tokens within rollout.max_token_length 2048. Hint: shorten "
           "[environment] system_prompt (every prompt carries it), or raise rollout.max_token_length")],
         toml=[('split = "train"', 'split = "train"\nsystem_prompt = "' + "Think. " * 20000 + '"')], args=GPU200),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_each_exit_2_nothing_started(case, tmp_path, monkeypatch, capsys, compose_calls):
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_a_config_dir_that_is_not_a_folder_is_one_line(kind, tmp_path, monkeypatch, capsys, compose_calls):
    monkeypatch.chdir(tmp_path)
    given = tmp_path / "nope"
    if kind == "a file":
        given.write_text("")
    rc = main(["validate", "--algo", "grpo", "--config-dir", str(given), "--device", "cpu"])
    found = "no such folder" if kind == "missing" else "a file, not a folder"
    assert error_lines(capsys.readouterr().err) == [
        (f"{given}: (folder): found {found}, expected the folder holding config_grpo.toml and settings_grpo.json. "
        "Hint: run from the checkout, where configs/ sits next to the Makefile; validate and test-inference also take "
        "--config-dir")]
    assert rc == 2 and compose_calls == []


@pytest.mark.parametrize("source", ["option", "environment"])
def test_a_key_file_path_with_a_tilde_is_the_home_folders(source, tmp_path, monkeypatch, capsys, compose_calls):
    """A quoted '~/k.env' (or HERMES_KEYFILE=~/k.env from a Makefile or a compose file) reaches validate unexpanded;
    before, it said `no such file` and told the user to create the file it would still not find."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "k.env").write_text(GOOD_KEYFILE)
    (home / "k.env").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    argv = ["validate", "--algo", "grpo", "--config-dir", str(ROOT / "configs"), "--device", "cpu"]
    if source == "option":
        argv += ["--keyfile", "~/k.env"]
    else:
        monkeypatch.setenv("HERMES_KEYFILE", "~/k.env")
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"key file {home / 'k.env'}: TAOTOKEN_API_KEY=" in out
    assert KEY not in out + err and compose_calls == []


def _line_of(text: str, needle: str, start: int = 0) -> int:
    """1-based number of the first line from line `start` (0-based) on that holds `needle`."""
    return next(n for n, line in enumerate(text.splitlines(), 1) if n > start and needle in line)


@pytest.mark.parametrize("what", ["key", "section"])
def test_a_toml_key_or_section_written_twice_names_both_lines(what, tmp_path, monkeypatch, capsys, compose_calls):
    """tomllib says "Cannot overwrite a value" or "Cannot declare ('algorithm',) twice"; the user wants the two
    lines, as a JSON file's duplicate key gets."""
    cdir = tmp_path / "configs"
    cdir.mkdir()
    for name in ("config_grpo.toml", "settings_grpo.json"):
        (cdir / name).write_text((ROOT / "configs" / name).read_text())
    toml = cdir / "config_grpo.toml"
    text = toml.read_text()
    if what == "key":
        text = text.replace("gamma = 1.0", "gamma = 1.0\ngamma = 0.9", 1)
        first, second = _line_of(text, "gamma = 1.0"), _line_of(text, "gamma = 0.9")
        expected = (f"{toml}:{second}: algorithm.gamma: found a second gamma (the first is on line {first}), expected "
                    "each key once per section. Hint: delete one of the two; TOML refuses a key written twice")
    else:
        text += "\n[algorithm]\nlam = 0.9\n"
        first = _line_of(text, "[algorithm]")
        second = _line_of(text, "[algorithm]", first)
        expected = (f"{toml}:{second}: [algorithm]: found a second [algorithm] section (the first is on line {first}), "
                    "expected each section once. Hint: move this section's keys under the first [algorithm] and "
                    "delete this header")
    toml.write_text(text)
    monkeypatch.chdir(tmp_path)
    rc = main(["validate", "--algo", "grpo", "--config-dir", str(cdir), "--device", "cpu"])
    assert error_lines(capsys.readouterr().err) == [expected]
    assert rc == 2 and compose_calls == []


def test_an_empty_keyfile_option_names_the_key_file_in_that_folder(tmp_path, monkeypatch, capsys, compose_calls):
    """`--keyfile ''` (an unset shell variable) is the current folder: the hint names the key file in it, not a
    `cp .env.taotoken.example .`, which would copy the example under its own name."""
    (tmp_path / ".env.taotoken").write_text(GOOD_KEYFILE)
    monkeypatch.chdir(tmp_path)
    rc = main(["validate", "--algo", "grpo", "--config-dir", str(ROOT / "configs"), "--device", "cpu",
               "--keyfile", ""])
    assert error_lines(capsys.readouterr().err) == [
        (".: (file): found a directory, expected a key file of NAME=value lines. Hint: name the key file itself: "
        "--keyfile .env.taotoken")]
    assert rc == 2 and compose_calls == []


# ---------------------------------------------------------------- advice (round 6): valid, one warning each

H_GREEDY = ("Hint: near-greedy sampling gives a group near-identical completions; GRPO drops every group whose scores "
            "are all equal (the environment's log counts them)")
ADVICE = [
    ("grpo-near-greedy-temperature", [("temperature = 0.8 ", "temperature = 0.05 ")],
     ["{toml}: rollout.temperature: found 0.05 with group_size 8, expected at least 0.1 for GRPO (the seed uses 0.8). "
      + H_GREEDY]),
    ("grpo-near-greedy-top-p", [("top_p = 0.95", "top_p = 1e-09")],
     ["{toml}: rollout.top_p: found 1e-09 with group_size 8, expected at least 0.1 for GRPO (the seed uses 0.95). "
      + H_GREEDY]),
    ("ppo-greedy", [("temperature = 0.7 ", "temperature = 0.0 ")],
     [("{toml}: rollout.temperature: found 0 for PPO, expected a temperature > 0 (the seed uses 0.7). Hint: greedy "
      "rollouts explore nothing, and the importance ratio reads them as samples of the policy at temperature 1")]),
    ("fewshot-without-system-prompt", [("[environment]\n", "[environment]\nfewshot = 2\n")],
     [("{toml}: environment.fewshot: found 2 without system_prompt, expected a system_prompt beside it (the solved "
      "examples follow the system message). Hint: set [environment] system_prompt, or fewshot = 0: without a system "
      "prompt no example is shown")]),
]


def test_a_long_system_prompt_is_valid_where_it_is_never_sent(tmp_path, monkeypatch, capsys, compose_calls):
    """On CPU the embedded profile trains offline-arith, whose prompts are the bare sums: no system prompt is sent,
    so its length (past the profile's 16 tokens) is no reason to refuse (a review found this false refusal)."""
    argv, _ = build(Case("long-system-prompt-on-cpu", [], toml=[('split = "train"', 'split = "train"\nsystem_prompt = "'
                                                                + "Think. " * 40 + '"')]), tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0, capsys.readouterr().err
    assert "system_prompt" not in capsys.readouterr().err and compose_calls == []


@pytest.mark.parametrize(("case_id", "toml", "expected"), ADVICE, ids=[a[0] for a in ADVICE])
def test_settings_that_train_poorly_are_a_warning_and_still_valid(case_id, toml, expected, tmp_path, monkeypatch,
                                                                  capsys, compose_calls):
    """Accepted before without a word: sampling so near greedy that GRPO's groups rarely differ (0 itself is
    refused), and solved examples that are never shown."""
    argv, fill = build(Case(case_id, [], toml=toml, algo="ppo" if case_id.startswith("ppo") else "grpo"), tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert [line.removeprefix("warning: ") for line in err.splitlines() if line.startswith("warning: ")] == [
        line.format(**fill) for line in expected]
    assert compose_calls == []


# ---------------------------------------------------------------- the key file (round 6)

ROUND6_KEYFILE = [
    Case("keyfile-full-width-equals", [
        ("{kf}:1: TAOTOKEN_API_KEY: found a line without =, expected NAME=value on one line. Hint: type = instead of "
         "\uff1d (U+FF1D, a full-width equals sign an input method types)")],
        keyfile=GOOD_KEYFILE.replace(f"TAOTOKEN_API_KEY={KEY}", f"TAOTOKEN_API_KEY\uff1d{KEY}")),
    Case("keyfile-yaml-style", [
        ("{kf}:1: TAOTOKEN_API_KEY: found a line python-dotenv cannot read (TAOTOKEN_API_KEY: sk-…cdef), expected NAME=value. "
         "Hint: write NAME=value: `NAME: value` is YAML, and this is a dotenv file")],
        keyfile=GOOD_KEYFILE.replace(f"TAOTOKEN_API_KEY={KEY}", f"TAOTOKEN_API_KEY: {KEY}")),
]


@pytest.mark.parametrize("case", ROUND6_KEYFILE, ids=[c.id for c in ROUND6_KEYFILE])
def test_a_key_file_line_typed_another_way_is_one_line_naming_it(case, tmp_path, monkeypatch, capsys, compose_calls):
    """Round 6: a full-width = (an input method's) and YAML's `NAME: value` each gave two lines, the second saying
    the name had no line at all."""
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


def test_the_summary_does_not_show_a_tinker_key_no_service_receives(tmp_path, capsys, compose_calls):
    """A TINKER_API_KEY defaulted from TAOTOKEN_API_KEY is only checked; compose_env keeps it out of the trainer, so
    the summary must not list it as if the stack had one."""
    path = tmp_path / "k.env"
    path.write_text(GOOD_KEYFILE)
    path.chmod(0o600)
    rc = main(["validate", "--algo", "grpo", "--config-dir", str(ROOT / "configs"), "--device", "cpu",
               "--keyfile", str(path)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    shown = next(line for line in out.splitlines() if line.strip().startswith("key file"))
    assert "TAOTOKEN_API_KEY=" in shown and "TINKER_API_KEY" not in shown

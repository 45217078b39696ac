"""`hermes-stack validate` on bad inputs, round 3 (issue 25): secrets where no name says so, key-file values that
cannot be keys, hints that fit the situation, output size, settings valid alone but not together, the dataset as the
environment loads it, the controller's environment variables. The Makefile's variables: test_makefile_variables.py.

Same contract as test_validate_bad_inputs.py, whose machinery this reuses: the exact one-line messages, exit 2, no
call to the compose choke point, no new container, the key never printed. test_no_case_prints_a_secret runs every
case of the four modules again and looks for any 8-character piece of any secret in everything printed.
"""

from __future__ import annotations

import json

import pytest
from test_validate_bad_inputs import CASES as ROUND_1
from test_validate_bad_inputs import DELETE, GOOD_KEYFILE, GPU200, H_LOG, H_SERVER, KEY, Case, build, run_case
from test_validate_bad_inputs_more import CASES as ROUND_2
from test_validate_bad_inputs_round4 import CASES as ROUND_4

from hermes_stack import keyfile as kf
from hermes_stack.controller.cli import main

pytestmark = pytest.mark.usefixtures("isolated_secrets")

# Built here so no key-like literal is committed; they authenticate nowhere.
PW = "pw-" + "0123456789abcdef"
OTHER = "sk-" + "live" + "0123456789abcdefXY"
H_PASTE = "Hint: paste the key from your account page over the whole value of TAOTOKEN_API_KEY"
H_CLEAR = "Hint: {name} is printed in clear; the key belongs on the TAOTOKEN_API_KEY line"
H_SHELL = ("expected the key itself. Hint: the key file is read, not run by a shell: paste the key's value, not a "
           "variable holding it")
H_ROW = 'Hint: write each row on one line like {{"question": "…", "answer": "… #### 42"}}'
JSONL = "rows.jsonl"
DATASET = [('dataset = "gsm8k"', f'dataset = "{JSONL}"')]


def rows(n: int, start: int = 0) -> str:
    return "".join(json.dumps({"question": f"{i}+1?", "answer": f"#### {i + 1}"}) + "\n" for i in range(start, n))


def keyfile_with(old: str, new: str) -> str:
    assert old in GOOD_KEYFILE
    return GOOD_KEYFILE.replace(old, new)


CASES = [
    # ---- trainer.minibatches beyond the batch (issue 22's key)
    Case("minibatches-beyond-the-batch", [("{json}: trainer.minibatches: found 300, expected at most the batch's 256 "
                                           "sequences (batch_size 32 x group_size 8). Hint: each minibatch is an "
                                           "optimiser step on a share of one batch; 1 trains on the whole batch")],
         json={"trainer.minibatches": 300}),
    # ---- secrets where no name says "secret": URLs and keys on the wrong line
    Case("base-url-userinfo", [("{kf}:2: TAOTOKEN_BASE_URL: found https://…@taotoken.net/api, expected the gateway "
                                "root without a user name or password. Hint: set "
                                "TAOTOKEN_BASE_URL=https://taotoken.net/api and put the key in TAOTOKEN_API_KEY")],
         keyfile=keyfile_with("https://taotoken.net/api", f"https://alice:{PW}@taotoken.net/api")),
    Case("base-url-token-in-query", [("{kf}:2: TAOTOKEN_BASE_URL: found https://taotoken.net/api?token=…, expected the "
                                      "gateway root without ?query or #fragment. Hint: set "
                                      "TAOTOKEN_BASE_URL=https://taotoken.net/api; clients append paths to it")],
         keyfile=keyfile_with("https://taotoken.net/api", f"https://taotoken.net/api?token={PW}")),
    Case("inference-url-userinfo-wrong-port", [("{json}: inference.base_url: found port 8002 "
                                                "(http://…@localhost:8002/v1), expected port 8001 (inference.port). "
                                                "Hint: the environment would call a port nobody serves")],
         json={"inference.base_url": f"http://bob:{PW}@localhost:8002/v1"}),
    Case("rollout-url-key-in-query-wrong-port", [("{json}: atropos.rollout_server_url: found port 8080 "
                                                  "(http://localhost:8080/?key=…), expected port 8000 ([atropos] "
                                                  "api_port in {toml}). Hint: the services would wait for an Atropos "
                                                  "that is not there; change one of the two")],
         json={"atropos.rollout_server_url": f"http://localhost:8080/?key={PW}"}),
    Case("key-pasted-on-the-model-line", [("{kf}:3: TAOTOKEN_MODEL: found a value shaped like a key (sk-…efXY), "
                                           "expected a model name, e.g. claude-3-5-sonnet. "
                                           + H_CLEAR.format(name="TAOTOKEN_MODEL"))],
         keyfile=keyfile_with("TAOTOKEN_MODEL=m1", f"TAOTOKEN_MODEL={OTHER}")),
    Case("key-pasted-on-the-base-url-line", [("{kf}:2: TAOTOKEN_BASE_URL: found a value shaped like a key (sk-…efXY), "
                                              "expected the gateway root, e.g. https://taotoken.net/api. "
                                              + H_CLEAR.format(name="TAOTOKEN_BASE_URL"))],
         keyfile=keyfile_with("https://taotoken.net/api", OTHER)),
    # ---- key-file values that cannot be a key
    Case("key-doubled-paste", [("{kf}:1: TAOTOKEN_API_KEY: found the same 24 characters twice (a doubled paste), "
                                f"expected the key once. {H_PASTE}, once")], keyfile=keyfile_with(KEY, KEY + KEY)),
    Case("wandb-key-doubled-paste", [("{kf}:4: WANDB_API_KEY: found the same 20 characters twice (a doubled paste), "
                                      "expected the key once. Hint: paste the key from your account page over the "
                                      "whole value of WANDB_API_KEY, once")],
         keyfile=GOOD_KEYFILE + "WANDB_API_KEY=" + "wandb0123456789abcde" * 2 + "\n"),
    Case("key-with-its-own-name-inside", [("{kf}:1: TAOTOKEN_API_KEY: found a value with the name TAOTOKEN_API_KEY "
                                           "inside, expected the key itself. Hint: write TAOTOKEN_API_KEY=<key> on one "
                                           "line; the value starts after the first =")],
         keyfile=keyfile_with(f"TAOTOKEN_API_KEY={KEY}", f"TAOTOKEN_API_KEY=TAOTOKEN_API_KEY={KEY}")),
    Case("key-shell-variable", ["{kf}:1: TAOTOKEN_API_KEY: found shell syntax ($…) in the value, " + H_SHELL],
         keyfile=keyfile_with(KEY, "$MY_GATEWAY_KEY")),
    Case("key-shell-braces", ["{kf}:1: TAOTOKEN_API_KEY: found shell syntax ($…) in the value, " + H_SHELL],
         keyfile=keyfile_with(KEY, "${MY_GATEWAY_KEY}")),
    Case("key-shell-command", ["{kf}:1: TAOTOKEN_API_KEY: found shell syntax ($…) in the value, " + H_SHELL],
         keyfile=keyfile_with(KEY, "$(pass show taotoken)")),
    Case("key-broken-over-two-lines", [("{kf}:2: (line): found a line without = right after the TAOTOKEN_API_KEY line "
                                        "(line 1), expected NAME=value on one line. Hint: a value broken over two "
                                        "lines? join line 2 to line 1")],
         keyfile=keyfile_with(KEY, KEY[:12] + "\n" + KEY[12:])),
    Case("key-alone-on-a-line", [("{kf}:5: (line): found a line without =, expected NAME=value on one line. Hint: "
                                  "write NAME=value, or start the line with # to make it a comment")],
         keyfile=GOOD_KEYFILE + "\n" + OTHER + "\n"),
    # ---- hints that fit the situation
    Case("toml-typographic-quotes", [("{toml}:{line}:{col}: syntax: found invalid value, expected valid TOML. Hint: "
                                      "line {line} has typographic quotes or spaces (U+201C U+201D), as an editor or "
                                      "chat window types them; retype them as plain \" ' and spaces")],
         toml=[('name = "grpo"', "name = \u201cgrpo\u201d")], line_of="name = \u201cgrpo", col_after="name = "),
    Case("json-typographic-quotes", [("{json}:{line}:{col}: syntax: found expecting value, expected valid JSON. Hint: "
                                      "line {line} has typographic quotes or spaces (U+201C U+201D), as an editor or "
                                      "chat window types them; retype them as plain \" ' and spaces")],
         json_text=lambda t: t.replace('"server": "sglang"', '"server": \u201csglang\u201d'),
         line_of='"server": \u201c', col_after='"server": '),
    Case("toml-key-in-the-wrong-section", [("{toml}: rollout.kl_coef: found an unknown key, expected one of "
                                            "batch_size, group_size, max_token_length, temperature, top_p. Hint: "
                                            "kl_coef belongs in [algorithm]; move it there")],
         toml=[("kl_coef = 0.1 ", "# kl_coef moved "), ("top_p = 0.95", "top_p = 0.95\nkl_coef = 0.1")]),
    Case("json-key-in-the-wrong-section", [("{json}: tinker.num_steps: found an unknown key, expected one of "
                                            "checkpoint_dir, learning_rate, lora_rank, max_token_trainer_length, "
                                            "save_checkpoint_interval. Hint: num_steps belongs in the \"trainer\" "
                                            "object; move it there")],
         json={"tinker.num_steps": 200, "trainer.num_steps": DELETE}),
    Case("keyfile-is-dev-null", [("/dev/null: (file): found a character device, expected a regular key file of "
                                  "NAME=value lines. Hint: point --keyfile or $HERMES_KEYFILE at a regular file such "
                                  "as .env.taotoken; without one, leave both out for offline mode")],
         keyfile_kind="missing", env={"HERMES_KEYFILE": "/dev/null"}),
    Case("model-config-a-list-names-the-setting", [("{json}: inference.model_path: found './models/m' "
                                                    "(models/m/config.json: a JSON list), expected a model folder "
                                                    "holding a JSON object. Hint: the model folder's config.json "
                                                    "comes with the weights; copy it again")],
         json={"inference.model_path": "./models/m"}, args=GPU200, files={"models/m/config.json": "[]"}),
    # ---- output size
    Case("blob-pasted-as-log-level", [("{toml}: atropos.log_level: found \"" + "A" * 40 + "…\" (6000 characters), "
                                       "expected 'debug', 'info', 'warning' or 'error'." + H_LOG)],
         toml=[('log_level = "info"', f'log_level = "{"A" * 6000}"')]),
    Case("blob-pasted-as-server", [("{json}: inference.server: found \"" + "x" * 40 + "…\" (5000 characters), "
                                    "expected 'sglang' or 'builtin'." + H_SERVER)], json={"inference.server": "x" * 5000}),
    Case("many-unknown-keys-capped", [f"{{toml}}: reward.extra_{n}: found an unknown key, expected one of "
                                      "correctness_weight, format_weight, judge, judge_style, judge_timeout_s. Hint: "
                                      "remove it" for n in range(10)]
         + [("{toml}: (more): found 4 more problems in this file, expected at most 10 shown per file. Hint: fix the "
            "ones above and run validate again")],
         toml=[("format_weight = 0.1", "format_weight = 0.1\n" + "".join(f"extra_{n} = 1\n" for n in range(14)))]),
    Case("empty-toml", [("{toml}: (file): found an empty file, expected the [atropos], [environment], [rollout], "
                         "[algorithm] and [reward] sections. Hint: restore it from git (`git checkout -- {toml}`)")],
         toml=[("", "")], files={}),
    Case("json-file-as-key-file", [("{kf}: (file): found a JSON document, expected a key file of NAME=value lines. "
                                    "Hint: the key file is .env.taotoken (cp .env.taotoken.example .env.taotoken); "
                                    "JSON settings belong in configs/settings_<algo>.json")],
         keyfile=json.dumps({"tinker": {"lora_rank": 32}, "inference": {"port": 8001},
                             "algorithm": {"name": "grpo"}}, indent=2)),
    Case("dataset-pretty-printed-json", [f"{{cdir}}/{JSONL}: (file): found a JSON document spread over several lines, "
                                         "expected JSONL: one JSON object per line. " + H_ROW],
         toml=DATASET, args=GPU200,
         files={f"configs/{JSONL}": json.dumps([json.loads(r) for r in rows(7).splitlines()], indent=2)}),
    # ---- settings valid alone, not together
    Case("two-services-one-port", [("{json}: inference.port: found 8000, also [atropos] api_port in {toml}, expected "
                                    "a port of its own. Hint: two services cannot publish one host port; the seed uses "
                                    "8000 for Atropos and 8001 for inference")],
         json={"inference.port": 8000, "inference.base_url": "http://localhost:8000/v1"}),
    Case("grpo-greedy-groups", [("{toml}: rollout.temperature: found 0.0 with group_size 8, expected a temperature > 0 "
                                 "for GRPO (the seed uses 0.8). Hint: greedy sampling gives a group identical "
                                 "completions and equal scores; GRPO drops every such group, so nothing is learned")],
         toml=[("temperature = 0.8", "temperature = 0.0")]),
    Case("judge-offline", [("{toml}: reward.judge: found true while offline (no key file), expected false, or a key "
                            "file with the gateway's key. Hint: the LLM judge calls the gateway; set judge = false or "
                            "create .env.taotoken")],
         toml=[("format_weight = 0.1", "format_weight = 0.1\njudge = true")]),
    Case("judge-without-model", [("{toml}: reward.judge: found true without TAOTOKEN_MODEL in {kf}, expected false, or "
                                  "the judge's model named in the key file. Hint: add TAOTOKEN_MODEL=… to {kf} or set "
                                  "judge = false")],
         toml=[("format_weight = 0.1", "format_weight = 0.1\njudge = true")],
         keyfile=keyfile_with("TAOTOKEN_MODEL=m1\n", "")),
    # ---- the dataset as the environment loads it at start (GPU profile)
    Case("dataset-without-test-rows", [(f"{{toml}}: [environment] dataset: found '{JSONL}' with 1 train and 0 test "
                                        "rows, expected rows for both splits (training and held-out evaluation). "
                                        "Hint: 1 row in 10 (by a hash of the question) is test; add more rows")],
         toml=DATASET, args=GPU200, files={f"configs/{JSONL}": rows(1)}),
    Case("dataset-too-few-rows-for-fewshot", [("{toml}: environment.fewshot: found 8, expected at most the {n} train "
                                               f"rows of {JSONL}. Hint: the solved examples are train rows; lower "
                                               "fewshot or add rows")],
         toml=DATASET + [("max_samples = 1000", "max_samples = 1000\nfewshot = 8")], args=GPU200,
         files={f"configs/{JSONL}": rows(8)}),
    Case("dataset-outside-configs", [(f"{{toml}}: [environment] dataset: found '{JSONL}' ({{root}}/{JSONL}, outside "
                                      "{cdir}), expected a JSONL file inside {cdir}/. Hint: the containers see only "
                                      "the configs/ folder (mounted as /app/configs): move the file there and write "
                                      "its path relative to it")],
         toml=DATASET, args=GPU200, files={JSONL: rows(40)}),
    # ---- the controller's environment variables: validate checks what `up` reads, with up's messages
    Case("knob-not-a-number", [("(environment): HERMES_BATCH_TIMEOUT_S: found 'ten', expected a number. Hint: "
                                "trainer: seconds to wait for one batch before naming the likely cause")],
         env={"HERMES_BATCH_TIMEOUT_S": "ten"}),
    Case("knob-out-of-range", [("(environment): HERMES_SGLANG_PORT: found '0', expected greater than or equal to 1. "
                                "Hint: inference: SGLang's own port inside the container")],
         env={"HERMES_SGLANG_PORT": "0"}),
    Case("health-timeout-past-the-probes-timeout", [("(environment): HERMES_HEALTH_TIMEOUT: found '30', expected less "
                                                     "than or equal to 12. Hint: healthchecks: seconds one probe "
                                                     "request may take (at most 12: a held probe's 20 s and one "
                                                     "check's two requests fit compose's 50 s timeout)")],
         env={"HERMES_HEALTH_TIMEOUT": "30"}),
    Case("logprob-tolerance-the-probe-cannot-tell", [("(environment): HERMES_LOGPROB_TOLERANCE: found '0.5', expected "
                                                      "less than 0.1. Hint: trainer dry-run: the mean absolute log "
                                                      "ratio a token that the log-prob and weight sync checks accept "
                                                      "between served and trainer log-probs (below 0.1: the weight "
                                                      "sync check's probe moves by at least that)")],
         env={"HERMES_LOGPROB_TOLERANCE": "0.5"}),
    Case("project-name-with-capitals", [("(environment): HERMES_PROJECT_NAME: found 'My Run', expected a compose "
                                         "project name: lower-case letters, digits, - and _. Hint: e.g. "
                                         "HERMES_PROJECT_NAME=my-run; or unset it for the default")],
         env={"HERMES_PROJECT_NAME": "My Run"}),
]


def _fewshot_rows() -> int:
    from hermes_stack.tasks.datasets import _split_of

    return sum(_split_of(json.loads(line)) == "train" for line in rows(8).splitlines())


for _case in CASES:  # the train-row count depends on the stable hash; filled in, not hard-coded twice
    if _case.id == "dataset-too-few-rows-for-fewshot":
        _case.expected = [line.replace("{n}", str(_fewshot_rows())) for line in _case.expected]


def test_at_least_30_new_cases_and_every_id_distinct():
    ids = [c.id for c in ROUND_1 + ROUND_2 + CASES]
    assert len(CASES) >= 30 and len(set(ids)) == len(ids)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_each_exit_2_nothing_started(case, tmp_path, monkeypatch, capsys, compose_calls):
    if case.id == "empty-toml":
        case = Case(case.id, case.expected, toml=[])
        monkeypatch.setattr("test_validate_bad_inputs.CONFIGS", _configs_with_empty_toml(tmp_path))
    err = run_case(case, tmp_path / "p", monkeypatch, capsys, compose_calls)
    assert "Traceback" not in err and "unexpected error" not in err


def _configs_with_empty_toml(tmp_path):
    import shutil

    from test_validate_bad_inputs import CONFIGS

    target = tmp_path / "shipped"
    shutil.copytree(CONFIGS, target)
    (target / "config_grpo.toml").write_text("# emptied by an editor\n\n")
    return target


# ---------------------------------------------------------------- exit 0 with a warning: intent clear, harmless


def test_checkpoint_interval_beyond_num_steps_is_a_warning(tmp_path, monkeypatch, capsys):
    """Checked against the run's actual length, once: the embedded profile's 400 steps (the files keep 200)."""
    case = Case("interval", [], json={"tinker.save_checkpoint_interval": 500})
    argv, fill = build(case, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith(("warning: ", "error: "))] == [
        (f"warning: {fill['json']}: tinker.save_checkpoint_interval: found 500, expected at most trainer.num_steps "
        "(400). Hint: the run saves only its final step; a run stopped before it resumes from nothing")]


def test_a_key_pasted_into_a_public_setting_is_never_printed(tmp_path, monkeypatch, capsys):
    """wandb.project is free text (exit 0), but the summary prints it: a key-shaped value there is redacted."""
    case = Case("project", [], json={"wandb.project": OTHER})
    argv, _ = build(case, tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert f"project={kf.redact(OTHER)}" in out
    assert not leaked(out + err, [OTHER])


# ---------------------------------------------------------------- no case prints a secret


def pieces(secret: str, width: int = 8) -> set[str]:
    return {secret[i:i + width] for i in range(len(secret) - width + 1)}


def leaked(text: str, secrets: list[str]) -> list[str]:
    return sorted({p for s in secrets for p in pieces(s) if p in text})


def secrets_of(case: Case) -> list[str]:
    """Every secret the case's files and environment hold: the key-file values of secret names (whatever the line
    looks like), key-shaped values anywhere in the key file, URL passwords and query values in any file."""
    import re

    found = [KEY, PW, OTHER]
    texts = [case.keyfile if isinstance(case.keyfile, str) else (case.keyfile or b"").decode("utf-8", "replace")]
    texts += [json.dumps(v) for v in case.json.values() if v is not DELETE] + [new for _, new in case.toml]
    texts += [str(v) for v in case.files.values()]
    for line in texts[0].splitlines():
        name, sep, value = line.partition("=")
        # A name typed into the value (NAME=NAME=key) is no secret; what follows it is.
        value = re.sub(r"^([A-Z_][A-Z0-9_]*=)+", "", value.strip().strip("'\""))
        if sep and kf.is_keyfile_secret(name.strip()) and len(value) >= 8 and not kf._SHELL_VALUE.match(value):
            found.append(value)
    for text in texts:
        found += [m for m in re.findall(r"[A-Za-z0-9_\-.]{8,}", text) if kf.looks_like_a_key(m)]
        found += re.findall(r"://[^:/@\s]+:([^@\s]{8,})@", text)
        found += [v for v in re.findall(r"[?&][^=\s]+=([^&#\s\"']{8,})", text)]
    found += [v for k, v in case.env.items() if kf.is_secret_name(k) and len(v) >= 8]
    return sorted(set(found))


ALL = ROUND_1 + ROUND_2 + CASES + ROUND_4


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_no_case_prints_a_secret(case, tmp_path, monkeypatch, capsys):
    if case.id == "empty-toml":
        monkeypatch.setattr("test_validate_bad_inputs.CONFIGS", _configs_with_empty_toml(tmp_path))
        case = Case(case.id, case.expected, toml=[])
    argv, fill = build(case, tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.format(**fill))
    main(argv)
    out, err = capsys.readouterr()
    secrets = secrets_of(case)
    assert KEY in secrets
    assert leaked(out + err, secrets) == []


def test_the_sweep_finds_a_printed_secret():
    """The check itself can fail: a line that echoes a key is caught, piece by piece."""
    assert leaked(f"error: found {KEY[2:14]}", [KEY]) and not leaked(f"found {kf.redact(KEY)}", [KEY])

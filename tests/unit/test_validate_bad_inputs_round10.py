"""`hermes-stack validate` on bad inputs, round 10 (a fresh tester's sweep, 2026-12-07 night): values that passed
validate and would have failed at run time, a value shown as something else than what was typed, and a secret
echoed. Same contract as test_validate_bad_inputs.py: the exact one line, exit 2, no compose call, no container."""

from __future__ import annotations

import re

import pytest
from test_validate_bad_inputs import KEY, Case, build, run_case
from test_validate_bad_inputs_more import GPU200

from hermes_stack.controller.cli import main

pytestmark = pytest.mark.usefixtures("isolated_secrets")

KEY_CHARS = "expected a key of ASCII letters, digits, '-', '_' and '.'"
QUOTE_HINT = ("Hint: quotes may surround the whole value (KEY=\"...\"), not stand inside it; paste the key from your "
              "account page over the whole value of TAOTOKEN_API_KEY")
GOOD_REST = "TAOTOKEN_BASE_URL=https://taotoken.net/api\nTAOTOKEN_MODEL=m1\n"

CASES = [
    # A future's wait past ~9.3e9 s raises OverflowError (time_t) in the trainer's first Tinker call; below a
    # second the trainer gives up on its first batch, or counts every environment as departed.
    Case("tinker-timeout-past-time-t", [
        ("(environment): HERMES_TINKER_TIMEOUT_S: found '1e20', expected less than or equal to 604800. Hint: trainer: "
        "seconds any wait on a Tinker future may take")], env={"HERMES_TINKER_TIMEOUT_S": "1e20"}),
    Case("batch-timeout-of-a-millisecond", [
        ("(environment): HERMES_BATCH_TIMEOUT_S: found '0.001', expected greater than or equal to 1. Hint: trainer: "
        "seconds to wait for one batch before naming the likely cause")], env={"HERMES_BATCH_TIMEOUT_S": "0.001"}),
    Case("env-departed-of-a-millisecond", [
        ("(environment): HERMES_ENV_DEPARTED_S: found '0.001', expected greater than or equal to 1. Hint: trainer: "
        "seconds an environment's queued groups may sit while no batch forms before it counts as departed")],
        env={"HERMES_ENV_DEPARTED_S": "0.001"}),
    Case("sglang-tp-99999", [
        ("(environment): HERMES_SGLANG_TP: found '99999', expected less than or equal to 64. Hint: inference: "
        "SGLang's tensor-parallel size")], env={"HERMES_SGLANG_TP": "99999"}),
    # docs/key-file.md: quotes left inside a value are an error (the gateway answers 401 only after the start)
    Case("key-with-a-quote-inside", [
        f"{{kf}}:1: TAOTOKEN_API_KEY: found a value with a \" inside, {KEY_CHARS}. {QUOTE_HINT}"],
        keyfile=f'TAOTOKEN_API_KEY={KEY[:8]}"{KEY[8:]}\n{GOOD_REST}'),
    Case("key-with-a-single-quote-inside-double-quotes", [
        f"{{kf}}:1: TAOTOKEN_API_KEY: found a value with a ' inside, {KEY_CHARS}. {QUOTE_HINT}"],
        keyfile=f"TAOTOKEN_API_KEY=\"{KEY[:8]}'{KEY[8:]}\"\n{GOOD_REST}"),
    # rich read ":x:" as an emoji code: the line said found '❌', not what was typed
    Case("wandb-project-with-an-emoji-code", [
        ("{json}: wandb.project: found ':x:', expected a project name without / \\ # ? % :. Hint: wandb refuses : "
        "in a project name; use - or _ instead")], json={"wandb.project": ":x:"}),
    # the dataset named an env file: its first line (a short password the redactor cannot know) was shown
    Case("dataset-naming-an-env-file", [
        ("{cdir}/notes.env:1: line: found invalid JSON (Expecting value): HERMES_INFERENCE_KEY=… (an env file's line; "
        "its value is not shown), expected one JSON object per line. Hint: JSONL is one JSON object per line, like "
        '{{"question": "…", "answer": "… #### 42"}}; a CSV or other table must be converted to that first')],
        toml=[('dataset = "gsm8k"', 'dataset = "notes.env"')], args=GPU200,
        files={"configs/notes.env": "HERMES_INFERENCE_KEY=hunter2pass\n"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_round10_bad_input_is_one_line_each_exit_2_no_container(case, tmp_path, monkeypatch, capsys, compose_calls):
    err = run_case(case, tmp_path, monkeypatch, capsys, compose_calls)
    assert "hunter2pass" not in err


def test_a_value_that_does_not_print_is_shown_escaped_in_the_resolved_configuration(tmp_path, monkeypatch, capsys):
    """`[atropos] api_host = "\\u001b[2J\\u001b[H"` passed validate, whose resolved configuration then printed the
    escape sequences raw: they cleared the screen."""
    case = Case("api-host-escape", [], toml=[('api_host = "localhost"', 'api_host = "\\u001b[2J\\u001b[H"')])
    monkeypatch.chdir(tmp_path)
    argv, _ = build(case, tmp_path)
    main(argv)
    out = capsys.readouterr().out
    assert "api_host='\\x1b[2J\\x1b[H'" in out
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out)


def test_a_chosen_password_with_a_quote_is_no_key_paste(tmp_path, monkeypatch, capsys):
    """The quote rule is for a provider's key: HERMES_INFERENCE_KEY (a password the user picks) and names the stack
    does not know may hold a quote, as they may hold a #."""
    from test_validate_bad_inputs import GOOD_KEYFILE

    case = Case("password-with-a-quote", [], keyfile=GOOD_KEYFILE + "HERMES_INFERENCE_KEY=\"correct-h'orse-battery\"\n"
                "SMTP_PASSWORD=\"it'sMyP4ss\"\n")
    monkeypatch.chdir(tmp_path)
    argv, _ = build(case, tmp_path)
    assert main(argv) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "error:" not in err and "orse-battery" not in err and "sMyP4ss" not in err

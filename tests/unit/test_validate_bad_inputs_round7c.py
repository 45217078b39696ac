"""`hermes-stack validate` on bad inputs, round 7 (an exploratory sweep of ~190 mistakes, 2026-12-07): the loader,
the key file, the controller's environment and its command line. Each of these ended in `unexpected error` (a
traceback's last line, exit 1), printed two lines for one mistake, named the wrong line, or leaked Python's own words.

Same contract as test_validate_bad_inputs.py, whose machinery this reuses: the exact one-line messages, exit 2, no
call to the compose choke point, no new container, the key never printed.
"""

from __future__ import annotations

import json
import re

import pytest
from test_validate_bad_inputs import GOOD_KEYFILE, KEY, Case, error_lines, run_case

from hermes_stack.controller.cli import main

pytestmark = pytest.mark.usefixtures("isolated_secrets")

H_DIGITS = "Hint: a paste or a held-down key; retype the value"
H_DEEP = "Hint: restore the file from git; `git diff configs/` shows what changed"
H_URL = "Hint: retype the host and port; set TAOTOKEN_BASE_URL=https://taotoken.net/api"
GATEWAY = "expected an http(s) URL of the gateway root, e.g. https://taotoken.net/api"
KEY_CHARS = "expected a key of ASCII letters, digits, '-', '_' and '.'"


def _deep(text: str) -> str:
    return text.replace('"num_steps": 200', '"num_steps": ' + "[" * 3000 + "]" * 3000)


def _wandb_name_twice(text: str) -> str:
    data = text.replace('"group": null', '"group": null,\n    "name": "a",\n    "name": "b"')
    assert data != text
    return data


CASES = [
    # ---- numbers past the interpreter's 4300 digits, nesting past its recursion limit: unexpected error before
    Case("json-number-of-5000-digits", [
        ("{json}:{line}: syntax: found a number of 5001 digits, expected a number of at most a few digits (every "
         f"setting has a range). {H_DIGITS}")],
        json={"trainer.num_steps": "NUM"}, json_text=lambda t: t.replace('"NUM"', "1" + "0" * 5000),
        line_of='"num_steps"', col_after='"'),
    Case("toml-number-of-5000-digits", [
        ("{toml}:{line}: syntax: found a number of 5001 digits, expected a number of at most a few digits (every "
         f"setting has a range). {H_DIGITS}")],
        toml=[("batch_size = 32", "batch_size = 1" + "0" * 5000)], line_of="batch_size = 1", col_after="b"),
    Case("json-nested-3000-deep", [
        ("{json}: syntax: found arrays or objects nested about a thousand levels deep, expected a settings file a few "
         f"levels deep. {H_DEEP}")], json_text=_deep),
    Case("toml-nested-3000-deep", [
        ("{toml}: syntax: found arrays or objects nested about a thousand levels deep, expected a settings file a few "
         f"levels deep. {H_DEEP}")], toml=[("batch_size = 32", "batch_size = " + "[" * 3000 + "]" * 3000)]),
    # ---- one mistake, one line, the right line, the file's words
    Case("toml-section-in-another-case", [
        ("{toml}: Rollout: found an unknown section, expected one of algorithm, atropos, environment, reward, "
         "rollout. Hint: did you mean rollout?")], toml=[("[rollout]", "[Rollout]")]),
    Case("json-key-twice-in-wandb-names-its-own-first", [
        ('{json}:{line}: name: found a second "name" (the first is on line LINE_A), expected each key once per '
         "object. Hint: delete one of the two; JSON would keep the last one silently")],
        json_text=_wandb_name_twice, line_of='"name": "b"', col_after='"'),
    Case("toml-dotted-key-above-its-own-section", [
        ("{toml}:{line}: [rollout]: found a [rollout] header after the dotted key on line 2, which made [rollout] "
         "already, expected each section once. Hint: move line 2 under this header, without its rollout. prefix")],
        toml=[("[atropos]", "rollout.group_size = 8\n[atropos]")], line_of="[rollout]", col_after="["),
    Case("toml-date-for-a-number", [
        "{toml}: rollout.batch_size: found 2024-01-01 (a date), expected an integer. Hint: write a whole number without quotes or a decimal point, e.g. 32"],
        toml=[("batch_size = 32", "batch_size = 2024-01-01")]),
    Case("json-number-for-a-name", [
        '{json}: wandb.group: found 7 (an integer), expected a string (or null). Hint: write text in quotes, e.g. "name"'], json={"wandb.group": 7}),
    Case("json-object-for-a-number", [
        "{json}: trainer.num_steps: found an empty object, expected an integer. Hint: write a whole number without quotes or a decimal point, e.g. 32"], json={"trainer.num_steps": {}}),
    Case("toml-lone-carriage-return", [
        ("{toml}:{line}:16: syntax: found text where TOML expected newline or end of document after a statement, "
         "expected valid TOML. Hint: line {line} holds a carriage return (\\r) that ends no line: save the file with "
         "LF (or CRLF) line ends")], toml=[("batch_size = 32", "batch_size = 32\rx")], line_of="batch_size = 32",
        col_after="b"),
    Case("toml-windows-path-in-double-quotes", [
        ("{toml}:{line}:16: syntax: found invalid hex value, expected valid TOML. Hint: a backslash in a "
         "\"double-quoted\" TOML string starts an escape: write the path in 'single quotes' (a literal string), "
         "double each backslash, or use forward slashes")],
        toml=[('dataset = "gsm8k"', 'dataset = "C:\\Users\\me\\rows.jsonl"')], line_of="dataset = ",
        col_after="d"),
    # ---- the key file
    Case("keyfile-base-url-unclosed-ipv6", [
        f"{{kf}}:2: TAOTOKEN_BASE_URL: found https://[::1/api (Invalid IPv6 URL), {GATEWAY}. {H_URL}"],
        keyfile=GOOD_KEYFILE.replace("https://taotoken.net/api", "https://[::1/api")),
    Case("keyfile-base-url-port-not-a-number", [
        (f"{{kf}}:2: TAOTOKEN_BASE_URL: found https://taotoken.net:443a/api (Port could not be cast to integer value "
         f"as '443a'), {GATEWAY}. {H_URL}")],
        keyfile=GOOD_KEYFILE.replace("https://taotoken.net/api", "https://taotoken.net:443a/api")),
    Case("keyfile-base-url-port-out-of-range", [
        (f"{{kf}}:2: TAOTOKEN_BASE_URL: found https://taotoken.net:99999/api (Port out of range 0-65535), "
         f"{GATEWAY}. {H_URL}")],
        keyfile=GOOD_KEYFILE.replace("https://taotoken.net/api", "https://taotoken.net:99999/api")),
    Case("keyfile-comment-right-after-the-key", [
        (f"{{kf}}:1: TAOTOKEN_API_KEY: found a value with # inside (a comment typed right after the key?), "
         f"{KEY_CHARS}. Hint: python-dotenv keeps a # that follows the value without a space as part of it; put a "
         "space before # to start a comment")],
        keyfile=GOOD_KEYFILE.replace(KEY, KEY + "#mykey")),
    Case("keyfile-hex-wandb-key-on-the-url-line", [
        ("{kf}:5: WANDB_BASE_URL: found a value shaped like a key (012…4567), expected the wandb server URL. Hint: "
         "WANDB_BASE_URL is printed in clear; the key belongs on the WANDB_API_KEY line")],
        keyfile=GOOD_KEYFILE + "WANDB_API_KEY=x\nWANDB_BASE_URL=" + "0123456789abcdef" * 2 + "01234567\n"),
    Case("keyfile-hex-key-as-the-model", [
        ("{kf}:3: TAOTOKEN_MODEL: found a value shaped like a key (012…cdef), expected a model name, e.g. "
         "claude-3-5-sonnet. Hint: TAOTOKEN_MODEL is printed in clear; the key belongs on the TAOTOKEN_API_KEY line")],
        keyfile=GOOD_KEYFILE.replace("TAOTOKEN_MODEL=m1", "TAOTOKEN_MODEL=" + "0123456789abcdef" * 2)),
    # NAME=value in another syntax: the unreadable line, and a second "no such line" for the same name, before
    Case("keyfile-windows-set", [
        ("{kf}:1: TAOTOKEN_API_KEY: found a line python-dotenv cannot read (… TAOTOKEN_API_KEY=sk-…cdef), expected "
         "NAME=value. Hint: write NAME=value: `set NAME=value` is a Windows shell's, and this file is read, not run")],
        keyfile="set " + GOOD_KEYFILE),
    Case("keyfile-compose-list-item", [
        ("{kf}:1: TAOTOKEN_API_KEY: found a line python-dotenv cannot read (… TAOTOKEN_API_KEY=sk-…cdef), expected "
         "NAME=value. Hint: write NAME=value without the leading `- ` (compose's list form of environment:)")],
        keyfile="- " + GOOD_KEYFILE),
    Case("keyfile-json-member", [
        ('{kf}:1: TAOTOKEN_API_KEY: found a line python-dotenv cannot read ("TAOTOKEN_API_KEY": "sk-…cdef",), expected NAME=value. '
         "Hint: write NAME=value: this is a dotenv file, not JSON (no quotes around the name, no : and no trailing "
         "comma)")],
        keyfile=GOOD_KEYFILE.replace(f"TAOTOKEN_API_KEY={KEY}", f'"TAOTOKEN_API_KEY": "{KEY}",')),
    Case("keyfile-two-lines-joined-by-a-semicolon", [
        ("{kf}:1: TAOTOKEN_API_KEY: found a value with the name TAOTOKEN_BASE_URL inside, expected the key itself. "
         "Hint: write TAOTOKEN_API_KEY=<key> on one line; the value starts after the first =")],
        keyfile=GOOD_KEYFILE.replace(f"TAOTOKEN_API_KEY={KEY}\n", f"TAOTOKEN_API_KEY={KEY};")),
    # ---- the controller's environment and command line
    Case("env-project-name-full-width", [
        ("(environment): HERMES_PROJECT_NAME: found 'ｈermes', expected a compose project name: lower-case letters, "
         "digits, - and _. Hint: e.g. HERMES_PROJECT_NAME=hermes; or unset it for the default")],
        env={"HERMES_PROJECT_NAME": "ｈermes"}),
    Case("env-inference-device-gpu", [
        ("(environment): HERMES_INFERENCE_DEVICE: found 'gpu', expected cpu, cuda or cuda:N (a torch device). Hint: "
         "inference: the torch device of the builtin backend")], env={"HERMES_INFERENCE_DEVICE": "gpu"}),
    Case("env-inference-host-with-spaces", [
        ("(environment): HERMES_INFERENCE_HOST: found 'not a host', expected an address to listen on, e.g. 0.0.0.0, "
         "127.0.0.1 or ::. Hint: inference: the address it listens on")], env={"HERMES_INFERENCE_HOST": "not a host"}),
    Case("env-image-repo-with-a-space", [
        ("(environment): HERMES_IMAGE_REPO: found 'Bad Repo', expected an image repository prefix: lower-case "
         "letters, digits, '.', '_', '-' and '/' (with a registry host:port first if any). Hint: the images are named "
         "<it>/trainer, <it>/atropos, …; e.g. hermes-stack (the default: unset it)")],
        env={"HERMES_IMAGE_REPO": "Bad Repo"}),
    Case("replicas-beyond-64-on-the-command-line", [
        ("command line: --replicas (REPLICAS): found a number of 23 digits, expected an integer from 1 to 64. Hint: "
         "the number of inference servers behind the router; 1 is one server, no router")],
        args=["--device", "cpu", "--replicas", "9" * 23]),
    Case("replicas-beyond-64-in-the-settings", [
        ("{json}: inference.replicas: found 65, expected less than or equal to 64. Hint: replicas: inference servers "
         "behind SGLang's router (1: one server, no router); `git diff configs/` shows what changed")],
        json={"inference.replicas": 65}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_round7_bad_input_is_one_line_each_exit_2_no_container(case, tmp_path, monkeypatch, capsys, compose_calls):
    run = case
    if "LINE_A" in "".join(case.expected):  # the line of wandb's own first "name" (algorithm's comes earlier)
        from test_validate_bad_inputs import CONFIGS

        text = _wandb_name_twice(json.dumps(json.loads((CONFIGS / "settings_grpo.json").read_text()), indent=2))
        first = next(i for i, line in enumerate(text.splitlines(), 1) if line.strip() == '"name": "a",')
        run = Case(case.id, [e.replace("LINE_A", str(first)) for e in case.expected], json_text=case.json_text,
                   line_of=case.line_of, col_after=case.col_after)
    run_case(run, tmp_path, monkeypatch, capsys, compose_calls)


def test_a_control_character_in_a_value_is_shown_escaped_on_its_one_line(tmp_path, monkeypatch, capsys,
                                                                        compose_calls):
    """A NUL or a newline in a value the user typed was printed raw: the one line broke in two, or held an invisible
    byte. Every error, warning and notice is escaped as Python writes such characters (controller/console.py)."""
    case = Case("model-path-with-a-newline", [], json={"wandb.name": "run\n1"})
    monkeypatch.chdir(tmp_path)
    from test_validate_bad_inputs import build

    argv, fill = build(case, tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    (line,) = error_lines(err)
    assert line == (f"{fill['json']}: wandb.name: found 'run\\n1' (control character U+000A), expected printable "
                    "text. Hint: remove the control character; a name is one line of text")
    assert not re.search(r"[\x00-\x08\x0b-\x1f]", err)


def test_the_secret_is_found_before_its_control_characters_are_escaped(monkeypatch, capsys):
    from hermes_stack.controller import console
    from hermes_stack.redaction import register_secrets

    secret = "only-lower-case-so-no-key-shape\tend"  # found by the registry alone, tab included
    register_secrets({"TAOTOKEN_API_KEY": secret})
    console.report_error([f"bad value {secret} here"], debug=False)
    err = capsys.readouterr().err
    assert "lower-case-so" not in err and err.count("\n") == 1  # redacted whole, then shown on one line

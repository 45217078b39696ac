"""`hermes-stack validate` on bad inputs, round 8 (2026-12-07, afternoon), found by a review:
- a JSON `\\uD800` escape (half a UTF-16 pair) parsed into a string that cannot be printed: validate printed half its
  summary, then `unexpected error: UnicodeEncodeError` and exit 1;
- an empty settings file got json's "expecting value" with a hint about commas;
- a JSON top level that is not an object was named by Python's type (NoneType, str);
- a Tinker key on TAOTOKEN_API_KEY's line passed, though that line never reaches the trainer.

Same contract as test_validate_bad_inputs.py, whose machinery this reuses: the exact one-line messages, exit 2, no
call to the compose choke point, no new container, the key never printed.
"""

from __future__ import annotations

import pytest
from test_validate_bad_inputs import GOOD_KEYFILE, GPU200, KEY, Case, run_case

from hermes_stack.config.rules import HUB_ID_RULE

pytestmark = pytest.mark.usefixtures("isolated_secrets")

H_PAIR = "Hint: write the character itself, or both halves of its pair (\\ud83d\\ude00)"
H_TOP = "Hint: the file holds one object with sections tinker, inference, algorithm, …"
H_ASCII = ("has characters outside quotes that are not ASCII ({}); retype its keys, numbers and punctuation on a "
           "plain keyboard")
LINE_OF_PROJECT = 30  # configs/settings_grpo.json's "project" line (the case's {line} would be its own text's)

CASES = [
    Case("json-lone-high-surrogate-after-a-whole-pair",
         [(f"{{json}}:{LINE_OF_PROJECT}: wandb.project: found \\ud800, half of a UTF-16 pair alone, expected text made "
          f"of whole characters. {H_PAIR}")],
         json_text=lambda text: text.replace('"project": "hermes', '"project": "\\ud83d\\ude00x\\ud800hermes')),
    Case("json-lone-low-surrogate-in-a-key",
         [("{json}:3: tinker.lora_rank\\udc00: found \\udc00, half of a UTF-16 pair alone, expected text made of whole "
          f"characters. {H_PAIR}")],
         json_text=lambda text: text.replace('"lora_rank"', '"lora_rank\\udc00"')),
    Case("json-empty-file",
         [("{json}: (file): found an empty file, expected a JSON object with sections tinker, inference, algorithm, …. "
          "Hint: restore it from git (`git checkout -- {json}`)")], json_text="  \n"),
    Case("json-top-level-null", [f"{{json}}: (top level): found a JSON null, expected a JSON object. {H_TOP}"],
         json_text="null"),
    Case("json-top-level-string", [f"{{json}}: (top level): found a JSON string, expected a JSON object. {H_TOP}"],
         json_text='"x"'),
    Case("json-top-level-number", [f"{{json}}: (top level): found a JSON number, expected a JSON object. {H_TOP}"],
         json_text="42"),
    # Look-alikes outside quotes: the parser's words alone ("expecting property name enclosed in double quotes")
    # pointed at a name that was in double quotes.
    Case("json-zero-width-space-before-a-key",
         [("{json}:3:5: syntax: found expecting property name enclosed in double quotes, expected valid JSON. Hint: "
           f"line 3 {H_ASCII.format('U+200B ZERO WIDTH SPACE')}")],
         json_text=lambda text: text.replace('"lora_rank"', '\u200b"lora_rank"')),
    Case("json-minus-sign-in-a-number",
         [(f"{{json}}:4:23: syntax: found expecting ',' delimiter, expected valid JSON. Hint: line 4 "
           f"{H_ASCII.format('U+2212 MINUS SIGN')}")],
         json_text=lambda text: text.replace("4e-05", "4e\u221205")),
    Case("toml-cyrillic-letter-in-a-key",
         [("{toml}:{line}:2: syntax: found text where TOML expected '=' after a key in a key/value pair, expected "
           f"valid TOML. Hint: line {{line}} {H_ASCII.format('U+0430 CYRILLIC SMALL LETTER A')}")],
         toml=[("batch_size = 32", "b\u0430tch_size = 32")], line_of="b\u0430tch_size", col_after=""),
    Case("toml-full-width-digit",
         [("{toml}:{line}:14: syntax: found invalid value, expected valid TOML. Hint: line {line} "
           f"{H_ASCII.format('U+FF18 FULLWIDTH DIGIT EIGHT')}")],
         toml=[("group_size = 8", "group_size = \uff18")], line_of="group_size = \uff18", col_after=""),
    # Path("") is the working folder: the line spoke of a config.json missing there ("copy it again").
    Case("gpu-model-path-empty",
         [(f"{{json}}: inference.model_path: found '' (empty), expected a hub id ({HUB_ID_RULE}) or a local model "
           "folder. Hint: name the model, e.g. Qwen/Qwen3-8B, or its folder as ./path")],
         json={"inference.model_path": ""}, args=GPU200),
    Case("tinker-key-on-the-gateway-line",
         [("{kf}: TINKER_API_KEY: found no TINKER_API_KEY line (the Tinker key is on TAOTOKEN_API_KEY's line), "
          "expected the Tinker key on its own TINKER_API_KEY line. Hint: move it to a line TINKER_API_KEY=tml-… in "
          "{kf}: only that line reaches the trainer; TAOTOKEN_API_KEY is the gateway's key")],
         json={"trainer.engine": "tinker"}, keyfile=GOOD_KEYFILE.replace(KEY, "tml-not-a-real-key-0000"),
         args=GPU200, toml=[("temperature = 0.8", "temperature = 1.0")]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_round8_bad_input_is_one_line_exit_2_no_container(case, tmp_path, monkeypatch, capsys, compose_calls):
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


def test_a_key_file_path_with_a_trailing_blank_is_said_and_quoted(tmp_path, monkeypatch, capsys, compose_calls):
    """HERMES_KEYFILE="/path/k " named a file that is not there; the line showed no blank, and its `cp` command,
    typed as shown, made /path/k, which the next run would still not find."""
    from test_validate_bad_inputs import CONFIGS, error_lines

    from hermes_stack.controller.cli import main

    named = f"{tmp_path / 'k.env'} "
    monkeypatch.setenv("HERMES_KEYFILE", named)
    rc = main(["validate", "--algo", "grpo", "--config-dir", str(CONFIGS), "--device", "cpu"])
    assert error_lines(capsys.readouterr().err) == [
        (f"{named}: (file): found no such file (the path starts or ends with a blank), expected the key file you named. "
        f"Hint: point --keyfile or $HERMES_KEYFILE at your key file (cp .env.taotoken.example '{named}' makes one); "
        "without one, leave out --keyfile and $HERMES_KEYFILE for offline mode")]
    assert rc == 2 and compose_calls == []


def test_a_config_folder_without_either_file_is_one_line(tmp_path, monkeypatch, capsys, compose_calls):
    """`--config-dir ''` is the working folder; outside the checkout it holds neither file, which was two lines."""
    from test_validate_bad_inputs import error_lines

    from hermes_stack.controller.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["validate", "--algo", "ppo", "--config-dir", "", "--device", "cpu"])
    assert error_lines(capsys.readouterr().err) == [
        (".: (folder): found a folder without config_ppo.toml or settings_ppo.json, expected the folder holding "
         "config_ppo.toml and settings_ppo.json. Hint: run from the checkout, where configs/ sits next to the "
         "Makefile; validate and test-inference also take --config-dir")]
    assert rc == 2 and compose_calls == []

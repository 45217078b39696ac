"""`hermes-stack validate` on bad inputs, round 7 (2026-12-07): wandb's names as wandb takes them. A project wandb
cannot put in a URL, or over its 128 characters, passed validate; wandb.init then failed inside the trainer, which
trained on without wandb and said so in one log line. A NUL or a pasted blob in project, group or name reached
Atropos's registration.

Same contract as test_validate_bad_inputs.py, whose machinery this reuses: the exact one-line messages, exit 2, no
call to the compose choke point, no new container, the key never printed.
"""

from __future__ import annotations

import pytest
from test_validate_bad_inputs import GOOD_KEYFILE, GPU200, KEY, Case, build, run_case

from hermes_stack.controller.cli import main

pytestmark = pytest.mark.usefixtures("isolated_secrets")

H_LONG = "Hint: a shorter name; wandb refuses a longer one"
H_CONTROL = "Hint: remove the control character; a name is one line of text"
BLOB = "run-" + "x" * 2_000_000

T1 = [("temperature = 0.8", "temperature = 1.0")]  # the Tinker engine's temperature, so the key is the one finding
WRONG_TINKER_LINE = GOOD_KEYFILE + f"TINKER_API_KEY={KEY}\n"
H_TINKER = "Hint: Tinker refuses other keys; put the Tinker key from the Tinker console on that line"

CASES = [
    # The shipped engine "auto" picks Tinker on a GPU when the key file has a TINKER_API_KEY line: a gateway key on
    # that line passed validate and failed in the trainer, after the build (README: "refused before anything starts").
    Case("auto-engine-on-gpu-with-a-gateway-key-on-the-tinker-line", [
        (f"{{kf}}: TINKER_API_KEY: found sk-…cdef, expected a Tinker key starting with tml- (or a JWT starting with "
         f"eyJ). {H_TINKER}; or remove that line: engine \"auto\" then trains with torch")],
        keyfile=WRONG_TINKER_LINE, args=GPU200, toml=T1),
    Case("tinker-engine-with-a-gateway-key-on-the-tinker-line", [
        (f"{{kf}}: TINKER_API_KEY: found sk-…cdef, expected a Tinker key starting with tml- (or a JWT starting with "
         f"eyJ). {H_TINKER}")], json={"trainer.engine": "tinker"}, keyfile=WRONG_TINKER_LINE, args=GPU200, toml=T1),
    Case("wandb-project-with-a-team", [
        ("{json}: wandb.project: found 'my-team/rl', expected a project name without / \\ # ? % :. Hint: wandb "
         "refuses / in a project name; use - or _ instead")], json={"wandb.project": "my-team/rl"}),
    Case("wandb-project-with-colon-and-percent", [
        ("{json}: wandb.project: found 'rl:100%', expected a project name without / \\ # ? % :. Hint: wandb "
         "refuses % : in a project name; use - or _ instead")], algo="ppo", json={"wandb.project": "rl:100%"}),
    Case("wandb-project-too-long", [
        (f"{{json}}: wandb.project: found '{'p' * 40}'… (129 characters), expected at most 128 characters (wandb's "
         f"limit). {H_LONG}")], json={"wandb.project": "p" * 129}),
    Case("wandb-name-pasted-blob", [
        (f"{{json}}: wandb.name: found '{BLOB[:40]}'… ({len(BLOB)} characters), expected at most 128 characters "
         f"(wandb's limit). {H_LONG}")], json={"wandb.name": BLOB}),
    Case("wandb-name-with-nul", [
        (f"{{json}}: wandb.name: found 'run\\x001' (control character U+0000), expected printable text. "
         f"{H_CONTROL}")], json={"wandb.name": "run\x001"}),
    Case("wandb-group-with-newline-and-tab", [
        (f"{{json}}: wandb.group: found 'a\\tb\\n' (control character U+0009, U+000A), expected printable text. "
         f"{H_CONTROL}")], algo="ppo", json={"wandb.group": "a\tb\n"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_name_wandb_refuses_is_one_line_exit_2_no_container(case, tmp_path, monkeypatch, capsys, compose_calls):
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


@pytest.mark.parametrize("values", [
    {"wandb.project": "p" * 128, "wandb.name": "n" * 128, "wandb.group": "g" * 128},  # at the limit
    {"wandb.project": "rl-math_v2.1 (ppo)", "wandb.name": "grpo/gsm8k#1: 100%", "wandb.group": "team/a"},
    {"wandb.project": "数学", "wandb.name": "ünïcode", "wandb.group": ""},
])
def test_names_wandb_takes_pass(values, tmp_path, monkeypatch, capsys):
    """Only project is held to wandb's URL characters (a run's name and group are not); non-ASCII text is fine."""
    argv, _ = build(Case("ok", [], json=values), tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0, capsys.readouterr().err


def test_auto_engine_without_a_gpu_trains_with_torch_whatever_the_tinker_line_holds(tmp_path, monkeypatch, capsys):
    argv, _ = build(Case("ok", [], keyfile=WRONG_TINKER_LINE), tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0, capsys.readouterr().err

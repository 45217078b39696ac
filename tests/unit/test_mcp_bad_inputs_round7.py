"""Round 7 of the MCP server's bad inputs: each answer is the tool's own {"error", "hint"} (never the SDK's raw error),
each command-line refusal one line with exit 2, nothing written and no secret printed."""

from __future__ import annotations

import json
import string
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_helpers import copy_project, hermes_env, mcp_session
from test_mcp_server import _bytes, _run

pytestmark = pytest.mark.slow  # each session starts a Python process that imports the controller (~2 s)

TEST_INFERENCE_TAKES = "rl_test_inference takes num_steps (integer), group_size (integer), models (array of string or null)"
STRONG_TOKEN = "Zq8w" * 11  # 44 characters, as secrets.token_urlsafe(32) gives


@pytest.fixture()
def project(tmp_path) -> Path:
    return copy_project(tmp_path / "project").resolve()


@pytest.fixture()
def elsewhere(tmp_path) -> Path:
    where = tmp_path / "somewhere-else"
    where.mkdir()
    return where


def _answers(project: Path, elsewhere: Path, calls: list[tuple[str, dict]]) -> list[tuple[bool, dict]]:
    """(isError, the answer's JSON) of each call, in one session."""

    async def scenario():
        out = []
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            for tool, arguments in calls:
                result = await s.call_tool(tool, arguments)
                out.append((result.isError, json.loads(result.content[0].text) if not result.isError
                            else result.content[0].text))
        return out

    return _run(scenario())


def _mcp_command(project: Path, elsewhere: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run([sys.executable, "-m", "hermes_stack", "mcp", *args], cwd=elsewhere,
                          env=hermes_env(env), capture_output=True, text=True, timeout=30, check=False,
                          stdin=subprocess.DEVNULL)


def test_a_value_json_cannot_read_is_the_fields_structured_refusal(project, elsewhere):
    """Finding 1: a 5001-digit number (Python's int parser stops at 4300) came back isError=True with the bare
    `ValueError: Exceeds the limit (4300 digits)`; so did nesting past the recursion limit."""
    before = _bytes(project)
    toml = f"{project}/configs/config_grpo.toml"
    hint = "send a value in that range (rl_get_current_config shows the current one); nothing was written"
    answers = _answers(project, elsewhere, [
        ("rl_edit_config", {"field": "rollout.group_size", "value": "1" + "0" * 5000}),
        ("rl_edit_config", {"field": "rollout.temperature", "value": "-" + "9" * 5000}),
        ("rl_edit_config", {"field": "rollout.group_size", "value": "[" * 100_000}),
        ("rl_test_inference", {"num_steps": "1" + "0" * 5000}),
    ])
    assert answers[0] == (False, {
        "error": f"{toml}: rollout.group_size: found a number of 5001 digits, expected an integer (>= 1, <= 1024)",
        "hint": hint, "field": "rollout.group_size", "changed": False})
    assert answers[1] == (False, {
        "error": f"{toml}: rollout.temperature: found a number of 5000 digits, expected a number (>= 0.0, <= 2.0)",
        "hint": hint, "field": "rollout.temperature", "changed": False})
    assert answers[2] == (False, {
        "error": f"{toml}: rollout.group_size: found JSON too deeply nested or with a number too long to read "
                 "(100000 characters), expected an integer (>= 1, <= 1024)",
        "hint": hint, "field": "rollout.group_size", "changed": False})
    assert answers[3] == (False, {
        "error": f"rl_test_inference: argument num_steps: found '{'1' + '0' * 218}… (5003 characters), expected a "
                 "valid integer (unable to parse input string as an integer, exceeded maximum size)",
        "hint": TEST_INFERENCE_TAKES})
    assert _bytes(project) == before


def test_a_boolean_is_no_integer_argument(project, elsewhere):
    """Finding 6: rl_test_inference(num_steps=true) ran one step (pydantic's lax mode reads true as 1)."""
    answers = _answers(project, elsewhere, [("rl_test_inference", {"num_steps": True}),
                                            ("rl_test_inference", {"group_size": False})])
    assert answers == [
        (False, {"error": "rl_test_inference: argument num_steps: found True, expected a valid integer",
                 "hint": TEST_INFERENCE_TAKES}),
        (False, {"error": "rl_test_inference: argument group_size: found False, expected a valid integer",
                 "hint": TEST_INFERENCE_TAKES}),
    ]
    assert not (project / ".hermes" / "runs").exists()  # refused before test-inference wrote anything


# Shaped like a gateway key (the redactor's prefix and length), made here so no key-shaped literal is committed.
KEY_SHAPED = "sk-" + string.ascii_lowercase + string.digits


def test_a_key_refused_for_api_key_env_names_the_real_settings_file(project, elsewhere):
    """Finding 4: the hint named the deleted scratch copy (…/.hermes-config-check-xxxx/settings_grpo.json)."""
    before = _bytes(project)
    settings = f"{project}/configs/settings_grpo.json"
    [(is_error, answer)] = _answers(project, elsewhere, [
        ("rl_edit_config", {"field": "inference.api_key_env", "value": KEY_SHAPED})])
    assert (is_error, answer) == (False, {
        "error": f"{settings}: inference.api_key_env: found a key (sk-…6789), expected the name of a key-file "
                 "variable, e.g. HERMES_INFERENCE_KEY",
        "hint": "put the key in the key file as HERMES_INFERENCE_KEY=… and leave api_key_env out (the default names "
                f"it); a key in {settings} is in clear wherever the file is copied",
        "field": "inference.api_key_env", "changed": False})
    assert _bytes(project) == before


def test_a_model_path_with_a_separator_that_leaves_the_project_is_refused(project, elsewhere):
    """Finding 7: only ./ ../ / ~ prefixes counted as paths, so configs/../../x was written; a hub id still passes."""
    before = _bytes(project)
    answers = _answers(project, elsewhere, [
        ("rl_edit_config", {"field": "inference.model_path", "value": "configs/../../x"}),
        ("rl_edit_config", {"field": "inference.model_path", "value": "Qwen/Qwen2.5-0.5B-Instruct"}),
    ])
    assert answers[0] == (False, {
        "error": f"inference.model_path = 'configs/../../x' names a path outside the project {project}",
        "hint": "put the file inside the project (e.g. configs/) and name it relative to it",
        "field": "inference.model_path", "changed": False})
    assert answers[1][1]["message"] == ("inference.model_path = 'Qwen/Qwen2.5-0.5B-Instruct' written to "
                                        "configs/settings_grpo.json")
    after = _bytes(project)
    assert json.loads(after["settings_grpo.json"])["inference"]["model_path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert {k: v for k, v in after.items() if k != "settings_grpo.json"} == \
        {k: v for k, v in before.items() if k != "settings_grpo.json"}


def test_a_host_that_is_no_host_is_one_line(project, elsewhere):
    """Finding 2: with HERMES_MCP_TOKEN set, --host "not a host" ended in a 7-line pydantic report, exit 1."""
    done = _mcp_command(project, elsewhere, "--project", str(project), "--transport", "http", "--host", "not a host",
                        env={"HERMES_MCP_TOKEN": STRONG_TOKEN})
    assert (done.returncode, done.stderr) == (2, (
        "error: command line: --host: found 'not a host', expected an IP address (e.g. 0.0.0.0, ::1) or a host name "
        "(letters, digits and '-', labels joined by '.'). Hint: e.g. --host 127.0.0.1 (this machine only) or --host "
        "0.0.0.0 (every interface, with HERMES_MCP_TOKEN)\n"))


def test_an_ipv6_host_gets_auth_settings():
    """Finding 2's other side: an IPv6 --host with a token made http://:::8765, which AuthSettings refused."""
    from hermes_stack.controller.agent_tools.server import build_server

    server = build_server(None, "no project", host="::", port=8765, token=STRONG_TOKEN)
    assert str(server.settings.auth.issuer_url) == "http://[::]:8765/"


@pytest.mark.parametrize(("token", "found"), [
    ("s3cr3t-x", "a value of 8 characters"),
    ("   ", "a value of 3 characters with whitespace"),
    ("Zq8w" * 5 + " " + "Zq8w" * 5, "a value of 41 characters with whitespace"),
])
def test_a_weak_token_cannot_serve_beyond_loopback(project, elsewhere, token, found):
    """Finding 3: any non-empty HERMES_MCP_TOKEN ("a", "   ") let the server bind 0.0.0.0."""
    done = _mcp_command(project, elsewhere, "--project", str(project), "--transport", "http", "--host", "0.0.0.0",
                        env={"HERMES_MCP_TOKEN": token})
    assert (done.returncode, done.stderr) == (2, (
        f"error: (environment): HERMES_MCP_TOKEN: found {found}, expected a random value of at least 32 characters "
        "without whitespace to serve beyond loopback (--host 0.0.0.0). Hint: export HERMES_MCP_TOKEN=\"$(python3 -c "
        "\"import secrets; print(secrets.token_urlsafe(32))\")\"\n"))
    assert token.strip() == "" or token not in done.stderr + done.stdout


def test_a_project_that_is_a_file_is_one_line(tmp_path, elsewhere):
    """Finding 5: --project <a file> said "does not exist" (and served)."""
    file = tmp_path / "config_grpo.toml"
    file.write_text("")
    done = _mcp_command(tmp_path, elsewhere, "--project", str(file))
    assert (done.returncode, done.stderr) == (2, (
        f"error: command line: --project: found {file} (a file), expected the hermes-stack project folder (holding "
        "configs/ and compose.grpo.yml). Hint: name the checkout's folder with --project, not a file in it\n"))
    done = _mcp_command(tmp_path, elsewhere, env={"HERMES_ROOT": str(file)})
    assert (done.returncode, done.stderr) == (2, (
        f"error: (environment): HERMES_ROOT: found {file} (a file), expected the hermes-stack project folder (holding "
        "configs/ and compose.grpo.yml). Hint: name the checkout's folder with HERMES_ROOT, not a file in it\n"))

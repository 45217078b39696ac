"""`hermes-stack mcp` through the official `mcp` client over stdio, started the way Hermes Agent starts a stdio server:
from another directory, with only Hermes' baseline environment. The project is a copy, so edits never touch the
repository. (Starting a real run is the Docker tier's: tests/docker/test_mcp_training.py.)"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
from pathlib import Path

import pytest
from mcp_helpers import REPO, call, copy_project, mcp_session

# The tools hermes-agent's rl_* set named (docs/agent.md): what the server must list, no more, no less.
TOOL_NAMES = ("rl_list_environments", "rl_select_environment", "rl_get_current_config", "rl_edit_config",
              "rl_start_training", "rl_check_status", "rl_stop_training", "rl_get_results", "rl_list_runs",
              "rl_test_inference")


pytestmark = pytest.mark.slow  # each session starts a Python process that imports the controller (~2 s)


def _bytes(project: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((project / "configs").iterdir())}


def _run(coro):
    return asyncio.run(coro)


@pytest.fixture()
def project(tmp_path) -> Path:
    return copy_project(tmp_path / "project")


@pytest.fixture()
def elsewhere(tmp_path) -> Path:
    where = tmp_path / "somewhere-else"
    where.mkdir()
    return where


def test_the_ten_tools_environments_config_edits_and_unknown_runs(project, elsewhere):
    # A key file with a random secret: no answer may show it (no tool reads the key file back).
    secret = "sk-" + secrets.token_hex(20)
    keyfile = project / ".env.taotoken"
    keyfile.write_text(f"TAOTOKEN_API_KEY={secret}\nTAOTOKEN_BASE_URL=http://127.0.0.1:9\nTAOTOKEN_MODEL=m\n")
    keyfile.chmod(0o600)
    answers: list[str] = []

    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            listed = await s.list_tools()
            assert sorted(t.name for t in listed.tools) == sorted(TOOL_NAMES)
            assert all(len(t.description) > 60 for t in listed.tools)  # written for an agent
            schema = {t.name: t.inputSchema for t in listed.tools}
            assert set(schema["rl_edit_config"]["properties"]) == {"field", "value"}
            assert set(schema["rl_test_inference"]["properties"]) == {"num_steps", "group_size", "models"}

            # A bad argument is the same {"error", "hint"} as any refusal, not the SDK's pydantic report.
            assert await call(s, "rl_check_status") == {
                "error": "rl_check_status: argument run_id: found nothing, expected a string",
                "hint": "rl_check_status takes run_id (string)"}
            assert await call(s, "rl_select_environment", name=5) == {
                "error": "rl_select_environment: argument name: found 5, expected a valid string",
                "hint": "rl_select_environment takes name (string)"}
            wrong = await call(s, "rl_test_inference", num_steps="three")
            assert wrong["error"] == ("rl_test_inference: argument num_steps: found 'three', expected a valid "
                                      "integer, unable to parse string as an integer"), wrong
            assert await call(s, "rl_list_runs", extra=1) == {"error": "rl_list_runs: unknown argument 'extra'",
                                                             "hint": "rl_list_runs takes no arguments"}

            envs = await call(s, "rl_list_environments")
            names = [e["name"] for e in envs["environments"]]
            assert envs["count"] == len(names) and {"gsm8k", "offline-arith", "word-problems"} <= set(names)
            assert all(set(e) >= {"name", "class_name", "file_path", "description"} for e in envs["environments"])
            assert envs["current"] == "gsm8k"

            config = await call(s, "rl_get_current_config")
            fields = {f["name"]: f for f in config["configurable_fields"]}
            locked = {f["name"]: f for f in config["locked_fields"]}
            assert fields["rollout.group_size"]["current_value"] == 8 and fields["rollout.group_size"]["type"] == "int"
            assert set(fields["rollout.group_size"]) >= {"name", "type", "default", "description", "current_value"}
            assert locked["tinker.lora_rank"]["locked_value"] == 32
            # the CPU profile's overrides are said, not hidden
            assert fields["environment.dataset"]["effective_value"] == "offline-arith"

            edited = await call(s, "rl_edit_config", field="rollout.group_size", value="4")  # a string, as agents send
            assert edited["value"] == 4 and edited["config"]["current_value"] == 4, edited
            toml = (project / "configs" / "config_grpo.toml").read_text()
            assert "group_size = 4             # completions per prompt" in toml  # the comment kept
            assert json.loads((project / "configs" / "settings_grpo.json").read_text())["algorithm"]["group_size"] == 4

            before = _bytes(project)
            refusals = {
                "rollout.temperature": (5, "temperature"),  # out of range (the model's bound)
                "algorithm.advantage_estimator": ("gae", "group_relative"),  # the flat-reward pitfall (a rule)
                "rollout.batch_size": ("many", "batch_size"),  # wrong type
                "tinker.lora_rank": (16, "locked"),  # locked, and the server was not started with --unlock
                "environment.dataset": ("../../outside.jsonl", "outside the project"),
                "no.such_field": (1, "unknown field"),
            }
            for field, (value, said) in refusals.items():
                answer = await call(s, "rl_edit_config", field=field, value=value)
                assert set(answer) >= {"error", "hint"} and said in answer["error"], (field, answer)
                assert _bytes(project) == before, f"{field}: a refused value changed the files"
                answers.append(json.dumps(answer))

            picked = await call(s, "rl_select_environment", name="word-problems")
            assert picked["environment"] == "word-problems" and "offline-arith" in picked["note"]
            assert 'dataset = "word_problems.jsonl"' in (project / "configs" / "config_grpo.toml").read_text()
            missing = await call(s, "rl_select_environment", name="chess")
            assert "chess" in missing["error"] and "gsm8k" in missing["hint"]

            first = await call(s, "rl_check_status", run_id="grpo-19700101-000000-abcdef")
            second = await call(s, "rl_check_status", run_id="grpo-19700101-000000-abcdef")
            assert first == second and "no run 'grpo-19700101-000000-abcdef'" in first["error"]
            assert "rl_list_runs" in first["hint"]  # no "wait 30 minutes": no rate limit
            escaping = await call(s, "rl_check_status", run_id="../../etc")
            assert "no run" in escaping["error"]
            assert await call(s, "rl_list_runs") == {"runs": [], "count": 0}
            for tool, args in (("rl_get_results", {"run_id": "x"}), ("rl_stop_training", {"run_id": "x"})):
                assert "no run 'x'" in (await call(s, tool, **args))["error"]
            answers.extend(json.dumps(a) for a in (envs, config, edited, picked, first))

    _run(scenario())
    assert not any(secret in a or secret[3:11] in a for a in answers), "a secret reached an answer"


def test_locked_field_editable_only_when_the_server_is_started_unlocked(project, elsewhere):
    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu", "--unlock"], elsewhere) as s:
            answer = await call(s, "rl_edit_config", field="tinker.lora_rank", value=16)
            assert answer["config"]["current_value"] == 16, answer

    _run(scenario())
    assert json.loads((project / "configs" / "settings_grpo.json").read_text())["tinker"]["lora_rank"] == 16


def test_a_wrong_project_is_one_clear_error_to_the_client_and_on_stderr(tmp_path, elsewhere):
    missing = tmp_path / "no-such-project"

    async def scenario():
        # The mcp client hands errlog to a subprocess: it needs a real file.
        with (tmp_path / "stderr.txt").open("w") as err:
            async with mcp_session(["--project", str(missing)], elsewhere, errlog=err) as s:
                assert len((await s.list_tools()).tools) == 10  # still listed: Hermes' `mcp test` can show why
                answer = await call(s, "rl_list_environments")
                assert str(missing) in answer["error"] and "--project" in answer["hint"]

    _run(scenario())
    stderr = (tmp_path / "stderr.txt").read_text()
    assert f"error: project folder {missing} does not exist" in stderr


def test_the_project_comes_from_hermes_root_in_the_entrys_env(project, elsewhere):
    async def scenario():
        async with mcp_session(["--device", "cpu"], elsewhere, entry_env={"HERMES_ROOT": str(project)}) as s:
            assert (await call(s, "rl_list_environments"))["current"] == "gsm8k"

    _run(scenario())


def test_http_beyond_loopback_needs_a_token(project, elsewhere):
    import subprocess
    import sys

    from mcp_helpers import hermes_env

    done = subprocess.run([sys.executable, "-m", "hermes_stack", "mcp", "--project", str(project), "--transport",
                           "http", "--host", "0.0.0.0"], cwd=elsewhere, env=hermes_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and "HERMES_MCP_TOKEN" in done.stderr and len(done.stderr.splitlines()) == 1


def test_streamable_http_with_a_token_refuses_requests_without_it(project, elsewhere):
    import subprocess
    import sys
    import time

    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp_helpers import hermes_env
    from trainer_helpers import free_port

    token, port = secrets.token_urlsafe(24), free_port()
    server = subprocess.Popen([sys.executable, "-m", "hermes_stack", "mcp", "--project", str(project), "--device",
                               "cpu", "--transport", "http", "--port", str(port)], cwd=elsewhere,
                              env=hermes_env({"HERMES_MCP_TOKEN": token}), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                refused = httpx.post(url, json={}, timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and server.poll() is None, "the HTTP server did not start"
                time.sleep(0.2)
        assert refused.status_code == 401
        assert httpx.post(url, json={}, headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 401

        async def listed() -> list[str]:
            client = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            async with client, streamable_http_client(url, http_client=client) as (read, write, _), \
                    ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                answer = await session.call_tool("rl_list_runs", {})
                assert json.loads(answer.content[0].text) == {"runs": [], "count": 0}
                return [t.name for t in tools.tools]

        assert sorted(_run(listed())) == sorted(TOOL_NAMES)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _inference_nobody_serves(project: Path) -> str:
    """Points the project's inference port at one nothing listens on: 8001 may be another stack's on a shared test
    machine (a bench's), which would answer the probe."""
    from fakes.loopback import free_port

    port = free_port()  # below the ephemeral range: no server of another test is given it meanwhile
    url = f"http://localhost:{port}/v1"
    for algo in ("grpo", "ppo"):
        path = project / "configs" / f"settings_{algo}.json"
        settings = json.loads(path.read_text())
        settings["inference"].update(port=port, base_url=url)
        path.write_text(json.dumps(settings, indent=2) + "\n")
    return url


def test_runs_on_disk_are_listed_and_a_failed_up_is_reported_with_its_own_error_line(project, elsewhere):
    """The state a detached `up` leaves when validation passed but the stack did not come up (its exit code and its
    output), read by a server that did not start it; nothing running, so no Docker is needed."""
    run_dir = project / ".hermes" / "runs" / "grpo-20261201-100000-abc123"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_dir.name, "algo": "grpo", "device": "cpu",
                                                  "started_at": 1796000000.0, "pid": 0, "environment": "gsm8k"}))
    (run_dir / "up.log").write_text("[1/6] validate grpo configs\n[2/6] preflight: Docker engine\n"
                                    "error: Docker engine not reachable: is dockerd running?\n")
    (run_dir / "exit_code").write_text("1\n")
    url = _inference_nobody_serves(project)

    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            listed = await call(s, "rl_list_runs")
            assert listed == {"count": 1, "runs": [{"run_id": run_dir.name, "environment": "gsm8k",
                                                    "status": "failed", "algo": "grpo",
                                                    "started_at": "2026-11-30T00:53:20Z"}]}, listed
            status = await call(s, "rl_check_status", run_id=run_dir.name)
            assert status["status"] == "failed" and status["error"] == "Docker engine not reachable: is dockerd running?"
            assert status["log_tail"][-1].startswith("error: Docker engine")
            results = await call(s, "rl_get_results", run_id=run_dir.name)
            assert results["final_metrics"]["last_step"] is None and results["history"] == []
            assert (project / results["report_png"]).is_file()  # an empty run still has a report, saying so
            # test-inference offline needs this stack's inference service, which is not up: the controller's own line
            probe = await call(s, "rl_test_inference", num_steps=1)
            assert f"inference service at {url} is not reachable" in probe["error"], probe
            assert "rl_start_training" in probe["hint"], probe
            other = await call(s, "rl_test_inference", models=["some-other-model"])
            assert "not configured" in other["error"], other
            assert "error" in await call(s, "rl_test_inference", num_steps=0)
            assert "group_size=0" in (await call(s, "rl_test_inference", group_size=0))["error"]

    _run(scenario())


def test_the_users_own_environment_file_is_listed_and_selected_by_its_name(project, elsewhere):
    """An atroposlib file in environments/ (issue 21) is one of the agent's environments, from the same catalog
    `hermes-stack environments` reads; selecting it writes [environment] name, and selecting a built-in dataset
    afterwards puts the name back to the built-in environment (else the file would still run)."""
    import shutil

    (project / "environments").mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "user_environments" / "upstream_sums.py", project / "environments")
    (project / "environments" / "broken.py").write_text("class Half(BaseEnv\n")
    config = project / "configs" / "config_grpo.toml"

    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            envs = await call(s, "rl_list_environments")
            mine = [e for e in envs["environments"] if e["name"] == "upstream-sums"]
            assert mine and mine[0]["file_path"] == "environments/upstream_sums.py", envs
            assert mine[0]["class_name"] == "UpstreamSumsEnv" and mine[0]["environment_name"] == "upstream-sums"
            # A file Python cannot parse is named with its line, not silently left out of the agent's list.
            assert envs["unreadable_files"] == ["syntax error at environments/broken.py:1: '(' was never closed"], envs
            typo = await call(s, "rl_select_environment", name="Upstream_Sums")
            assert typo["hint"].startswith("did you mean upstream-sums? one of: "), typo
            assert typo["hint"].endswith("; not read: syntax error at environments/broken.py:1: '(' was never closed")

            picked = await call(s, "rl_select_environment", name="upstream-sums")
            assert picked["environment"] == "upstream-sums", picked
            assert 'name = "upstream-sums"' in config.read_text()
            assert (await call(s, "rl_list_environments"))["current"] == "upstream-sums"

            back = await call(s, "rl_select_environment", name="offline-arith")
            assert back["dataset"] == "offline-arith", back
            text = config.read_text()
            assert 'name = "gsm8k"' in text and 'dataset = "offline-arith"' in text, text
            assert (await call(s, "rl_list_environments"))["current"] == "offline-arith"

    _run(scenario())


def test_an_edit_to_a_project_whose_config_does_not_parse_is_refused_and_writes_nothing(project, elsewhere):
    """Round 6: with a syntax error in the TOML, an edit of settings_grpo.json was written and then answered as an
    error, and an edit of the TOML ended in tomlkit's ParseError ("failed unexpectedly"). Now both are refused with
    validate's line for the broken file, and neither file changes."""
    toml = project / "configs" / "config_grpo.toml"
    broken = {
        "syntax": toml.read_text().replace("batch_size = ", "batch_size ", 1).encode(),
        "bom": b"\xef\xbb\xbf" + toml.read_bytes(),
        "latin-1": toml.read_bytes().replace(b"[rollout]", b"# caf\xe9\n[rollout]", 1),
    }
    answers: dict[str, list[dict]] = {}

    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            # and a refused test-inference writes nothing either (it created .hermes/runs/ first)
            assert "group_size=0" in (await call(s, "rl_test_inference", group_size=0))["error"]
            assert not (project / ".hermes" / "runs").exists()
            for case, content in broken.items():
                toml.write_bytes(content)
                before = _bytes(project)
                answers[case] = [await call(s, "rl_edit_config", field=field, value=value)
                                 for field, value in (("trainer.num_steps", 50), ("rollout.group_size", 4))]
                assert _bytes(project) == before, case

    _run(scenario())
    for case, pair in answers.items():
        for answer in pair:
            assert answer["changed"] is False and "failed unexpectedly" not in answer["error"], (case, answer)
            assert answer["error"].startswith(str(toml)), (case, answer)
            assert answer["hint"] == ("fix configs/config_grpo.toml by hand first (`make validate ALGO=grpo` "
                                      "shows the line); nothing was written"), (case, answer)
    # validate's own line for the file, without its hint (the tool's hint replaces it)
    assert ": syntax: found text where TOML expected '=' after a key in a key/value pair, expected valid TOML" in answers["syntax"][0][
        "error"] and "Hint" not in answers["syntax"][0]["error"], answers["syntax"]
    assert "found a UTF-8 byte-order mark (BOM) at the start" in answers["bom"][0]["error"], answers["bom"]


def test_a_huge_argument_is_not_echoed_whole(project, elsewhere):
    """Round 6: a 100k-character field name came back whole in the error, a 2 MB value up to three times."""
    from hermes_stack.controller.agent_tools.tools import ANSWER_STRING_CHARS

    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            return await s.call_tool("rl_edit_config", {"field": "x" * 100_000, "value": 1})

    result = _run(scenario())
    text = result.content[0].text
    answer = json.loads(text)
    assert "error" in answer and "(100000 characters)" in text, text[:300]
    assert len(text) < 3 * ANSWER_STRING_CHARS


def test_an_answer_is_redacted_before_it_is_cut():
    """Review: cut first, a key straddling the 2000th character kept a prefix the redactor no longer matched."""
    from hermes_stack import redaction
    from hermes_stack.controller.agent_tools.tools import ANSWER_STRING_CHARS, redacted

    key = "plainsecret" + "q7r8s9" * 5
    redaction.forget_secrets()
    try:
        redaction.register_secrets({"TAOTOKEN_API_KEY": key})
        for at in range(ANSWER_STRING_CHARS - 40, ANSWER_STRING_CHARS):
            text = redacted({"description": "x" * at + key + "y" * 100})
            assert key[:12] not in text, at
    finally:
        redaction.forget_secrets()


def test_selecting_an_environment_while_the_other_file_does_not_load_answers_with_its_problems(project, elsewhere):
    """Review: the partial answer of rl_edit_config (written, but the pair still does not load) had no "config", and
    rl_select_environment then failed with KeyError: 'config'. Since round 9 an edit beside a value that stops
    validate's rules is not written (it could not be checked): the selection says which value to fix first."""
    (project / "environments").mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "user_environments" / "upstream_sums.py", project / "environments")
    settings = project / "configs" / "settings_grpo.json"
    data = json.loads(settings.read_text())
    data["trainer"]["num_steps"] = "abc"
    settings.write_text(json.dumps(data, indent=2))

    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            return await call(s, "rl_select_environment", name="upstream-sums")

    before = (project / "configs" / "config_grpo.toml").read_text()
    answer = _run(scenario())
    assert "failed unexpectedly" not in json.dumps(answer), answer
    assert answer["changed"] is False and "trainer.num_steps" in answer["error"], answer
    assert answer["error"].startswith("not written: ") and "rl_edit_config" in answer["hint"], answer
    assert (project / "configs" / "config_grpo.toml").read_text() == before
    data["trainer"]["num_steps"] = 50
    settings.write_text(json.dumps(data, indent=2))
    answer = _run(scenario())
    assert answer["environment"] == "upstream-sums" and 'name = "upstream-sums"' in (
        project / "configs" / "config_grpo.toml").read_text(), answer


def test_a_folder_environment_named_like_a_dataset_is_the_one_that_name_selects(project, elsewhere):
    """Round 6: environments/oa.py named 'offline-arith' was hidden from the agent, and 'offline-arith' meant the
    built-in dataset to it, while validate and up run the user's class by that name."""
    (project / "environments").mkdir()
    (project / "environments" / "oa.py").write_text(
        "from atroposlib.envs.base import BaseEnv\n\n\nclass OA(BaseEnv):\n    name = 'offline-arith'\n\n"
        "    async def get_next_item(self): ...\n\n    async def evaluate(self, *args, **kwargs): ...\n\n"
        "    async def setup(self): ...\n\n    async def collect_trajectories(self, item): ...\n")
    config = project / "configs" / "config_grpo.toml"

    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            listed = (await call(s, "rl_list_environments"))["environments"]
            names = {e["name"]: e for e in listed}
            assert names["offline-arith"]["environment_name"] == "offline-arith", listed
            assert names["offline-arith (built-in dataset)"]["dataset"] == "offline-arith", listed
            picked = await call(s, "rl_select_environment", name="offline-arith")
            assert picked["environment"] == "offline-arith" and 'name = "offline-arith"' in config.read_text(), picked
            assert (await call(s, "rl_list_environments"))["current"] == "offline-arith"
            back = await call(s, "rl_select_environment", name="offline-arith (built-in dataset)")
            assert back.get("dataset") == "offline-arith" and 'name = "gsm8k"' in config.read_text(), back
            assert (await call(s, "rl_list_environments"))["current"] == "offline-arith (built-in dataset)"

    _run(scenario())


def test_an_edit_to_null_says_the_default_applies(project, elsewhere):
    """A null value resets a field (its TOML line removed): the answer said `rollout.top_p = None written`."""
    async def scenario():
        async with mcp_session(["--project", str(project), "--device", "cpu"], elsewhere) as s:
            return await call(s, "rl_edit_config", field="rollout.top_p", value=None)

    toml = _run(scenario())
    assert toml["message"] == ("rollout.top_p removed from configs/config_grpo.toml: its default applies (now "
                               f"{toml['config']['current_value']!r})"), toml
    assert "top_p" not in (project / "configs" / "config_grpo.toml").read_text().split("[rollout]")[1].split("[")[0]

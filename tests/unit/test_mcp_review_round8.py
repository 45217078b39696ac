"""Round 8 of the MCP server's review: an edit judged without the server's --model, lost edits and double starts
across servers, tools blocking the event loop, answer wording, a busy HTTP port, a hint naming an option the tool
lacks, Unicode run ids, and a dataset's line quoted back to the agent."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp_helpers import REPO, config_bytes, hermes_env, open_project, tool_answer

from hermes_stack.controller.agent_tools import runs, tools
from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools

pytestmark = pytest.mark.slow  # validate's checks and child Python processes: seconds each


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    return open_project(tmp_path, monkeypatch)


_bytes, _answer = config_bytes, tool_answer


# ---------------------------------------------------------------- 1: the edit is judged with the server's model


def test_an_edit_is_judged_with_the_servers_model_as_start_judges_it(project):
    """With --model smollm2-135m (a batch of 4 sequences on the embedded profile), trainer.minibatches=64 was written
    ("written") because the candidate was checked without the model, and rl_start_training then refused it."""
    t = Tools(ServerConfig(root=project, device="cpu", model="smollm2-135m"))
    before = _bytes(project)
    answer = _answer(t, "rl_edit_config", field="trainer.minibatches", value=64)
    assert answer.get("changed") is False, answer
    assert answer["error"] == (f"{project}/configs/settings_grpo.json: trainer.minibatches: found 64, expected at most "
                               "the batch's 4 sequences (batch_size 1 x group_size 4)"), answer
    assert _bytes(project) == before
    # what rl_start_training checks first (the same evaluation) has nothing to say about the files as they are
    assert t._stack().errors == []
    # and a value the model's batch takes is written
    assert _answer(t, "rl_edit_config", field="trainer.minibatches", value=2)["config"]["current_value"] == 2


# ---------------------------------------------------------------- 2: two servers at once

_CHILD_PRELUDE = """
import json, os, sys, time
from pathlib import Path
from hermes_stack.controller.agent_tools import config_edit, runs, tools
from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools

root = Path(os.environ["HERMES_ROOT"])
go = root / "go"
while not go.exists():  # both children start their call together
    time.sleep(0.01)
"""


def _children(project: Path, script: str, args: list[list[str]]) -> list[dict]:
    """Run `script` (after _CHILD_PRELUDE) in one Python process per entry of `args`, released together; each prints
    its tool's answer as its last line."""
    env = {**os.environ, "HERMES_ROOT": str(project), "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD_PRELUDE + textwrap.dedent(script), *a], cwd=project,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in args]
    time.sleep(2.0)  # both imported and waiting
    (project / "go").touch()
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr[-3000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_two_servers_editing_two_keys_at_once_both_keep_their_edit(project):
    """Each server read the file, checked its candidate and wrote it: the second write carried the first one's old
    value back. (A pause before the write, in each child, makes both read before either writes, as they did.)"""
    answers = _children(project, """
        original = config_edit.write_atomically
        def slow_write(changes):
            time.sleep(1.0)
            original(changes)
        config_edit.write_atomically = slow_write
        t = Tools(ServerConfig(root=root, device="cpu"))
        print(tools.call(t, None, "rl_edit_config", field=sys.argv[1], value=int(sys.argv[2])))
    """, [["trainer.num_steps", "77"], ["tinker.save_checkpoint_interval", "10"]])
    assert all("files_changed" in a for a in answers), answers
    settings = json.loads((project / "configs" / "settings_grpo.json").read_text())
    assert (settings["trainer"]["num_steps"], settings["tinker"]["save_checkpoint_interval"]) == (77, 10), settings
    assert (project / ".hermes" / "agent-tools.lock").is_file()
    assert not list((project / "configs").glob(".*hermes-edit")), "a temporary file was left"


def test_two_starts_at_once_start_one_run_and_the_other_names_it(project):
    """Both starts checked for an active run before either had made one, and both started an `up`. Here `up` is a
    stand-in that only sleeps (its command line names the run's folder, as the real one does), reached a second
    after the check, as validation and the spawn take."""
    started: list[int] = []
    try:
        answers = _children(project, """
            import subprocess as real
            class Stand_in:
                DEVNULL, STDOUT = real.DEVNULL, real.STDOUT
                @staticmethod
                def Popen(argv, **kwargs):
                    time.sleep(1.0)
                    return real.Popen([sys.executable, "-c", "import time; time.sleep(120)", argv[3]], **kwargs)
            runs.subprocess = Stand_in
            t = Tools(ServerConfig(root=root, device="cpu"))
            print(tools.call(t, None, "rl_start_training"))
        """, [[], []])
        listed = runs.all_runs(project)
        started = [int(r.data["pid"]) for r in listed]
        assert len(listed) == 1, answers
        ok = [a for a in answers if "run_id" in a and a.get("status") == "starting"]
        refused = [a for a in answers if "error" in a]
        assert len(ok) == 1 and len(refused) == 1, answers
        assert refused[0]["error"] == f"run {listed[0].run_id} is starting on this stack", refused
        assert "rl_check_status" in refused[0]["hint"] and "rl_stop_training" in refused[0]["hint"]
    finally:
        for pid in started:  # the stand-ins this test started (each in its own session)
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ---------------------------------------------------------------- 3: the event loop stays free


def _in_memory(server, scenario):
    from mcp.shared.memory import create_connected_server_and_client_session

    async def main():
        async with create_connected_server_and_client_session(server) as session:
            return await scenario(session)

    return anyio.run(main)


def test_a_slow_tool_does_not_hold_up_a_ping_or_another_tool(project, monkeypatch):
    """A sync tool ran on the event loop: a ping and rl_list_runs waited ~20 s behind rl_stop_training's grace."""
    from hermes_stack.controller.agent_tools.server import build_server

    def slow_stop(self, run_id):
        time.sleep(4.0)
        return {"message": "stopped", "run_id": run_id}

    monkeypatch.setattr(Tools, "rl_stop_training", slow_stop)
    server = build_server(Tools(ServerConfig(root=project, device="cpu")), None)

    async def scenario(session):
        took: dict[str, float] = {}
        stop_answer: list = []

        async def stop():
            stop_answer.append(await session.call_tool("rl_stop_training", {"run_id": "grpo-x"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop)
            await anyio.sleep(0.5)
            t0 = time.monotonic()
            await session.send_ping()
            took["ping"] = time.monotonic() - t0
            t0 = time.monotonic()
            listed = await session.call_tool("rl_list_runs", {})
            took["rl_list_runs"] = time.monotonic() - t0
            assert json.loads(listed.content[0].text) == {"runs": [], "count": 0}
            assert not stop_answer, "the slow tool was already done: the test proves nothing"
        assert json.loads(stop_answer[0].content[0].text)["message"] == "stopped"
        return took

    took = _in_memory(server, scenario)
    assert took["ping"] < 1.5 and took["rl_list_runs"] < 3.0, took


def test_output_captured_in_two_threads_at_once_stays_each_ones_and_stdout_is_restored():
    """Tools now run in worker threads; contextlib.redirect_stdout swaps the one process-wide sys.stdout, so two
    overlapping calls mixed their lines and the later restore left sys.stdout on a finished call's buffer."""
    real = sys.stdout
    both = threading.Barrier(2)
    got: dict[str, str] = {}

    def work(name: str, pause: float):
        with tools.captured() as out:
            both.wait()
            print(f"{name} 1")
            time.sleep(pause)
            with tools.captured() as inner:  # the controller's helpers capture inside a tool's capture
                print(f"{name} inner")
            print(f"{name} 2")
        got[name] = out.getvalue()
        got[name + " inner"] = inner.getvalue()

    threads = [threading.Thread(target=work, args=("a", 0.2)), threading.Thread(target=work, args=("b", 0.0))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert got == {"a": "a 1\na 2\n", "a inner": "a inner\n", "b": "b 1\nb 2\n", "b inner": "b inner\n"}, got
    assert sys.stdout is real


def test_test_inference_answers_within_the_documented_client_timeout(project, monkeypatch):
    """docs/agent.md gives the entry `timeout: 300`; the tool could block 900 s (the client gives up first, the
    probe goes on)."""
    documented = int(re.search(r"^\s*timeout: (\d+)$", (REPO / "docs" / "agent.md").read_text(), re.MULTILINE).group(1))
    seen = {}

    def run(argv, **kwargs):
        seen["timeout"] = kwargs["timeout"]
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    monkeypatch.setattr(tools.subprocess, "run", run)
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_test_inference", num_steps=1)
    assert seen["timeout"] < documented, seen
    assert f"more than {seen['timeout']} s" in answer["error"] and "num_steps" in answer["hint"], answer


# ---------------------------------------------------------------- 4: an argument without a value


def test_an_edit_without_a_value_reads_well(project):
    from hermes_stack.controller.agent_tools.server import build_server

    server = build_server(Tools(ServerConfig(root=project, device="cpu")), None)

    async def scenario(session):
        result = await session.call_tool("rl_edit_config", {"field": "rollout.group_size"})
        return json.loads(result.content[0].text)

    assert _in_memory(server, scenario) == {
        "error": "rl_edit_config: argument value: found nothing, expected any JSON value",
        "hint": "rl_edit_config takes field (string), value (any JSON value)"}


# ---------------------------------------------------------------- 5: a busy port


def test_http_on_a_busy_port_is_one_line_and_exit_2(project, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "hermes_stack", "mcp", "--project", str(project), "--device",
                               "cpu", "--transport", "http", "--port", str(port)], cwd=tmp_path, env=hermes_env(),
                              capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, (done.returncode, done.stderr)
    errors = done.stderr.splitlines()  # the one line: no banner, no uvicorn log before it
    assert errors == [(f"error: host port {port}: --port: found {port} on 127.0.0.1: a program listening on it, "
                       "expected a free port for the MCP server (default 8765). Hint: stop that program (`ss -ltnp "
                       f"'sport = :{port}'` names it), or pick another with --port N")], done.stderr
    assert "ERROR:" not in done.stderr and "Traceback" not in done.stderr, done.stderr


# ---------------------------------------------------------------- 6: offline test-inference's hint


def test_offline_test_inference_names_what_the_agent_can_do_not_a_command_line_option(project):
    from test_mcp_server import _inference_nobody_serves

    url = _inference_nobody_serves(project)
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_test_inference", num_steps=1)
    assert answer["error"].startswith(f"the local inference service at {url} is not reachable"), answer
    assert "--local" not in json.dumps(answer) and "make up" not in json.dumps(answer), answer
    assert "rl_start_training" in answer["hint"] and "rl_check_status" in answer["hint"], answer


# ---------------------------------------------------------------- 7: run ids


def test_run_ids_are_ascii_letters_digits_and_dashes(project):
    (runs.runs_dir(project) / "grpo-²").mkdir(parents=True)
    (runs.runs_dir(project) / "grpo-²" / "run.json").write_text(json.dumps({"run_id": "grpo-²", "algo": "grpo"}))
    for bad in ("grpo-²", "grpo-٣", "grpoé", "", "a" * 81, "../x", "x\n"):
        assert not runs.valid_run_id(bad), bad
        assert runs.load(project, bad) is None, bad
    assert runs.valid_run_id("grpo-20261201-100000-abc123")
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_check_status", run_id="grpo-²")
    assert answer["error"].startswith("no run 'grpo-²'"), answer


# ---------------------------------------------------------------- 8: no file's content in an answer

SECRET = "line one has a password hunter2-4f7a"


def test_a_file_named_as_the_dataset_is_never_quoted(project):
    """rl_edit_config("environment.dataset", "../notes.txt") came back with `found invalid JSON …: 'line one has a
    password …'`: any file of the project, read back through a refusal."""
    (project / "notes.txt").write_text(f"{SECRET}\n{{\"question\": \"q\"}}\n")
    t = Tools(ServerConfig(root=project, device="gpu"))  # the profile that reads a dataset file's rows
    before = _bytes(project)
    answer = _answer(t, "rl_edit_config", field="environment.dataset", value="../notes.txt")
    assert answer["changed"] is False and _bytes(project) == before, answer
    assert answer["error"] == (f"{project}/configs/../notes.txt:1: line: found invalid JSON (Expecting value) (the "
                               "line's content is not shown), expected one JSON object per line"), answer
    assert "hunter2" not in json.dumps(answer)

    # written by hand: the problems of rl_get_current_config (and rl_start_training) do not quote it either
    toml = project / "configs" / "config_grpo.toml"
    toml.write_text(toml.read_text().replace('dataset = "gsm8k"', 'dataset = "../notes.txt"', 1))
    for tool in ("rl_get_current_config", "rl_start_training"):
        said = json.dumps(_answer(t, tool))
        assert "notes.txt:1: line" in said and "notes.txt:2: answer: found no answer" in said, said
        assert "hunter2" not in said and '"q"' not in said, said


def test_every_shape_of_a_dataset_line_problem_is_named_without_its_content():
    from hermes_stack.controller.agent_tools.tools import hide_file_content

    lines = {
        "/p/d.jsonl:3: line: found a JSON list: '[\"s3cret\"]' (the first of 4 such lines), expected one JSON object "
        "per line": "/p/d.jsonl:3: line: found a JSON list (the line's content is not shown) (the first of 4 such "
                    "lines), expected one JSON object per line",
        "/p/d.jsonl:1: question: found 12345678, expected a string":
            "/p/d.jsonl:1: question: found a question that is no string (the line's content is not shown), expected "
            "a string",
        "/p/d.jsonl:2: answer: found 's3cret', expected a string ending in \"#### N\"":
            "/p/d.jsonl:2: answer: found an answer without \"#### N\" at its end (the line's content is not shown), "
            "expected a string ending in \"#### N\"",
        "/p/d.jsonl:2: answer: found 's3cret' after the last ####, expected a number there, as in \"#### 42\"":
            "/p/d.jsonl:2: answer: found no number after the last #### (the line's content is not shown), expected "
            "a number there, as in \"#### 42\"",
        "/p/d.jsonl:5: answer: found no answer, expected a string ending in \"#### N\"":
            "/p/d.jsonl:5: answer: found no answer (the line's content is not shown), expected a string ending in "
            "\"#### N\"",
    }
    for line, shown in lines.items():
        assert hide_file_content(line) == shown
        assert hide_file_content(f"error: {line}. Hint: h") == f"error: {shown}. Hint: h"
    untouched = "/p/configs/settings_grpo.json: trainer.minibatches: found 64, expected at most 4"
    assert hide_file_content(untouched) == untouched


# ---------------------------------------------------------------- another checkout's stack of the same project name


class _OtherCheckoutsStack:
    """compose for hermes-grpo while another checkout's stack of that name trains (its containers' working-directory
    label names that checkout); its metrics say step 87."""

    def __init__(self, working_dir: str):
        self.working_dir = working_dir
        self.metrics_read = 0

    def ps(self) -> list[dict]:
        return [{"Service": name, "Name": f"hermes-grpo-{name}-1", "State": "running", "Health": "healthy",
                 "ExitCode": 0, "Labels": f"com.docker.compose.project=hermes-grpo,"
                                           f"com.docker.compose.project.working_dir={self.working_dir}"}
                for name in ("atropos", "environment", "inference", "trainer")]

    def exec(self, service: str, argv: list[str]) -> str:
        self.metrics_read += 1
        return json.dumps({"step": 87, "time": 1796000100.0, "reward_mean": 0.5}) + "\n"


def test_a_failed_run_is_not_given_another_checkouts_stack_health_or_metrics(project, tmp_path, monkeypatch):
    """Two checkouts share the project name hermes-<algo>. This checkout's `up` failed; the other checkout's stack
    trains. rl_check_status reported that stack's containers as this run's and copied its metrics (step 87) into
    this run's folder, so rl_get_results showed another experiment's training."""
    run_dir = project / ".hermes" / "runs" / "grpo-20261201-100000-abc123"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_dir.name, "algo": "grpo", "device": "cpu",
                                                  "started_at": 1796000000.0, "pid": 0, "environment": "gsm8k"}))
    (run_dir / "up.log").write_text("error: host port 8000: found a program listening on it\n")
    (run_dir / "exit_code").write_text("2\n")
    other = _OtherCheckoutsStack(str(tmp_path / "other-checkout"))
    monkeypatch.setattr(Tools, "_compose", lambda self, algo=None: other)
    t = Tools(ServerConfig(root=project, device="cpu"))
    status = _answer(t, "rl_check_status", run_id=run_dir.name)
    assert status["status"] == "failed" and status["processes"] == [] and status["metrics"]["step"] is None, status
    assert other.metrics_read == 0 and not (run_dir / "metrics.jsonl").exists()
    # The same stack made from this checkout is this run's: its containers are shown.
    other.working_dir = str(project)
    assert len(_answer(t, "rl_check_status", run_id=run_dir.name)["processes"]) == 4


class _TrainingStack:
    """compose for this checkout's hermes-grpo: the trainer runs at step 14 until `stop` (its SIGTERM finishes
    steps 15 and 16, saves step-16 and records the stop), then it has exited 0."""

    def __init__(self, root: Path):
        from hermes_stack.controller.compose import ComposeParams

        self.root, self.calls, self.params = root, [], ComposeParams(files=("compose.grpo.yml",))
        self.lines = [json.dumps({"step": s, "reward_mean": 0.1, "time": 1796000000.0 + s}) for s in range(1, 15)]
        self.logs: dict[str, list[str]] = {}  # a service's log lines, as `compose logs --tail` streams them

    def stream(self, argv: list[str]):
        return iter(self.logs.get(argv[-1], []))

    def ps(self) -> list[dict]:
        stopped = "stop" in self.calls
        return [{"Service": name, "Name": f"hermes-grpo-{name}-1", "ExitCode": 0,
                 "State": "exited" if stopped and name == "trainer" else "running",
                 "Health": "" if stopped and name == "trainer" else "healthy",
                 "Labels": f"com.docker.compose.project.working_dir={self.root}"}
                for name in ("atropos", "environment", "inference", "trainer")]

    def exec(self, service: str, argv: list[str]) -> str:
        return "\n".join(self.lines) + "\n"

    def stop(self, services) -> str:
        self.calls.append("stop")
        self.lines += [json.dumps({"step": s, "reward_mean": 0.2, "time": 1796000000.0 + s}) for s in (15, 16)]
        self.lines += [json.dumps({"event": "saved", "message": "step 16 saved on stop as step-16",
                                   "checkpoint": "step-16", "at_step": 16, "time": 1796000100.0}),
                       json.dumps({"event": "stopped", "message": "stopped by SIGTERM after step 16", "at_step": 16,
                                   "time": 1796000100.0})]
        return ""


def _running_run(project: Path) -> Path:
    run_dir = project / ".hermes" / "runs" / "grpo-20261201-100000-abc123"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_dir.name, "algo": "grpo", "device": "cpu",
                                                  "started_at": 1796000000.0, "pid": 0, "environment": "gsm8k"}))
    (run_dir / "exit_code").write_text("0\n")
    return run_dir


def test_a_stop_reports_the_steps_and_checkpoint_the_trainers_stop_saved(project, monkeypatch):
    """rl_stop_training copied the metrics before the stack went down: it said step 14 and no checkpoint while the
    trainer's stop went on to step 16 and saved step-16, where the next start resumed."""
    from hermes_stack.controller.commands import stack as stack_commands

    run_dir = _running_run(project)
    fake = _TrainingStack(project)
    monkeypatch.setattr(Tools, "_compose", lambda self, algo=None: fake)
    monkeypatch.setattr(stack_commands, "down", lambda algo, volumes: fake.calls.append("down"))
    answer = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_stop_training", run_id=run_dir.name)
    assert fake.calls == ["stop", "down"], fake.calls
    assert answer["status_before_stop"] == "running", answer
    assert answer["final_metrics"]["last_step"] == 16 and answer["final_metrics"]["last_checkpoint"] == "step-16"


def test_a_trainer_stopped_outside_the_tools_is_stopped_not_completed(project, monkeypatch):
    """`docker compose stop trainer` exits 0 as a finished run does: rl_check_status said "completed" at step 16
    of 400 (the CLI's status told them apart already)."""
    run_dir = _running_run(project)
    fake = _TrainingStack(project)
    fake.stop(["trainer"])
    monkeypatch.setattr(Tools, "_compose", lambda self, algo=None: fake)
    status = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_check_status", run_id=run_dir.name)
    assert status["status"] == "stopped" and "stopped after step 16" in status["error"], status
    assert status["metrics"]["last_checkpoint"] == "step-16"


def test_a_completed_run_stays_completed_when_a_newer_run_closes_it(project, monkeypatch):
    """rl_list_runs listed a run that had completed (25/25) as "stopped" once a newer run started."""
    run_dir = _running_run(project)
    runs.mark_stopped(runs.load(project, run_dir.name), runs.SUPERSEDED, {"status": "completed", "metrics": {}})
    t = Tools(ServerConfig(root=project, device="cpu"))
    assert _answer(t, "rl_list_runs")["runs"][0]["status"] == "completed"
    assert _answer(t, "rl_check_status", run_id=run_dir.name)["status"] == "completed"
    assert _answer(t, "rl_stop_training", run_id=run_dir.name)["status"] == "completed"
    runs.mark_stopped(runs.load(project, run_dir.name), "rl_stop_training", {"status": "running", "metrics": {}})
    assert _answer(t, "rl_list_runs")["runs"][0]["status"] == "stopped"


def test_a_start_that_found_the_run_complete_says_nothing_was_trained(project, monkeypatch):
    """rl_start_training with the checkpoint at num_steps: `up` trained nothing, and rl_check_status said only
    "completed", with no word of why or of what trains on."""
    run_dir = _running_run(project)
    (run_dir / "up.log").write_text("[6/6] start training\n      ✓ nothing to train: the run is complete (checkpoint "
                                    "step 25 >= num_steps 25) (3.1 s)\n")
    fake = _TrainingStack(project)
    fake.calls.append("stop")  # the trainer has exited 0; no stop recorded: it ran to its end
    monkeypatch.setattr(Tools, "_compose", lambda self, algo=None: fake)
    status = _answer(Tools(ServerConfig(root=project, device="cpu")), "rl_check_status", run_id=run_dir.name)
    assert status["status"] == "completed" and "nothing was trained" in status["note"], status
    assert "rl_edit_config('trainer.num_steps'" in status["note"]


def test_an_edit_while_a_run_trains_says_the_run_keeps_its_settings(project, monkeypatch):
    """The edit was answered "written" with no word of the running run, which went on with the old value."""
    run_dir = _running_run(project)
    fake = _TrainingStack(project)
    monkeypatch.setattr(Tools, "_compose", lambda self, algo=None: fake)
    t = Tools(ServerConfig(root=project, device="cpu"))
    answer = _answer(t, "rl_edit_config", field="trainer.num_steps", value=60)
    assert answer["message"].endswith(f"; run {run_dir.name} keeps its settings: rl_stop_training, then "
                                      "rl_start_training, resumes it with this one"), answer
    fake.calls.append("stop")  # the trainer exited 0 at its end: no run trains, nothing to say
    assert "keeps its settings" not in _answer(t, "rl_edit_config", field="trainer.num_steps", value=61)["message"]

"""A real CPU run driven only through `hermes-stack mcp` (the official mcp client over stdio, from another directory,
with Hermes' minimal environment), on the user's own environment (issue 21): an upstream-style atroposlib file (a
hub tokenizer, localhost URLs, its own group size and batch size, use_wandb on, its own +1/-1 scoring, None for equal
groups) in the project's environments/ folder, picked by the agent with rl_select_environment, runs unchanged.

The agent's side: rl_list_environments, rl_select_environment, rl_edit_config, rl_start_training (a detached `up`),
rl_check_status until the steps advance (also from a second, restarted server: the run lives on disk),
rl_stop_training, rl_get_results and its report PNG checked panel by panel. The environment's side: the trainer's
metrics show it trained on that file's groups (reward_min -1, a score the built-in environment never gives) and the
environment's log names the values the stack replaced. One stack for both (CI time is shared): its own compose
project (hermes-test-mcp-grpo), torn down with its volume."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_stack.controller.report import build_figure
from hermes_stack.controller.status import parse_events, parse_metrics

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
from mcp_helpers import call, mcp_session
from test_report import assert_every_panel_drawn

pytestmark = [pytest.mark.docker, pytest.mark.slow]
PROJECT = "hermes-test-mcp-grpo"
WAIT_S = 900  # bounded; nothing asserts on time


def _controller(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HERMES_ROOT": str(root), "HERMES_PROJECT_NAME": PROJECT}
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=1500, check=False)


USER_ENV = ROOT / "tests" / "fixtures" / "user_environments" / "upstream_sums.py"
# What the environment service says it replaced in the upstream file (environment/user_env.py).
REPLACED = ("replaced tokenizer_name: found 'NousResearch/DeepHermes-3-Llama-3-3B-Preview', used ",
            "replaced rollout_server_url: found 'http://localhost:8000', used 'http://atropos:8000'",
            "replaced use_wandb: found True, used False", "replaced group_size: found 16, used 8",
            "replaced server_configs[0].base_url: found 'http://localhost:9001/v1', used 'http://inference:8001/v1'",
            "replaced server_configs[0].api_key: found (hidden), used (the stack's internal key)")


def _project_copy(tmp: Path) -> Path:
    """The compose files, configs and environments/ with the user's file: the images are the repository's, built just
    before (as test_stack_cpu)."""
    for name in ("compose.base.yml", "compose.grpo.yml", "compose.ppo.yml", "compose.cpu.yml"):
        shutil.copy(ROOT / name, tmp / name)
    shutil.copytree(ROOT / "configs", tmp / "configs")
    shutil.copytree(ROOT / "environments", tmp / "environments")
    shutil.copy(USER_ENV, tmp / "environments" / USER_ENV.name)
    return tmp


def _trained_records() -> list[dict]:
    """The trainer's metrics.jsonl rows, read in its container (found by its compose labels)."""
    trainer = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}",
                              "--filter", "label=com.docker.compose.service=trainer"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert len(trainer) == 1, trainer
    out = subprocess.run(["docker", "exec", trainer[0], "cat", "/data/metrics.jsonl"], capture_output=True, text=True,
                         check=False, timeout=60).stdout
    return [row for line in out.splitlines() if line.startswith("{") and "step" in (row := json.loads(line))]


def _containers() -> list[str]:
    return subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                          capture_output=True, text=True, check=True).stdout.split()


def test_a_cpu_run_started_followed_stopped_and_reported_through_mcp(tmp_path):
    built = _controller(ROOT, "build", "--algo", "grpo", "--device", "cpu")
    assert built.returncode == 0, built.stderr[-3000:]
    (tmp_path / "project").mkdir()
    project = _project_copy(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = ["--project", str(project), "--device", "cpu", "--no-build", "--wait-timeout", "600"]
    entry_env = {"HERMES_PROJECT_NAME": PROJECT}  # the entry's env: a project name of the test's own
    _controller(project, "down", "--algo", "grpo", "--volumes")
    seen: dict = {}

    async def start_and_follow():
        async with mcp_session(args, elsewhere, entry_env) as s:
            listed = await call(s, "rl_list_environments")
            assert "upstream-sums" in [e["name"] for e in listed["environments"]], listed
            picked = await call(s, "rl_select_environment", name="upstream-sums")
            assert picked["environment_name"] == "upstream-sums", picked
            edited = await call(s, "rl_edit_config", field="trainer.num_steps", value=500)
            assert edited["config"]["current_value"] == 500, edited
            started = await call(s, "rl_start_training")
            assert started["status"] == "starting" and started["run_id"], started
            seen["run_id"] = started["run_id"]
            again = await call(s, "rl_start_training")  # one run per stack
            assert "error" in again and started["run_id"] in again["error"], again
            early = await call(s, "rl_check_status", run_id=started["run_id"])
            assert early["status"] in ("starting", "running"), early
        # A new server (the agent restarted): the run is found on disk and followed to two steps.
        async with mcp_session(args, elsewhere, entry_env) as s:
            deadline = time.monotonic() + WAIT_S
            steps: list[int] = []
            while time.monotonic() < deadline:
                status = await call(s, "rl_check_status", run_id=seen["run_id"])
                assert status["status"] in ("starting", "running"), status
                step = status["metrics"]["step"]
                if status["status"] == "running" and step is not None and (not steps or step > steps[-1]):
                    steps.append(step)
                if len(steps) >= 2 and steps[-1] >= 3:
                    break
                await asyncio.sleep(3)
            assert len(steps) >= 2 and steps[-1] > steps[0] and steps[-1] >= 3, status
            assert status["health"]["trainer"] == "running (healthy)", status["health"]
            assert {p["service"] for p in status["processes"]} >= {"atropos", "inference", "trainer", "environment"}
            assert status["metrics"]["reward_mean"] is not None
            listed = await call(s, "rl_list_runs")
            assert [(r["run_id"], r["status"]) for r in listed["runs"]] == [(seen["run_id"], "running")]
            # The user's file trained: its scores (+1 right, -1 wrong) reached the trainer (the built-in environment
            # scores 0..1.1), and the environment's log says what the stack replaced in it.
            records = _trained_records()
            assert len(records) >= 3, records
            assert all(r.get("reward_min") == -1.0 and r.get("reward_max") == 1.0 for r in records[:3]), records[:3]
            # Its groups carry the weights step they were sampled with (the stack tags them), so the trainer's
            # staleness bound applies to them (untagged, every step line said staleness=nan and nothing was bounded);
            # and no built-in held-out evaluation runs beside it (status showed the built-in task's "0.000").
            assert all(r.get("untagged_groups") == 0 and 0 <= r.get("staleness_max") <= 1 for r in records), records[:3]
            assert not any("eval_accuracy" in r for r in records), records[:3]
            logs = _controller(project, "logs", "--algo", "grpo", "environment").stdout
            assert "environment upstream-sums (UpstreamSumsEnv, environments/upstream_sums.py)" in logs, logs[-3000:]
            for line in REPLACED:
                assert line in logs, (line, logs[-3000:])

            stopped = await call(s, "rl_stop_training", run_id=seen["run_id"])
            assert stopped["status"] == "stopped" and stopped["status_before_stop"] == "running", stopped
            # Read after the trainer's own stop, which saves its step: a checkpoint exists, and it is the newest step
            # (the metrics copied before the stop missed both).
            final = stopped["final_metrics"]
            assert final["last_checkpoint"] == f"step-{final['last_step']}", final
            assert _containers() == [], "rl_stop_training left containers"
            after = await call(s, "rl_check_status", run_id=seen["run_id"])
            assert after["status"] == "stopped" and after["metrics"]["step"] >= steps[-1], after
            results = await call(s, "rl_get_results", run_id=seen["run_id"])
            seen["results"] = results

    try:
        asyncio.run(start_and_follow())
        results = seen["results"]
        assert results["status"] == "stopped"
        assert results["final_metrics"]["last_step"] >= 2 and results["history"], results["final_metrics"]
        png = project / results["report_png"]
        assert png.is_file() and (project / results["report_html"]).is_file()
        # The same figure again from the run's kept metrics, for the panels' positions in the PNG.
        text = (png.parent / "metrics.jsonl").read_text()
        figure = build_figure(parse_metrics(text), parse_events(text), "layout")
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(figure).draw()
        assert_every_panel_drawn(png, figure, restart=False,
                                 expect_data={"reward mean", "KL", "entropy", "clip fraction", "step time (s)"})
        log = (png.parent / "up.log").read_text()
        assert "dry-run passed" in log and "training runs" in log, log[-2000:]
        assert (project / "environments" / USER_ENV.name).read_bytes() == USER_ENV.read_bytes()  # unchanged
    finally:
        for record in (project / ".hermes" / "runs").glob("*/run.json"):  # the detached controllers it started
            pid = json.loads(record.read_text()).get("pid")
            if pid and not (record.parent / "exit_code").exists():
                try:
                    os.killpg(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        down = _controller(project, "down", "--algo", "grpo", "--volumes")
    assert down.returncode == 0, down.stderr
    assert _containers() == []
    volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"name={PROJECT}_hermes-data"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert volumes == []

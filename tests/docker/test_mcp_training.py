"""A real CPU run driven only through `hermes-stack mcp` (the official mcp client over stdio, from another directory,
with Hermes' minimal environment): rl_edit_config, rl_start_training (a detached `up`), rl_check_status until the
steps advance (also from a second, restarted server: the run lives on disk), rl_stop_training, rl_get_results and
its report PNG checked panel by panel. Its own compose project (hermes-test-mcp-grpo), torn down with its volume."""

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


def _project_copy(tmp: Path) -> Path:
    """The compose files and configs: the images are the repository's, built just before (as test_stack_cpu)."""
    for name in ("compose.base.yml", "compose.grpo.yml", "compose.ppo.yml", "compose.cpu.yml"):
        shutil.copy(ROOT / name, tmp / name)
    shutil.copytree(ROOT / "configs", tmp / "configs")
    return tmp


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
                if len(steps) >= 2:
                    break
                await asyncio.sleep(3)
            assert len(steps) >= 2 and steps[-1] > steps[0], status
            assert status["health"]["trainer"] == "running (healthy)", status["health"]
            assert {p["service"] for p in status["processes"]} >= {"atropos", "inference", "trainer", "environment"}
            assert status["metrics"]["reward_mean"] is not None
            listed = await call(s, "rl_list_runs")
            assert [(r["run_id"], r["status"]) for r in listed["runs"]] == [(seen["run_id"], "running")]

            stopped = await call(s, "rl_stop_training", run_id=seen["run_id"])
            assert stopped["status"] == "stopped" and stopped["status_before_stop"] == "running", stopped
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

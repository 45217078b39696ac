"""Training runs started by the agent tools, kept on disk so they outlive the MCP server.

.hermes/runs/<run_id>/
  run.json      what was started: algo, device, environment, the configuration as validated, the controller's pid
  up.log        the detached `hermes-stack up`'s output (redacted by the controller's console, as on a terminal)
  exit_code     written by hermes_stack.controller.agent_tools.detached when `up` returns
  stopped.json  when rl_stop_training stopped it (or a newer run of the same algorithm replaced it)
  metrics.jsonl the trainer's metrics, copied from the data volume whenever they are read (so a stopped run keeps them)
  report.png / report.html

A run's status comes from these files plus `compose ps` of its stack; nothing lives in the server's memory.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_stack.controller.agent_tools.config_edit import replace_whole
from hermes_stack.controller.stack_state import STATE_DIR

RUNS = "runs"


def runs_dir(root: Path) -> Path:
    return root / STATE_DIR / RUNS


def new_run_id(algo: str) -> str:
    return f"{algo}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def valid_run_id(run_id: str) -> bool:
    """A run id names a folder under .hermes/runs: ASCII letters, digits and dashes only, so no id leaves it
    (str.isalnum also passed '²' and other Unicode letters and digits)."""
    return len(run_id) <= 80 and re.fullmatch(r"[A-Za-z0-9-]+", run_id) is not None


@dataclass(frozen=True)
class Run:
    path: Path
    data: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.data["run_id"]

    @property
    def algo(self) -> str:
        return self.data["algo"]

    @property
    def log(self) -> Path:
        return self.path / "up.log"

    def exit_code(self) -> int | None:
        try:
            return int((self.path / "exit_code").read_text().strip())
        except (OSError, ValueError):
            return None

    def stopped(self) -> dict | None:
        try:
            return json.loads((self.path / "stopped.json").read_text())
        except (OSError, ValueError):
            return None

    def controller_alive(self) -> bool:
        """The detached `up` is still running: its pid is alive and is our process (cmdline names this run)."""
        pid = self.data.get("pid")
        if not pid or self.exit_code() is not None:
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return self.run_id in cmdline and stat.split(")")[-1].split()[0] != "Z"  # a zombie has finished


def load(root: Path, run_id: str) -> Run | None:
    if not valid_run_id(run_id):
        return None
    path = runs_dir(root) / run_id
    try:
        return Run(path, json.loads((path / "run.json").read_text()))
    except (OSError, ValueError):
        return None


def all_runs(root: Path) -> list[Run]:
    """Every run, oldest first."""
    found = [load(root, p.parent.name) for p in runs_dir(root).glob("*/run.json")] if runs_dir(root).is_dir() else []
    return sorted((r for r in found if r is not None), key=lambda r: r.data.get("started_at", 0))


def latest_of(root: Path, algo: str) -> Run | None:
    same = [r for r in all_runs(root) if r.algo == algo]
    return same[-1] if same else None


# The reason a run is closed with when a newer one starts: it had already ended (completed, failed or stopped), and
# keeps the status it ended with (a completed run was listed as "stopped" afterwards).
SUPERSEDED = "ended before a newer run started"


def status_when_closed(stopped: dict) -> str:
    """The status a closed run shows: "stopped", or the one it ended with when a newer run closed it."""
    final = stopped.get("final_status") or {}
    if stopped.get("reason") == SUPERSEDED and final.get("status") in ("completed", "failed", "stopped"):
        return final["status"]
    return "stopped"


def mark_stopped(run: Run, reason: str, final: dict | None = None) -> None:
    # replaced whole: another server reading it half-written took the run for not stopped
    replace_whole(run.path / "stopped.json", json.dumps({"time": time.time(), "reason": reason,
                                                         "final_status": final or {}}).encode())


def start(root: Path, algo: str, device: str, up_args: list[str], data: dict[str, Any]) -> Run:
    """Create the run's folder and start `hermes-stack up` detached (its own session: it outlives the server)."""
    run_id = new_run_id(algo)
    path = runs_dir(root) / run_id
    path.mkdir(parents=True)
    argv = [sys.executable, "-m", "hermes_stack.controller.agent_tools.detached", str(path), "--",
            "up", "--algo", algo, "--device", device, *up_args]
    record = {"run_id": run_id, "algo": algo, "device": device, "started_at": time.time(),
              "project_name": os.environ.get("HERMES_PROJECT_NAME") or f"hermes-{algo}", **data}
    with (path / "up.log").open("ab") as log:
        proc = subprocess.Popen(argv, cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, "HERMES_ROOT": str(root)})
    record["pid"] = proc.pid
    # Written once, whole, with the pid: another server listing the runs meanwhile saw a run.json without a pid, a
    # run "failed" that had only just started.
    replace_whole(path / "run.json", json.dumps(record, indent=2, default=str).encode())
    _children.append(proc)  # reaped by reap(): a finished child must not stay a zombie of a long-lived server
    return Run(path, record)


_children: list[subprocess.Popen] = []


def reap() -> None:
    for proc in list(_children):
        if proc.poll() is not None:
            _children.remove(proc)


def stop_controller(run: Run, grace_s: float = 20.0) -> bool:
    """SIGTERM the detached `up` (its whole session: compose and the dry-run with it); True when one was running."""
    if not run.controller_alive():
        return False
    pid = int(run.data["pid"])
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and run.controller_alive():
        reap()
        time.sleep(0.2)
    if run.controller_alive():
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reap()
    return True


def log_tail(run: Run, lines: int = 15) -> list[str]:
    """The last lines of the run's controller log (ANSI colour codes removed)."""
    import re

    try:
        text = run.log.read_text(errors="replace")
    except OSError:
        return []
    clean = [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in text.splitlines()]
    return [line for line in clean if line.strip()][-lines:]


def error_line(run: Run) -> str | None:
    """The controller's own error line (`error: …`), as `up` printed it."""
    errors = [line for line in log_tail(run, 200) if line.startswith("error: ")]
    return errors[-1].removeprefix("error: ") if errors else None

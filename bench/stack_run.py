"""One CPU stack run for the stack benches (bench/stack_learning.py, bench/stack_throughput.py): `hermes-stack up`
with the shipped configs from a fresh volume, the trainer's own metrics.jsonl read while it trains, then `down
--volumes`, whatever happened.

The stack gets its own compose project name (HERMES_PROJECT_NAME) so it never touches another checkout's stack. The
host ports are the configs' (8000/8001), which every checkout shares: run these benches under the Docker lock,
`flock /tmp/hermes-docker.lock .venv/bin/python bench/stack_learning.py`. `up` rebuilds the images from this checkout
inside that same locked command, as the shared image tags require. Start Docker first (`make docker`) outside the
lock: a dockerd started inside a locked command inherits the lock's file and holds it for as long as it runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = re.compile(r"held-out before step 1: accuracy ([0-9.]+)")


@dataclass
class StackRun:
    algo: str
    records: list[dict] = field(default_factory=list)  # metrics.jsonl step records
    baseline: float | None = None  # the trainer's held-out accuracy before step 1
    up_s: float = float("nan")
    log_tail: str = ""
    env_log: str = ""  # the environment's log (its batch lines carry its own rollout rate)
    inference_log: str = ""  # the inference server's log (its "sampled ... batches" lines: rows a batch, busy share)
    steal: float = float("nan")  # the host's CPU share its hypervisor took while the stack trained (steal_share)

    @property
    def started(self) -> float | None:
        """Wall time when step 1's training began: its record's time less what the step itself took."""
        if not self.records:
            return None
        first = self.records[0]
        return first["time"] - sum(first.get(k) or 0.0 for k in ("step_s", "sync_s", "eval_s"))


def cpu_times(stat: str | None = None) -> list[int]:
    """The host's CPU time so far, in ticks, by kind: the aggregate `cpu` line of /proc/stat (user, nice, system,
    idle, iowait, irq, softirq, steal, ...); [] where there is none (not Linux)."""
    if stat is None:
        try:
            stat = Path("/proc/stat").read_text()
        except OSError:
            return []
    for line in stat.splitlines():
        if line.startswith("cpu "):
            return [int(x) for x in line.split()[1:]]
    return []


def steal_share(before: list[int], after: list[int]) -> float:
    """The share of the host's CPU time between two cpu_times() readings that its hypervisor gave to other guests
    (steal, the 8th field; guest time is counted within user already, so fields 9 and 10 are left out); NaN when
    either reading lacks it. A raw rate that reads a third lower within minutes, code unchanged, comes with steal
    (issue 22, docs/benchmarks.md): a bench prints it beside figures it cannot control for."""
    if len(before) < 8 or len(after) < 8:
        return float("nan")
    spent = [b - a for a, b in zip(before[:8], after[:8])]
    total = sum(spent)
    return spent[7] / total if total > 0 else float("nan")


def project_for(algo: str) -> str:
    return os.environ.get("HERMES_PROJECT_NAME") or f"hermes-bench-{algo}"


def hs(algo: str, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = {**os.environ, "HERMES_ROOT": str(ROOT), "HERMES_PROJECT_NAME": project_for(algo)}
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def compose(algo: str, *args: str) -> subprocess.CompletedProcess:
    files = [f"compose.{algo}.yml", "compose.cpu.yml"]
    return subprocess.run(["docker", "compose", "--project-name", project_for(algo), "--project-directory", str(ROOT),
                           *[a for f in files for a in ("-f", str(ROOT / f))], *args],
                          capture_output=True, text=True, check=False, timeout=300)


def read_records(algo: str, exited: bool = False) -> list[dict]:
    """The trainer's metrics.jsonl step records; `exited`: copied out of the stopped container (exec needs it
    running), for the steps written after the last poll."""
    if exited:
        with tempfile.TemporaryDirectory() as tmp:
            compose(algo, "cp", "trainer:/data/metrics.jsonl", tmp)
            path = Path(tmp) / "metrics.jsonl"
            out = path.read_text() if path.exists() else ""
    else:
        out = compose(algo, "exec", "-T", "trainer", "cat", "/data/metrics.jsonl").stdout
    records = []
    for line in out.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "step" in rec:
            records.append(rec)
    return records


def run_stack(algo: str, done: Callable[[StackRun], bool], timeout_s: float, poll_s: float = 5.0,
              log: Callable[[str], None] = print, weights_to: Path | None = None) -> StackRun:
    """Up from a fresh volume, poll metrics.jsonl until `done(run)` or `timeout_s` of training, then down -v.
    `weights_to`: the data volume's weights folder (the step folders the trainer pushed) is copied there first."""
    run = StackRun(algo)
    hs(algo, "down", "--algo", algo, "--volumes")
    try:
        began = time.monotonic()
        up = hs(algo, "up", "--algo", algo, "--device", "cpu")
        run.up_s = time.monotonic() - began
        if up.returncode != 0:
            raise SystemExit(f"{algo}: up failed ({up.returncode}):\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}")
        log(f"{algo}: up in {run.up_s:.0f} s (project {project_for(algo)}); training")
        deadline = time.monotonic() + timeout_s + 120  # the first step may wait for the environment's registration
        reported = 0
        times = cpu_times()
        while time.monotonic() < deadline:
            time.sleep(poll_s)
            # Once the trainer has finished its steps its container exits and `exec` reads nothing: copy the file out
            # of the stopped container once more (the steps since the last poll), and stop polling.
            records = read_records(algo)
            if not records and run.records:
                run.records = read_records(algo, exited=True) or run.records
                break
            run.records = records or run.records
            if run.baseline is None:
                logs = compose(algo, "logs", "--no-log-prefix", "trainer").stdout
                if m := BASELINE.search(logs):
                    run.baseline = float(m.group(1))
            evaluated = [r for r in run.records if r.get("eval_accuracy") is not None]
            if len(evaluated) > reported:
                r = evaluated[-1]
                log(f"{algo}: step {r['step']} held-out {r['eval_accuracy']:.3f} "
                    f"({r['time'] - (run.started or r['time']):.0f} s of training)")
                reported = len(evaluated)
            if done(run):
                break
            if run.started is not None and time.time() - run.started > timeout_s:
                break
        run.steal = steal_share(times, cpu_times())
        run.log_tail = compose(algo, "logs", "--tail", "30", "trainer").stdout
        run.env_log = compose(algo, "logs", "--no-log-prefix", "environment").stdout
        run.inference_log = compose(algo, "logs", "--no-log-prefix", "inference").stdout
        if weights_to is not None:  # `cp` reads a stopped container too (a trainer that finished its steps)
            copied = compose(algo, "cp", "trainer:/data/weights", str(weights_to))
            if copied.returncode != 0:
                log(f"{algo}: the pushed weights were not copied: {copied.stderr[-300:]}")
    finally:
        down = hs(algo, "down", "--algo", algo, "--volumes")
        if down.returncode != 0:
            log(f"{algo}: down failed: {down.stderr[-500:]}")
    return run

"""`up --replicas 2` on CPU (issue 23): two built-in inference replicas behind SGLang's router, one stack, in order:

1. two inference containers and the router are up and healthy, and training advances;
2. the requests of one step (served under that step's weights) came to both replicas, by their own counters;
3. after a weight sync both replicas report the same weights version;
4. kill -9 of one replica's main process: training goes on, and the returning replica loads the current weights
   and serves requests on them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_stack.controller.compose import parse_ps
from tests.docker.test_day2_ops import KILL_MAIN  # one script kills a service's main process

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
ALGO = "grpo"
PROJECT = "hermes-test-replicas"
REPLICAS = ("inference", "inference-2")


def hs(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "HERMES_ROOT": str(ROOT), "HERMES_PROJECT_NAME": PROJECT}
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def compose(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    files = ["-f", str(ROOT / f"compose.{ALGO}.yml"), "-f", str(ROOT / "compose.cpu.yml"),
             "-f", str(ROOT / ".hermes" / f"replicas-{ALGO}.yml")]
    return subprocess.run(["docker", "compose", "--project-name", PROJECT, "--project-directory", str(ROOT), *files,
                           *args], capture_output=True, text=True, check=False, timeout=timeout)


def steps() -> int:
    done = compose("exec", "-T", "trainer", "cat", "/data/metrics.jsonl", timeout=60)
    count = 0
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        try:
            count = max(count, int(json.loads(line).get("step", 0)))
        except (ValueError, AttributeError, TypeError):
            continue
    return count


def counters(service: str) -> dict | None:
    """The replica's own counters (its /get_server_info), asked inside its container; None while it is down."""
    done = compose("exec", "-T", service, "python", "-m", "hermes_stack.health", "weights", timeout=60)
    try:
        return json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        return None


def wait_until(predicate, bound_s: float, what: str, poll_s: float = 2.0):
    deadline = time.monotonic() + bound_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            logs = compose("logs", "--tail", "30", "trainer", "router").stdout
            raise AssertionError(f"{what}: not within {bound_s:.0f} s. Log tails:\n{logs}")
        time.sleep(poll_s)


@pytest.fixture(scope="module")
def stack():
    hs("down", "--algo", ALGO, "--volumes")
    try:
        up = hs("up", "--algo", ALGO, "--device", "cpu", "--replicas", "2", "--wait-timeout", "600")
        assert up.returncode == 0, f"up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        yield up
    finally:
        down = hs("down", "--algo", ALGO, "--volumes")
        assert down.returncode == 0, down.stderr
        leftover = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                                  capture_output=True, text=True, check=True).stdout.split()
        assert leftover == []


def test_two_replicas_and_the_router_are_up_and_training_advances(stack):
    rows = {r["Service"]: r for r in parse_ps(compose("ps", "--format", "json").stdout)}
    for service in (*REPLICAS, "router", "trainer", "environment"):
        assert rows.get(service, {}).get("Health") == "healthy", (service, rows.get(service))
    wait_until(lambda: steps() >= 2, 300, "two training steps through the router")


def test_the_requests_of_a_step_were_served_by_both_replicas(stack):
    def shared_step():
        c = [counters(s) for s in REPLICAS]
        if None in c:
            return None
        # step-<N>: the trainer's synced weights (the dry-run's probe weights have other names)
        both = [v for v in c[0]["served_by_version"] if v.startswith("step-")
                and c[0]["served_by_version"][v] > 0 and c[1]["served_by_version"].get(v, 0) > 0]
        return both or None

    versions = wait_until(shared_step, 240, "a step whose rollouts both replicas served")
    assert versions, versions


def test_after_a_sync_both_replicas_report_the_same_weights_version(stack):
    def same_version():
        c = [counters(s) for s in REPLICAS]
        if None in c or c[0]["weights_version"] != c[1]["weights_version"]:
            return None
        return c[0]["weights_version"]

    version = wait_until(same_version, 120, "both replicas on one weights version", poll_s=0.5)
    assert version.startswith("step-") and int(version.removeprefix("step-")) >= 1, version
    status = hs("status", "--algo", ALGO, timeout=300)
    assert status.returncode == 0, status.stderr
    assert "replica inference-2" in status.stdout and "weights step-" in status.stdout, status.stdout


def test_a_killed_replica_does_not_stop_training_and_returns_on_the_current_weights(stack):
    before = steps()
    killed = compose("exec", "-T", "inference-2", "python", "-c", KILL_MAIN)
    assert "hermes_stack.inference" in killed.stdout, killed.stdout + killed.stderr
    wait_until(lambda: steps() >= before + 2, 300, "two more steps after the kill")

    def back_on_current_weights():
        back, other = counters("inference-2"), counters("inference")
        if back is None or other is None or back["weights_version"] != other["weights_version"]:
            return None
        # Its counters started again at the restart: a count under the current version means it serves again.
        return back if back["served_by_version"].get(back["weights_version"], 0) > 0 else None

    back = wait_until(back_on_current_weights, 300, "the restarted replica serving the current weights")
    assert back["weights_version"] != "base", back
    restarts = compose("ps", "--format", "json").stdout
    assert any(r["Service"] == "inference-2" and r.get("Health") == "healthy" for r in parse_ps(restarts))

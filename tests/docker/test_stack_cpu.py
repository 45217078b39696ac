"""The real CPU stack (embedded profile) for PPO and GRPO, driven through the controller's own CLI:
all healthchecks pass, the dry-run stage passes, training steps change the model, and `down -v` leaves nothing.
A broken inference healthcheck must fail `up` naming the service, within the timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_stack.compose import parse_ps

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
WAIT = "600"
# A project of its own, so the tests never touch a user's running hermes-<algo> stack.
PROJECT = "hermes-test-{algo}"

# Runs inside the trainer container: largest parameter change between the baked-in model and the newest weights.
WEIGHT_DELTA = r"""
import glob, os
from safetensors.torch import load_file
base = {}
for f in glob.glob(os.environ["HERMES_EMBEDDED_MODEL"] + "/*.safetensors"):
    base.update(load_file(f))
steps = sorted(glob.glob("/data/weights/step-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
new = {}
for f in glob.glob(steps[-1] + "/*.safetensors"):
    new.update(load_file(f))
common = [k for k in new if k in base and new[k].shape == base[k].shape]
print(len(steps), len(common), max(float((new[k].float() - base[k].float()).abs().max()) for k in common))
"""


def hs(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    algo = args[args.index("--algo") + 1]
    env = {**os.environ, "HERMES_ROOT": str(ROOT), "HERMES_PROJECT_NAME": PROJECT.format(algo=algo)}
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def compose(algo: str, *args: str) -> subprocess.CompletedProcess:
    files = ["-f", str(ROOT / f"compose.{algo}.yml"), "-f", str(ROOT / "compose.cpu.yml")]
    return subprocess.run(["docker", "compose", "--project-name", PROJECT.format(algo=algo),
                           "--project-directory", str(ROOT), *files, *args],
                          capture_output=True, text=True, check=False, timeout=300)


def containers(project: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def metrics(algo: str) -> list[dict]:
    done = compose(algo, "exec", "-T", "trainer", "cat", "/data/metrics.jsonl")
    records = []
    for line in done.stdout.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    return records


def assert_running_stack_is_locked_down(algo: str, *more_output: str) -> None:
    """Issue 3's invariants, on the real running containers: published ports on loopback only, no container as
    root, and the internal key in no output (raw `docker compose logs` included, which bypasses our redactor)."""
    rows = parse_ps(compose(algo, "ps", "--format", "json").stdout)
    published = [p for row in rows for p in row.get("Publishers") or [] if p.get("PublishedPort")]
    assert published, rows
    assert {p["URL"] for p in published} == {"127.0.0.1"}, published
    for row in rows:
        uid = compose(algo, "exec", "-T", row["Service"], "id", "-u")
        assert uid.returncode == 0 and uid.stdout.strip() != "0", (row["Service"], uid.stdout, uid.stderr)
    key = (ROOT / ".hermes" / "inference.key").read_text().strip()
    outputs = [compose(algo, "logs").stdout, hs("logs", "--algo", algo).stdout,
               hs("render", "--algo", algo, "--device", "cpu").stdout, *more_output]
    assert len(key) > 16 and not any(key in out for out in outputs), "the internal key leaked into an output"
    assert any("HERMES_INFERENCE_KEY" in out for out in outputs), "render no longer shows the (redacted) key line"


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_cpu_stack_is_healthy_passes_dry_run_trains_and_tears_down(algo):
    project = PROJECT.format(algo=algo)
    hs("down", "--algo", algo, "--volumes")
    try:
        up = hs("up", "--algo", algo, "--device", "cpu", "--wait-timeout", WAIT)
        assert up.returncode == 0, f"up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        assert "dry-run passed" in up.stdout
        assert "logs --follow trainer" in up.stdout and "compose.cpu.yml" in up.stdout

        health = {row["Service"]: row["Health"] for row in parse_ps(compose(algo, "ps", "--format", "json").stdout)}
        assert health == {s: "healthy" for s in ("atropos", "inference", "trainer", "environment")}, health

        deadline = time.monotonic() + 600  # bounded: a few optimisation steps on 2 CPU cores
        while time.monotonic() < deadline and len(metrics(algo)) < 2:
            time.sleep(5)
        records = metrics(algo)
        assert len(records) >= 2, compose(algo, "logs", "--tail", "40", "trainer").stdout
        delta = compose(algo, "exec", "-T", "trainer", "python", "-c", WEIGHT_DELTA)
        assert delta.returncode == 0, delta.stderr
        n_steps, n_tensors, max_change = delta.stdout.split()
        assert int(n_steps) >= 1 and int(n_tensors) > 0
        assert float(max_change) > 0.0, "training steps did not change the model"

        status = hs("status", "--algo", algo)
        assert status.returncode == 0 and "training step:" in status.stdout, status.stdout + status.stderr

        assert_running_stack_is_locked_down(algo, status.stdout)
    finally:
        down = hs("down", "--algo", algo, "--volumes")
    assert down.returncode == 0, down.stderr
    assert containers(project) == []
    volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"name={project}_hermes-data"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert volumes == []


def test_broken_inference_healthcheck_fails_up_naming_the_service_within_the_timeout():
    hs("down", "--algo", "grpo", "--volumes")
    try:
        up = hs("up", "--algo", "grpo", "--device", "cpu", "--wait-timeout", "180",
                "-f", "tests/docker/fixtures/broken-inference.yml", timeout=600)
        assert up.returncode == 1, up.stdout[-2000:]
        assert "service inference is unhealthy" in up.stderr, up.stderr
        assert "127.0.0.1:9" in up.stderr  # the healthcheck's own reason
        assert "dry-run passed" not in up.stdout
    finally:
        hs("down", "--algo", "grpo", "--volumes")
    assert containers(PROJECT.format(algo="grpo")) == []

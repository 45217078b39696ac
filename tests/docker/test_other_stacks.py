"""Other stacks on the machine (issue 25), against the real daemon and no image build: `up` of a second algorithm
beside a stack that holds its host port, and `up`/`down --volumes` of a run another checkout owns, each exit 2 with
one line naming the owner, and create (or delete) nothing. Seconds: the refusals come before any build."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "hermes-stack/base:py311"  # any local image: the holder only publishes a port


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=False)
    assert not check or done.returncode == 0, done.stderr
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def containers(project: str) -> set[str]:
    return set(docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={project}").stdout.split())


def hermes(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("HERMES_PROJECT_NAME", "HERMES_KEYFILE")}
    environ.update(PYTHONPATH=str(ROOT), HERMES_ROOT=str(root), **env)
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=root, env=environ, capture_output=True,
                          text=True, timeout=120, check=False)


def errors(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("error: ")]


@pytest.fixture
def checkout(tmp_path):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    return tmp_path


def test_a_second_algorithm_beside_a_stack_on_its_port_exits_2_and_creates_nothing(checkout):
    if shutil.which("docker") is None or docker("image", "inspect", IMAGE, check=False).returncode:
        pytest.skip(f"no {IMAGE}")
    port = free_port()
    toml = checkout / "configs" / "config_ppo.toml"
    toml.write_text(toml.read_text().replace("api_port = 8000", f"api_port = {port}"))
    settings = checkout / "configs" / "settings_ppo.json"
    settings.write_text(settings.read_text().replace("http://localhost:8000", f"http://localhost:{port}"))
    holder = f"h25-holder-{uuid.uuid4().hex[:8]}"
    project = f"h25-{uuid.uuid4().hex[:6]}"
    docker("run", "-d", "--name", holder, "--label", "com.docker.compose.project=hermes-grpo", "--label",
           "com.docker.compose.project.working_dir=/home/u/hermes", "-p", f"127.0.0.1:{port}:{port}", IMAGE,
           "sleep", "120")
    try:
        done = hermes(checkout, "up", "--algo", "ppo", "--device", "cpu", HERMES_PROJECT_NAME=project)
        assert done.returncode == 2, done.stderr[-2000:]
        assert errors(done) == [
            (f"error: host port {port}: [atropos] api_port: found the running stack hermes-grpo (started in "
            f"/home/u/hermes) holding it, expected a free port for {project}. Hint: stop it with `make down "
            "ALGO=grpo` in /home/u/hermes (or `docker compose -p hermes-grpo down` anywhere)")]
        assert "Traceback" not in done.stderr
        assert containers(project) == set()  # nothing created
    finally:
        docker("rm", "-f", holder, check=False)


def test_another_checkouts_run_is_neither_adopted_nor_deleted(checkout, tmp_path_factory):
    first = tmp_path_factory.mktemp("first-checkout")  # the owner: a checkout that exists on this machine
    project = f"h25-{uuid.uuid4().hex[:6]}"
    volume, owner = f"{project}_hermes-data", f"{project}_checkout"
    # The first checkout's run, as its `up` leaves it: compose's data volume and the owner marker beside it.
    docker("volume", "create", "--label", f"com.docker.compose.project={project}", "--label",
           "com.docker.compose.volume=hermes-data", volume)
    docker("volume", "create", "--label", f"io.hermes-stack.checkout={first}", owner)
    try:
        up = hermes(checkout, "up", "--algo", "grpo", "--device", "cpu", HERMES_PROJECT_NAME=project)
        assert up.returncode == 2, up.stderr[-2000:]
        assert errors(up) == [
            (f"error: {project} (data volume {volume}): checkout: found the run of {first}, expected a run of "
            f"this checkout ({checkout.resolve()}). Hint: `HERMES_PROJECT_NAME={project}-{checkout.name.lower()} "
            "make up ALGO=grpo` runs this checkout's own stack beside it (its own volume; while that one runs, other "
            f"host ports too: [atropos] api_port, inference.port); `HERMES_PROJECT_NAME={project} make down "
            f"ALGO=grpo` in {first} stops that one")]
        down = hermes(checkout, "down", "--algo", "grpo", "--volumes", HERMES_PROJECT_NAME=project)
        assert down.returncode == 2 and len(errors(down)) == 1 and str(first) in errors(down)[0]
        assert docker("volume", "inspect", volume, check=False).returncode == 0  # the other run's data is intact
        assert docker("volume", "inspect", owner, check=False).returncode == 0
        assert containers(project) == set()
    finally:
        docker("volume", "rm", "-f", volume, owner, check=False)

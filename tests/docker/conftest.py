"""Docker tier: real engine, real compose v2. Missing Docker skips locally and FAILS under CI=true."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def docker_problem() -> str | None:
    """None when `docker info` answers and `docker compose` is v2; else what is missing."""
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False, capture_output=True, text=True,
                              timeout=20)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        return f"docker CLI unusable: {exc}"
    if info.returncode != 0:
        return f"Docker engine not reachable: {info.stderr.strip()[:200]}"
    compose = subprocess.run(["docker", "compose", "version", "--short"], check=False, capture_output=True, text=True, timeout=20)
    if compose.returncode != 0 or not compose.stdout.strip().lstrip("v").startswith("2"):
        return f"Compose v2 plugin missing (`docker compose version`: {compose.stdout.strip() or compose.stderr.strip()})"
    return None


@pytest.fixture(autouse=True)
def _require_docker(request):
    if request.node.get_closest_marker("docker") is None:
        return
    problem = _cached_problem()
    if problem is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and Docker is not usable: {problem}. Run scripts/provision-docker.sh", pytrace=False)
    pytest.skip(f"Docker not usable: {problem}")


_PROBLEM: list[str | None] = []


def _cached_problem() -> str | None:
    if not _PROBLEM:
        _PROBLEM.append(docker_problem())
    return _PROBLEM[0]


@pytest.fixture(scope="session")
def base_image() -> str:
    """The project's base image, made by the same script the controller uses (load from cache, pull, or mmdebstrap)."""
    if _cached_problem() is not None:
        pytest.skip("no Docker")  # the autouse fixture above already failed/skipped the test
    done = subprocess.run(["bash", str(ROOT / "scripts" / "base-image.sh")], check=False, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"scripts/base-image.sh failed:\n{done.stderr[-2000:]}"
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session", autouse=True)
def _prune_our_untagged_images():
    """After the tier: the images our rebuilds untagged. Compose labels each image it builds with its project, so the
    same tag built by two test projects is two images and the first is left dangling: remove every dangling image of
    a hermes-* compose project (the product's own builds also carry hermes-stack.image, which `up` prunes)."""
    yield
    if not _PROBLEM or _PROBLEM[0] is not None:
        return
    dangling = subprocess.run(["docker", "image", "ls", "--filter", "dangling=true", "--quiet", "--no-trunc"],
                              check=False, capture_output=True, text=True, timeout=60).stdout.split()
    labels = subprocess.run(["docker", "image", "inspect", "--format",
                             '{{.Id}} {{index .Config.Labels "com.docker.compose.project"}}', *dangling],
                            check=False, capture_output=True, text=True, timeout=60).stdout if dangling else ""
    ours = [line.split()[0] for line in labels.splitlines()
            if len(line.split()) == 2 and line.split()[1].startswith("hermes-")]
    if ours:  # an image still used by a container is refused by Docker and stays: that is fine
        subprocess.run(["docker", "image", "rm", *sorted(set(ours))], check=False, capture_output=True, timeout=300)

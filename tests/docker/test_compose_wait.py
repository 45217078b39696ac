"""Proves the Docker path from day one: a tiny image on the project's base image, two services with readiness
healthchecks, `docker compose up --wait` through the controller's choke point, then a clean tear-down."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hermes_stack.controller.compose import CommandFailed, Compose, ComposeParams
from hermes_stack.controller.status import explain_up_failure, service_states

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "docker" / "fixtures" / "two-service"


def _project_containers(name: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={name}"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def _compose(name: str, *files: str, base_image: str) -> Compose:
    params = ComposeParams(files=files, project_directory=FIXTURE, project_name=name,
                           env=(("HERMES_BASE_IMAGE", base_image),))
    return Compose(params)


def test_up_wait_brings_two_services_to_healthy_then_down_removes_them(base_image):
    name = f"hermes-fixture-{os.getpid()}"
    compose = _compose(name, "compose.yml", base_image=base_image)
    try:
        compose.build()
        compose.up(wait_timeout=120)
        states = {s.service: s for s in service_states(compose.ps())}
        assert set(states) == {"api", "client"}
        assert all(s.health == "healthy" for s in states.values()), states
        # The published port is bound to loopback only.
        assert all(p.get("URL") == "127.0.0.1" for p in states["api"].publishers), states["api"].publishers
    finally:
        compose.down(volumes=True)
    assert _project_containers(name) == []


def test_broken_healthcheck_fails_up_naming_the_service(base_image):
    name = f"hermes-fixture-broken-{os.getpid()}"
    compose = _compose(name, "compose.yml", "broken.yml", base_image=base_image)
    try:
        compose.build()
        with pytest.raises(CommandFailed) as failed:
            compose.up(wait_timeout=60)
        error = explain_up_failure(compose, failed.value)
        assert "api" in error.lines()[0]
        assert "unhealthy" in error.lines()[0]
        assert "127.0.0.1:9" in "\n".join(error.lines())  # the healthcheck's own reason is shown
    finally:
        compose.down(volumes=True)
    assert _project_containers(name) == []

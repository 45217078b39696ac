"""The trainer image's `gpu` target has no SGLang image to build FROM here (no registry). Build it FROM a stand-in
that brings what SGLang's image brings minus sglang and CUDA, so the target's own steps are checked: the wheel
installs (Tinker SDK, the trainer group) on that Python, the non-root user, our code, the entrypoint.
Sorted after test_stack_cpu.py on purpose: the stand-in then reuses the trainer's cached torch layer."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hermes_stack.controller.compose import Compose, ComposeParams

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
IMAGES = ("hermes-stack/trainer:gpu-standin-check", "hermes-stack/sglang-standin:check")
# Imports the gpu services need beyond what SGLang's image brings (its torch/transformers come from the stand-in).
IMPORTS = ("import tinker, peft, httpx, pydantic, hermes_stack.trainer.engine_tinker, hermes_stack.inference.sglang, "
           "hermes_stack.trainer.__main__; print('imports ok')")


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False, timeout=300)


def test_gpu_target_builds_on_a_sglang_stand_in_runs_as_non_root_and_starts(base_image):
    subprocess.run(["bash", str(ROOT / "scripts" / "wheelhouse.sh")], check=True, capture_output=True, timeout=900)
    compose = Compose(ComposeParams(files=("tests/docker/fixtures/gpu-target.yml",), project_directory=ROOT,
                                    env=(("HERMES_BASE_IMAGE", base_image),)))
    try:
        compose.build(["sglang-standin"], capture=True)  # first: the target builds FROM it
        compose.build(["trainer-gpu"], capture=True)
        image = IMAGES[0]
        config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", image).stdout)
        assert config["User"] == "10001:10001"
        assert config["Cmd"] == ["python", "-m", "hermes_stack.trainer"]
        who = docker("run", "--rm", image, "id", "-u")
        assert who.returncode == 0 and who.stdout.strip() == "10001", who.stderr
        imports = docker("run", "--rm", image, "python", "-c", IMPORTS)
        assert imports.returncode == 0 and "imports ok" in imports.stdout, imports.stderr[-2000:]
        # The entrypoint itself (argument parsing; a real start needs the stack) and the healthcheck module.
        for argv, expect in ((["python", "-m", "hermes_stack.trainer", "--help"], "--dry-run"),
                             (["python", "-m", "hermes_stack.health", "--help"], "--wait")):
            done = docker("run", "--rm", image, *argv)
            assert done.returncode == 0 and expect in done.stdout, (argv, done.stdout[-500:], done.stderr[-500:])
        # Our code was compiled at build time: the runtime user cannot write __pycache__ under /app.
        pyc = docker("run", "--rm", image, "sh", "-c", "ls /app/hermes_stack/__pycache__ && test ! -w /app/hermes_stack")
        assert pyc.returncode == 0, pyc.stderr
    finally:
        for image in IMAGES:
            docker("image", "rm", "-f", image)
    assert all(docker("image", "inspect", image).returncode != 0 for image in IMAGES)

"""Preflight with a fake probe: each missing piece is named with its fix; auto picks GPU only when usable."""

from __future__ import annotations

import pytest

from hermes_stack.controller import device as devices
from hermes_stack.controller.device import resolve_device
from hermes_stack.controller.preflight import PreflightError, parse_version, preflight


class FakeProbe:
    def __init__(self, tools=("docker",), answers=None):
        self.tools = set(tools)
        self.answers = answers or {}
        self.calls = []

    def which(self, name):
        return f"/usr/bin/{name}" if name in self.tools else None

    def run(self, argv):
        self.calls.append(list(argv))
        for prefix, answer in self.answers.items():
            if list(argv[: len(prefix)]) == list(prefix):
                return answer
        return 1, "", "unknown command"


ENGINE = {("docker", "version"): (0, "20.10.24+dfsg1", ""), ("docker", "compose"): (0, "2.40.3", "")}


def test_healthy_cpu_host_passes_and_reports_versions():
    findings = preflight("cpu", FakeProbe(answers=ENGINE))
    assert [f.detail for f in findings] == ["20.10.24+dfsg1", "2.40.3"]


def test_missing_docker_cli_says_how_to_install():
    with pytest.raises(PreflightError) as err:
        preflight("cpu", FakeProbe(tools=()))
    assert err.value.lines() == [("preflight: docker CLI: not found on PATH. Hint: run `make docker` (installs "
                                 "docker.io and starts dockerd), or install Docker Engine")]


def test_daemon_down_is_named_with_its_error():
    probe = FakeProbe(answers={("docker", "version"): (1, "", "Cannot connect to the Docker daemon at unix:///x")})
    with pytest.raises(PreflightError) as err:
        preflight("cpu", probe)
    assert "Docker engine: not reachable (Cannot connect to the Docker daemon" in err.value.lines()[0]


@pytest.mark.parametrize("answer,detail", [
    ((1, "", "docker: 'compose' is not a docker command."), "`docker compose` is missing"),
    ((0, "1.29.2", ""), "`docker compose` is '1.29.2'"),
    ((0, "2.12.0", ""), "version 2.12.0 is older than 2.20"),
])
def test_compose_v1_old_or_missing_is_refused(answer, detail):
    probe = FakeProbe(answers={**ENGINE, ("docker", "compose"): answer})
    with pytest.raises(PreflightError) as err:
        preflight("cpu", probe)
    assert detail in err.value.lines()[0] and "Compose v2" in err.value.lines()[0]


def test_gpu_without_toolkit_names_the_toolkit_not_the_driver():
    probe = FakeProbe(tools=("docker", "nvidia-smi"), answers={
        **ENGINE, ("nvidia-smi",): (0, "NVIDIA H100, 81559 MiB, 580.65.06", ""), ("docker", "info"): (0, '{"runc":{}}', "")})
    with pytest.raises(PreflightError) as err:
        preflight("gpu", probe)
    assert len(err.value.lines()) == 1
    assert err.value.lines()[0].startswith("preflight: NVIDIA Container Toolkit: not installed")
    assert "nvidia-ctk runtime configure" in err.value.lines()[0]


def test_gpu_without_driver_and_toolkit_lists_both():
    with pytest.raises(PreflightError) as err:
        preflight("gpu", FakeProbe(answers=ENGINE))
    assert [line.split(":")[1].strip() for line in err.value.lines()] == ["NVIDIA driver", "NVIDIA Container Toolkit"]
    # make's variable, as typed after `make up ALGO=grpo DEVICE=gpu` (the CLI's flag was all it said)
    assert all(line.endswith("or run on the CPU: DEVICE=cpu (--device cpu)") for line in err.value.lines())


def test_auto_picks_gpu_only_when_driver_and_runtime_are_usable():
    cpu_host = FakeProbe(answers=ENGINE)
    gpu_host = FakeProbe(tools=("docker", "nvidia-smi"), answers={
        **ENGINE, ("nvidia-smi",): (0, "NVIDIA H100, 81559 MiB, 580.65.06", ""),
        ("docker", "info"): (0, '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{}}', "")})
    assert resolve_device("auto", cpu_host) == "cpu"
    assert resolve_device("auto", gpu_host) == "gpu"
    assert resolve_device("cpu", gpu_host) == "cpu"


@pytest.mark.parametrize("text,version", [("v2.40.3", (2, 40, 3)), ("20.10.24+dfsg1", (20, 10, 24)),
                                          ("2.24.0-desktop.1", (2, 24, 0)), ("", ())])
def test_parse_version(text, version):
    assert parse_version(text) == version


def test_no_nvidia_smi_means_unknown(monkeypatch):
    monkeypatch.setattr(devices.shutil, "which", lambda name: None)
    assert devices.detect_gpu_memory_gib() is None


def test_nvidia_smi_output_is_read_in_mib(monkeypatch, tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 24576\necho 24576\n")
    fake.chmod(0o755)
    monkeypatch.setattr(devices.shutil, "which", lambda name: str(fake))
    assert devices.detect_gpu_memory_gib() == 24.0



GPU_HOST = {**ENGINE, ("nvidia-smi",): (0, "NVIDIA H100, 81559 MiB, 580.65.06", ""),
            ("docker", "info"): (0, '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{}}', "")}


def test_gpu_preflight_says_when_the_sglang_base_image_is_missing_and_how_to_get_it(monkeypatch):
    """Issue 24: the gpu build starts FROM the SGLang image; missing, it is pulled (many GB) or, without a registry,
    the build fails in Docker's words. Preflight names it and the ways to get it; present, it says so."""
    monkeypatch.delenv("HERMES_SGLANG_IMAGE", raising=False)
    missing = FakeProbe(tools=("docker", "nvidia-smi"), answers=GPU_HOST)
    (finding,) = [f for f in preflight("gpu", missing) if f.what == "SGLang base image"]
    assert finding.line() == (
        "SGLang base image: lmsysorg/sglang:v0.5.18 is not in the Docker engine: the gpu build pulls it first (many "
        "GB; minutes). To get it ahead: `docker pull lmsysorg/sglang:v0.5.18`, or `docker load -i <file>` on a "
        "machine without a registry, or set HERMES_SGLANG_IMAGE to an SGLang image you have")
    assert ["docker", "image", "inspect", "--format", "{{.Id}}", "lmsysorg/sglang:v0.5.18"] in missing.calls
    monkeypatch.setenv("HERMES_SGLANG_IMAGE", "mine/sglang:x")
    present = FakeProbe(tools=("docker", "nvidia-smi"),
                        answers={**GPU_HOST, ("docker", "image", "inspect"): (0, "sha256:1", "")})
    (finding,) = [f for f in preflight("gpu", present) if f.what == "SGLang base image"]
    assert finding.line() == "SGLang base image: mine/sglang:x present"
    assert not any(f.what == "SGLang base image" for f in preflight("cpu", FakeProbe(answers=ENGINE)))

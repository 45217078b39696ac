"""Read-only checks before anything changes state: Docker engine, Compose v2, and on GPU the NVIDIA toolkit.

Every check says exactly what is missing and how to get it. Probing goes through a small injectable `Probe`, so the
rules are tested with fakes.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hermes_stack.errors import StackError

MIN_COMPOSE = (2, 20)  # `up --wait-timeout`, env_file `required:`, `!reset`, depends_on `restart:`


class Probe(Protocol):
    def which(self, name: str) -> str | None: ...
    def run(self, argv: Sequence[str]) -> tuple[int, str, str]: ...


class SystemProbe:
    """Argv only, short timeouts: a hung daemon must not hang the preflight. Docker is asked through the compose
    choke point (its timeouts and errors); nvidia-smi is a host tool, asked here."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
        if argv[0] == "docker":
            from hermes_stack.controller.compose import probe

            return probe(argv)
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, "", str(exc)
        return done.returncode, done.stdout.strip(), done.stderr.strip()


@dataclass(frozen=True)
class Finding:
    what: str
    ok: bool
    detail: str
    hint: str = ""

    def line(self) -> str:
        text = f"{self.what}: {self.detail}"
        return f"{text}. Hint: {self.hint}" if self.hint and not self.ok else text


class PreflightError(StackError):
    def __init__(self, findings: list[Finding]):
        self.findings = findings
        super().__init__("; ".join(f.line() for f in findings))

    def lines(self) -> list[str]:
        return [f"preflight: {f.line()}" for f in self.findings]


def parse_version(text: str) -> tuple[int, ...]:
    digits = text.strip().lstrip("v").split("-")[0].split("+")[0]
    parts = []
    for piece in digits.split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def check_docker(probe: Probe) -> list[Finding]:
    if probe.which("docker") is None:
        return [Finding("docker CLI", False, "not found on PATH",
                        "run `make docker` (installs docker.io and starts dockerd), or install Docker Engine")]
    rc, out, err = probe.run(["docker", "version", "--format", "{{.Server.Version}}"])
    if rc != 0 or not out:
        reason = (err.splitlines() or ["no answer"])[-1]
        return [Finding("Docker engine", False, f"not reachable ({reason})",
                        "start it: `make docker` (no systemd here) or `systemctl start docker`")]
    found = [Finding("Docker engine", True, out)]
    rc, out, err = probe.run(["docker", "compose", "version", "--short"])
    version = parse_version(out) if rc == 0 else ()
    if not version or version[0] != 2:
        found.append(Finding("Compose v2", False,
                             "`docker compose` is missing" if rc else f"`docker compose` is {out!r}",
                             "run `make docker` (installs the Compose v2 plugin); Debian's docker-compose v1 "
                             "silently ignores --wait"))
    elif version < MIN_COMPOSE:
        found.append(Finding("Compose v2", False, f"version {out} is older than "
                             f"{'.'.join(map(str, MIN_COMPOSE))}", "run `make docker` to install the pinned plugin"))
    else:
        found.append(Finding("Compose v2", True, out))
    return found


# The SGLang image's CUDA needs at least this driver (upstream-facts: since v0.5.11 the default tags are CUDA 13
# builds, R580+; the `-cu129`-style tags are CUDA 12.9 builds, which run on R525+ through CUDA's minor-version
# compatibility). Keep in step with compose.base.yml's default HERMES_SGLANG_IMAGE.
SGLANG_IMAGE_DEFAULT = "lmsysorg/sglang:v0.5.18"
DRIVER_FOR_CUDA13 = 580
DRIVER_FOR_CUDA12 = 525


def min_driver_for(image: str) -> int:
    tag = image.rsplit(":", 1)[-1]
    return DRIVER_FOR_CUDA12 if "-cu12" in tag else DRIVER_FOR_CUDA13


def check_driver_version(version: str, image: str) -> Finding:
    """One clear line when the host driver is too old for the SGLang image's CUDA (else SGLang fails at its first
    kernel with `CUDA driver version is insufficient`)."""
    need = min_driver_for(image)
    found = parse_version(version)
    if not found:
        return Finding("NVIDIA driver version", False, f"unreadable ({version!r} from nvidia-smi)",
                       "check `nvidia-smi --query-gpu=driver_version --format=csv`")
    if found[0] >= need:
        return Finding("NVIDIA driver version", True, f"{version} (>= {need} for {image})")
    cu129 = image.rsplit(":", 1)[0] + ":" + image.rsplit(":", 1)[-1] + "-cu129"
    return Finding("NVIDIA driver version", False, f"{version} is older than {need}, which {image} (CUDA "
                   f"{'12' if need == DRIVER_FOR_CUDA12 else '13'}) needs",
                   f"upgrade the driver to R{need} or newer, or set HERMES_SGLANG_IMAGE={cu129} (a CUDA 12.9 build, "
                   f"driver R{DRIVER_FOR_CUDA12}+)" if need == DRIVER_FOR_CUDA13 else
                   f"upgrade the driver to R{need} or newer")


def check_gpu(probe: Probe, image: str | None = None) -> list[Finding]:
    """What `deploy.resources.reservations.devices: nvidia` and the SGLang image need on the host."""
    import os

    image = image or os.environ.get("HERMES_SGLANG_IMAGE") or SGLANG_IMAGE_DEFAULT
    found = []
    rc, out, err = probe.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]) \
        if probe.which("nvidia-smi") else (127, "", "nvidia-smi not found")
    if rc != 0 or not out:
        found.append(Finding("NVIDIA driver", False, f"no GPU visible ({(err or 'nvidia-smi printed nothing')})",
                             "install the NVIDIA driver, or run on the CPU: DEVICE=cpu (--device cpu)"))
    else:
        first = out.splitlines()[0]
        fields = [f.strip() for f in first.split(",")]
        found.append(Finding("NVIDIA driver", True, ", ".join(fields[:2])))
        found.append(check_driver_version(fields[2] if len(fields) > 2 else "", image))
    rc, out, _ = probe.run(["docker", "info", "--format", "{{json .Runtimes}}"])
    runtime = rc == 0 and "nvidia" in out
    hook = any(probe.which(n) for n in ("nvidia-container-runtime-hook", "nvidia-container-toolkit",
                                        "nvidia-container-cli"))
    if not (runtime or hook):
        found.append(Finding("NVIDIA Container Toolkit", False,
                             "not installed (no nvidia runtime in `docker info`, no nvidia-container-runtime-hook)",
                             "install nvidia-container-toolkit and run `nvidia-ctk runtime configure --runtime=docker`,"
                             " then restart dockerd; or run on the CPU: DEVICE=cpu (--device cpu)"))
    else:
        found.append(Finding("NVIDIA Container Toolkit", True, "nvidia runtime" if runtime else "runtime hook found"))
    return found


def check_sglang_image(probe: Probe, image: str | None = None) -> Finding:
    """Whether the SGLang image the gpu build starts FROM is in the engine. Missing is not an error (the build pulls
    it when a registry answers), but it is many GB and minutes, and without a registry the build fails later with
    Docker's own words: said here, with how to get it."""
    import os

    image = image or os.environ.get("HERMES_SGLANG_IMAGE") or SGLANG_IMAGE_DEFAULT
    rc, _, _ = probe.run(["docker", "image", "inspect", "--format", "{{.Id}}", image])
    if rc == 0:
        return Finding("SGLang base image", True, f"{image} present")
    return Finding("SGLang base image", True,
                   f"{image} is not in the Docker engine: the gpu build pulls it first (many GB; minutes). To get "
                   f"it ahead: `docker pull {image}`, or `docker load -i <file>` on a machine without a registry, or "
                   "set HERMES_SGLANG_IMAGE to an SGLang image you have")


def preflight(device: str, probe: Probe | None = None) -> list[Finding]:
    """All findings, or PreflightError listing every missing piece at once."""
    probe = probe or SystemProbe()
    findings = check_docker(probe)
    if device == "gpu":
        findings += check_gpu(probe)
        findings.append(check_sglang_image(probe))
    bad = [f for f in findings if not f.ok]
    if bad:
        raise PreflightError(bad)
    return findings

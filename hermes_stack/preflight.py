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
    """Argv only, short timeouts: a hung daemon must not hang the preflight."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(self, argv: Sequence[str]) -> tuple[int, str, str]:
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


def check_gpu(probe: Probe) -> list[Finding]:
    """What `deploy.resources.reservations.devices: nvidia` needs on the host."""
    found = []
    rc, out, err = probe.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]) \
        if probe.which("nvidia-smi") else (127, "", "nvidia-smi not found")
    if rc != 0 or not out:
        found.append(Finding("NVIDIA driver", False, f"no GPU visible ({(err or 'nvidia-smi printed nothing')})",
                             "install the NVIDIA driver, or use --device cpu"))
    else:
        found.append(Finding("NVIDIA driver", True, out.splitlines()[0]))
    rc, out, _ = probe.run(["docker", "info", "--format", "{{json .Runtimes}}"])
    runtime = rc == 0 and "nvidia" in out
    hook = any(probe.which(n) for n in ("nvidia-container-runtime-hook", "nvidia-container-toolkit",
                                        "nvidia-container-cli"))
    if not (runtime or hook):
        found.append(Finding("NVIDIA Container Toolkit", False,
                             "not installed (no nvidia runtime in `docker info`, no nvidia-container-runtime-hook)",
                             "install nvidia-container-toolkit and run `nvidia-ctk runtime configure --runtime=docker`,"
                             " then restart dockerd; or use --device cpu"))
    else:
        found.append(Finding("NVIDIA Container Toolkit", True, "nvidia runtime" if runtime else "runtime hook found"))
    return found


def gpu_usable(probe: Probe) -> bool:
    return all(f.ok for f in check_gpu(probe))


def resolve_device(requested: str, probe: Probe) -> str:
    """`auto` picks gpu only when the driver and the container toolkit are both usable."""
    if requested in ("cpu", "gpu"):
        return requested
    return "gpu" if gpu_usable(probe) else "cpu"


def preflight(device: str, probe: Probe | None = None) -> list[Finding]:
    """All findings, or PreflightError listing every missing piece at once."""
    probe = probe or SystemProbe()
    findings = check_docker(probe)
    if device == "gpu":
        findings += check_gpu(probe)
    bad = [f for f in findings if not f.ok]
    if bad:
        raise PreflightError(bad)
    return findings

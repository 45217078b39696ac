"""The one owner of the device choice: `--device auto|cpu|gpu`, its check, and what `auto` resolves to (a GPU
visible AND usable by Docker), for `validate` (which profile) and `up`/`build`/`render` (which compose files) alike."""

from __future__ import annotations

import shutil
import subprocess

from hermes_stack.controller.preflight import Probe, SystemProbe, check_gpu
from hermes_stack.errors import Problem

DEVICES = ("auto", "cpu", "gpu")


def device_problem(device: str) -> Problem | None:
    """The command-line problem of an unknown `--device`, or None."""
    if device in DEVICES:
        return None
    return Problem("command line", "--device", repr(device), "auto, cpu or gpu",
                   "auto picks gpu only when the NVIDIA container runtime is usable")


def auto_device(probe: Probe) -> tuple[str, list[str]]:
    """`auto`: gpu only when a GPU is visible AND Docker can hand it to containers. A GPU that Docker cannot use
    is said out loud (the CPU stack would otherwise start silently on a GPU VM). The driver's version does not
    decide the device: `up` refuses an old one in preflight, with its fix."""
    findings = {f.what: f for f in check_gpu(probe)}
    driver, toolkit = findings["NVIDIA driver"], findings["NVIDIA Container Toolkit"]
    if not driver.ok:
        return "cpu", []
    if not toolkit.ok:
        line = (f"a GPU is present ({driver.detail}) but Docker cannot use it: NVIDIA Container Toolkit "
                f"{toolkit.detail}; using the CPU stack (embedded profile). Hint: {toolkit.hint.split('; or')[0]}"
                ", or pass --device gpu to check the GPU configuration")
        return "cpu", [line]
    return "gpu", []


def resolve_device(requested: str, probe: Probe, notify=None) -> str:
    """`auto` picks gpu only when the driver and the container toolkit are both usable (auto_device); `notify`
    receives the notice when a GPU is present but unusable."""
    if requested in ("cpu", "gpu"):
        return requested
    device, notes = auto_device(probe)
    for line in notes:
        (notify or _notice)(line)
    return device


def _notice(text: str) -> None:
    from hermes_stack.controller import console

    console.notice(text)


def choose_profile(device: str, gpu_memory_gib: float | None, probe=None) -> tuple[str, float | None, list[str]]:
    """--device (+ --gpu-memory) -> (profile, GPU memory in GiB or None, notices). Asks nvidia-smi only when needed.

    auto: gpu when --gpu-memory is given, else by `up`'s own rule (auto_device), so `validate` and `up` always
    agree; else embedded. cpu: embedded. gpu: gpu. `probe`: preflight's Probe (the real system by default; tests
    pass a fake).
    """
    if device == "cpu":
        return "embedded", None, []
    if device == "auto" and gpu_memory_gib is None:
        resolved, notes = auto_device(probe or SystemProbe())
        if resolved != "gpu":
            return "embedded", None, notes or ["no GPU found (no nvidia-smi): using the embedded CPU profile"]
        return "gpu", detect_gpu_memory_gib(), notes
    gib = gpu_memory_gib if gpu_memory_gib is not None else detect_gpu_memory_gib()
    return "gpu", gib, []


def detect_gpu_count(gpu_memory_gib: float | None = None) -> int | None:
    """How many GPUs nvidia-smi lists; without it, one when --gpu-memory was given (the memory of one GPU); None
    when unknown."""
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        try:
            done = subprocess.run([exe, "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0:
            count = sum(1 for ln in done.stdout.splitlines() if ln.strip())
            if count:
                return count
    return 1 if gpu_memory_gib is not None else None


def detect_gpu_memory_gib() -> float | None:
    """Total memory of the first GPU from nvidia-smi; None when there is no nvidia-smi or it fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        return None
    try:
        return float(lines[0]) / 1024  # MiB
    except ValueError:
        return None

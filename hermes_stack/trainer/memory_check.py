"""The dry-run's memory check: one forward and backward of the real model at the worst case the configuration allows,
measured next to the running inference server, before any optimisation step.

The worst case is `micro_batch_size` sequences (the whole minibatch, trainer.minibatches' share of a batch, when it
is unset) at the longest width a rollout
can reach: min([rollout] max_token_length, tinker.max_token_trainer_length, the model's context).

What is measured:
- CUDA: torch.cuda.max_memory_allocated over the probe (the weights included), plus the two AdamW moments that the
  first optimiser step allocates. The room is HERMES_TRAINER_MEMORY_CAP_GIB when set, else the GPU's free memory now
  plus what this process already holds. SGLang's share is already taken: the check runs after it started.
- CPU: the process's peak resident memory over the probe (VmHWM, reset through /proc/self/clear_refs), plus the
  moments. The room is the cap when set, else the machine's MemAvailable plus this process's resident memory (or
  the container's cgroup memory limit, when lower).

A probe that does not fit (out of memory, or over the room) is measured again: first at half the micro-batch, down to
1; then at half the width. The failure names the setting and a value that was measured to fit.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
MIN_WIDTH = 16  # the narrowest probe tried when even one sequence does not fit
CAP_ENV = "HERMES_TRAINER_MEMORY_CAP_GIB"  # named in messages; read by ServiceEnv.trainer_memory_cap_gib


class MemoryCheckFailed(Exception):
    """One line: what does not fit, what was measured to fit, and the setting to change."""


def size(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / 2**20:.1f} MiB"


# ---------------------------------------------------------------- the search (pure)


@dataclass(frozen=True)
class Probe:
    micro: int
    width: int
    peak_bytes: int | None  # None: out of memory

    def fits(self, room_bytes: int) -> bool:
        return self.peak_bytes is not None and self.peak_bytes <= room_bytes


def search(measure: Callable[[int, int], int | None], micro: int, width: int, room_bytes: int,
           min_width: int = MIN_WIDTH) -> list[Probe]:
    """Probes until one fits: (micro, width) first, then half the micro-batch down to 1, then half the width down to
    `min_width`. `measure(micro, width)` is the peak in bytes, None for out of memory. The last probe fits, or none
    does."""
    probes = [Probe(micro, width, measure(micro, width))]
    while not probes[-1].fits(room_bytes):
        last = probes[-1]
        if last.micro > 1:
            nxt = (last.micro // 2, last.width)
        elif last.width // 2 >= min_width:
            nxt = (1, last.width // 2)
        else:
            break
        probes.append(Probe(*nxt, measure(*nxt)))
    return probes


def refusal(probes: list[Probe], room_bytes: int, room_source: str, files: dict[str, str],
            model_bytes: int, what: str = "one forward and backward, measured") -> str:
    """The one line for a first probe that does not fit (`files`: the settings and config file names)."""
    first, last = probes[0], probes[-1]
    found = "runs out of memory" if first.peak_bytes is None else f"peaks at ~{size(first.peak_bytes)}"
    head = (f"micro_batch_size {first.micro} x {first.width} tokens ({what}) {found}; "
            f"the room is {size(room_bytes)} ({room_source})")
    if not last.fits(room_bytes):
        return (f"{head}; even 1 x {last.width} tokens does not fit, and the model with its training state holds "
                f"~{size(model_bytes)}. Hint: a smaller model, more memory, or a higher {CAP_ENV}")
    if last.width == first.width:
        return (f"{head}; measured: micro_batch_size {last.micro} fits (~{size(last.peak_bytes)}). Hint: set "
                f"trainer.micro_batch_size = {last.micro} in {files['settings']}")
    return (f"{head}; even micro_batch_size 1 does not fit; measured: 1 x {last.width} tokens fits "
            f"(~{size(last.peak_bytes)}). Hint: set trainer.micro_batch_size = 1 in {files['settings']} and "
            f"[rollout] max_token_length = {last.width} in {files['config']}")


# ---------------------------------------------------------------- measuring (I/O)


def _proc_kib(field: str) -> int | None:
    try:
        found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def available_cpu_bytes() -> int | None:
    try:
        found = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def measure_cpu(run: Callable[[], None]) -> int | None:
    """The process's peak resident bytes over `run` (None: MemoryError). No gc.collect() first: with transformers
    loaded it takes ~0.5 s, and the probe's tensors are freed by reference counting anyway."""
    exact = _reset_peak_rss()
    try:
        run()
    except MemoryError:
        return None
    peak = _proc_kib("VmHWM") if exact else None
    if peak is None:  # no /proc: the lifetime peak is the best there is
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return peak


def measure_cuda(run: Callable[[], None]) -> int | None:
    """torch.cuda.max_memory_allocated over `run` (None: out of memory)."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    try:
        run()
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None
    return int(torch.cuda.max_memory_allocated())


def room(device: str, cap_gib: float | None) -> tuple[int, str]:
    """(bytes this process may peak at, where that figure comes from)."""
    if cap_gib is not None:
        return int(cap_gib * GIB), f"{CAP_ENV}={cap_gib:g}"
    if device == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info()
        return int(free + torch.cuda.memory_reserved()), (f"the GPU's free memory {size(free)} of {size(total)}, next "
                                                          "to the inference server, plus this process's")
    available = available_cpu_bytes()
    rss = _proc_kib("VmRSS") or 0
    limit = container_limit_bytes()
    if limit is not None and (available is None or limit < available + rss):
        return limit, f"the container's memory limit {size(limit)}"
    if available is None:
        return 2**62, "no /proc/meminfo: unbounded"
    return available + rss, f"MemAvailable {size(available)} plus this process's {size(rss)}"


def container_limit_bytes() -> int | None:
    """The cgroup's memory limit (`docker run --memory`, compose's mem_limit), which /proc/meminfo does not show;
    None when there is none."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return None


# ---------------------------------------------------------------- the torch engine's probe


def probe_sequences(micro: int, width: int, vocab_size: int, seed: int = 0) -> list[Any]:
    """`micro` sequences of `width` tokens: a quarter prompt, the rest trained, inference log-probs given (as the
    stack sends them), scores alternating so the advantages are not all zero."""
    import torch

    from hermes_stack.trainer.engine import IGNORE, Sequence

    generator = torch.Generator().manual_seed(seed)
    prompt = max(1, width // 4)
    out = []
    for i in range(micro):
        tokens = torch.randint(min(3, vocab_size - 1), vocab_size, (width,), generator=generator).tolist()
        mask = [IGNORE] * prompt + tokens[prompt:]
        out.append(Sequence(tokens, mask, float(i % 2), [0.0] * prompt + [-1.0] * (width - prompt)))
    return out


def trainable_bytes(modules: list[Any]) -> int:
    return sum(p.numel() * p.element_size() for m in modules if m is not None for p in m.parameters()
               if p.requires_grad)


def held_bytes(modules: list[Any]) -> int:
    """Parameters and buffers, each storage counted once (a tied or shared tensor is one)."""
    seen: set[int] = set()
    total = 0
    for module in modules:
        if module is None:
            continue
        for tensor in [*module.parameters(), *module.buffers()]:
            key = tensor.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += tensor.untyped_storage().nbytes()
    return total


def rollout_width(stack: Any, context: int | None) -> int:
    """The longest sequence a rollout can reach: the environment keeps prompt + completion below max_token_length,
    the trainer cuts at max_token_trainer_length, and the model has its context."""
    widths = [stack.config.rollout.max_token_length, stack.settings.tinker.max_token_trainer_length]
    return min(w for w in [*widths, context] if w)


def plan_figure(stack: Any, device: str) -> str:
    """The memory plan's trainer figure (config/memory.py, the split `validate` prints) where there is one: on a GPU."""
    if device != "cuda":
        return "plan: none on CPU (the memory split is planned for one GPU)"
    import torch

    from hermes_stack.config import memory

    split = stack.gpu_split
    if split is None:
        total = torch.cuda.get_device_properties(0).total_memory / GIB
        split = memory.split_for(stack.config, stack.settings, total, stack.config_path.parent.parent)
    if split is None:
        return "plan: none (the model's shape is unknown)"
    return f"plan {size(split.trainer_bytes)} (micro_batch_size {split.micro_batch} x {split.tokens} tokens)"


def check_torch_engine(engine: Any, stack: Any, cap_gib: float | None) -> str:
    """The torch engine's check; its line, or MemoryCheckFailed."""
    started = time.monotonic()
    device = engine.device.type
    policy = engine.policy
    context = getattr(policy.config, "max_position_embeddings", None)
    width = rollout_width(stack, context)
    from hermes_stack.trainer.engine_torch import minibatch_rows

    minibatch = minibatch_rows(stack.config.rollout.sequences_per_step, getattr(engine, "minibatches", 1))
    micro = min(engine.micro_batch_size or minibatch, minibatch)
    vocab = int(policy.config.vocab_size)
    modules = [policy, getattr(engine, "reference", None), engine.critic]
    moments = 0 if engine.optimizer.state else 2 * trainable_bytes([policy, engine.critic])
    measure_peak = measure_cuda if device == "cuda" else measure_cpu

    def measure(m: int, w: int) -> int | None:
        peak = measure_peak(lambda: engine.probe_step(probe_sequences(m, w, vocab)))
        return None if peak is None else peak + moments

    limit, source = room(device, cap_gib)
    before = _proc_kib("VmRSS") if device == "cpu" else None
    probes = search(measure, micro, width, limit)
    files = {"settings": f"settings_{stack.algo}.json", "config": stack.config_path.name}
    if not probes[0].fits(limit):
        raise MemoryCheckFailed(refusal(probes, limit, source, files, held_bytes(modules) + moments))
    peak = probes[0].peak_bytes
    baseline = f"model and training state {size(held_bytes(modules))}"
    if before is not None:
        baseline = f"the process held {size(before)} before"
    return (f"memory: micro_batch_size {micro} x {width} tokens, one forward and backward measured on {device}: "
            f"peak {size(peak)} (AdamW moments {size(moments)} included; {baseline}) of {size(limit)} room "
            f"({source}); {plan_figure(stack, device)}; {time.monotonic() - started:.1f} s")


def check_local_model(critic: Any, stack: Any, device: str, cap_gib: float | None) -> str:
    """The Tinker engine's local model over one step's sequences, as TinkerEngine.advantages runs it: the reference
    forward and, with a value head, the head's values and one update, in micro-batches of trainer.micro_batch_size
    rows (LocalCritic's). The head's weights and Adam state are restored afterwards. Its line, or
    MemoryCheckFailed naming a trainer.micro_batch_size measured to fit."""
    started = time.monotonic()
    import copy

    from hermes_stack.trainer.engine_tinker import token_arrays

    model = getattr(critic, "base", None) or getattr(critic, "model", None)  # the frozen base model
    config = getattr(model, "config", None)
    width = rollout_width(stack, getattr(config, "max_position_embeddings", None))
    count = stack.config.rollout.sequences_per_step
    micro = min(getattr(critic, "micro_batch_size", None) or count, count)
    vocab = int(getattr(config, "vocab_size", 0) or 32)
    measure_peak = measure_cuda if device == "cuda" else measure_cpu
    head = getattr(critic, "head", None)
    optimizer = getattr(critic, "optimizer", None)

    def run(m: int, w: int) -> None:
        import torch

        arrays = [token_arrays(s) for s in probe_sequences(count, w, vocab)]
        configured = critic.micro_batch_size
        saved = (copy.deepcopy(head.state_dict()), copy.deepcopy(optimizer.state_dict())) if head is not None else None
        critic.micro_batch_size = m
        try:
            with torch.no_grad():
                _, hidden = critic.reference_and_hidden(arrays)
            if head is not None and hidden is not None:
                with torch.no_grad():
                    old = critic.values(hidden).float()
                mask = torch.ones(old.shape, device=hidden.device)
                critic.update(hidden, torch.zeros_like(old), mask, 0.2, old)
        finally:
            critic.micro_batch_size = configured
            if saved is not None:
                head.load_state_dict(saved[0])
                optimizer.load_state_dict(saved[1])

    limit, source = room(device, cap_gib)
    probes = search(lambda m, w: measure_peak(lambda: run(m, w)), micro, width, limit)
    if not probes[0].fits(limit):
        line = refusal(probes, limit, source, {"settings": f"settings_{stack.algo}.json",
                                               "config": stack.config_path.name}, held_bytes([model, head]),
                       what=f"the reference forward{' and the value head' if head is not None else ''} over "
                            f"{count} sequences, measured")
        raise MemoryCheckFailed(f"the Tinker engine's local model (reference and critic): {line}")
    return (f"memory: the Tinker engine's local model, {count} sequences x {width} tokens in micro-batches of "
            f"{micro} measured on {device}: peak {size(probes[0].peak_bytes)} of {size(limit)} room ({source}); "
            f"{time.monotonic() - started:.1f} s")

"""The model a built-in inference server samples from, and the one thread that samples it.

`ModelHost` owns the model, its LoRA adapters and its weight reloads. One worker thread samples: requests queue rows;
the worker takes everything queued (same adapter, up to `max_batch_rows`) and samples it as one batch, so concurrent
requests are batched, never interleaved. A weight reload loads the new model outside the lock, then swaps it under
the same lock the worker holds while sampling: a batch runs entirely on the old weights or entirely on the new ones.

The built-in backend (builtin.py) shapes requests and answers around a host: in its own process (`ModelHost`
itself) or in a child process (child_host.py), where the front's event loop no longer shares an interpreter lock
with the sampler.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from hermes_stack.inference.backend import Generated
from hermes_stack.inference.torch_sampler import Row, context_length, sample_rows
from hermes_stack.modelcore.embedded import one_thread_for_tiny_model

log = logging.getLogger("hermes.inference")

# How long the sampler waits for more requests once one arrives at an idle sampler. The environment sends one request
# per group, a few milliseconds apart; sampled one by one, a batch of 32 groups took 32 forward passes per token
# instead of one (py-spy, issue 22: the tiny model's per-pass overhead is most of its time). SGLang batches
# continuously; this is the built-in server's cheap equivalent.
GATHER_S = 0.004


# How often the sampler logs its batches (SGLang's scheduler logs "Decode batch. #running-req: ..." every few
# decode steps): the rows per batch say whether requests reach it together (issue 22: small batches bound the rate).
BATCH_LOG_S = 30.0


@dataclass
class BatchLog:
    """Rows per sampled batch since the last line, and the sampler's busy time: `add` returns a line every
    `every_s` seconds (None in between)."""

    every_s: float = BATCH_LOG_S
    batches: int = 0
    rows: int = 0
    largest: int = 0
    busy_s: float = 0.0
    since: float = 0.0

    def add(self, rows: int, busy_s: float, now: float) -> str | None:
        if not self.since:
            self.since = now - busy_s
        self.batches += 1
        self.rows += rows
        self.largest = max(self.largest, rows)
        self.busy_s += busy_s
        if now - self.since < self.every_s:
            return None
        span = now - self.since
        line = (f"sampled {self.batches} batches in {span:.0f} s: {self.rows / self.batches:.1f} rows a batch "
                f"(largest {self.largest}), {self.rows / max(self.busy_s, 1e-9):.0f} sequences/s while sampling, "
                f"busy {self.busy_s / span:.0%}")
        self.batches = self.rows = self.largest = 0
        self.busy_s, self.since = 0.0, now
        return line


@dataclass
class _Job:
    rows: list[Row]
    adapter: str | None
    future: Future
    # A streamed request's: called in the sampler thread with the job's rows that ended at a step, as (the row's
    # index in this job, its result); the future still gets every result at the end.
    emit: Callable[[list[tuple[int, Generated]]], None] | None = None


def _load_model(path: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = model.to(device).eval()
    model.hermes_saved_config = _saved_config(path)  # what _load_weights_into compares
    return model


def _saved_config(path: str) -> tuple[bytes, bytes | None]:
    """config.json and generation_config.json as saved (the stop tokens are read off the generation config)."""
    directory = Path(path)
    generation = directory / "generation_config.json"
    return (directory / "config.json").read_bytes(), generation.read_bytes() if generation.exists() else None


def _load_weights_into(model, path: str) -> bool:
    """Copy the full weights saved at `path` into `model`, a model not serving now, when they are the same model
    (config.json and generation_config.json byte-identical to those `model` was built from, the same tensor names);
    False, `model` then unfit to serve, otherwise. A step's push is the same architecture every time:
    from_pretrained rebuilt the whole model for it, ~16-22 ms of mostly Python on the tiny model, every step and
    holding the interpreter lock the sampler's decode loop needs; this copy takes ~1 ms (docs/benchmarks.md,
    issue 22)."""
    import torch
    from safetensors.torch import load_file

    directory = Path(path)
    files = sorted(directory.glob("*.safetensors"))
    if not files or getattr(model, "hermes_saved_config", None) != _saved_config(path):
        return False
    device = str(next(model.parameters()).device)
    state: dict = {}
    for file in files:
        state.update(load_file(file, device=device))
    with torch.no_grad():
        try:
            loaded = model.load_state_dict(state, strict=False)
        except RuntimeError:  # a shape that differs: the caller builds the model afresh
            return False
    if loaded.unexpected_keys:
        return False
    # save_pretrained leaves tied weights out (lm_head sharing the embedding): a missing name is fine only where
    # its tensor is one that was loaded.
    params = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
    loaded_ptrs = {params[name].data_ptr() for name in state if name in params}
    return all(name in params and params[name].data_ptr() in loaded_ptrs for name in loaded.missing_keys)


def _emitter(batch: list[_Job]):
    """sample_rows' on_done for a batch whose jobs stream (None when none does): each ended row to its job's emit,
    indexed within the job."""
    if not any(job.emit for job in batch):
        return None
    owner: list[tuple[_Job, int]] = [(job, i) for job in batch for i in range(len(job.rows))]

    def on_done(pairs: list[tuple[int, Generated]]) -> None:
        by_job: dict[int, list[tuple[int, Generated]]] = {}
        for index, generated in pairs:
            job, local = owner[index]
            if job.emit is not None:
                by_job.setdefault(id(job), []).append((local, generated))
        for job in batch:
            if id(job) in by_job:
                job.emit(by_job[id(job)])

    return on_done




@dataclass(frozen=True)
class HostFacts:
    """What the front needs to know of the served model, without the model: a request's limits, the adapters it may
    name, and what /model_info reports. A snapshot, taken after each change."""

    context_length: int
    vocab_size: int
    weight_version: int
    weights_path: str
    adapters: dict[str, str] = field(default_factory=dict)  # name -> path, in load order
    default_adapter: str | None = None


class ModelHost:
    """The model, its worker thread and its weight changes, in this process. Every method but `submit` blocks (the
    front calls them through asyncio.to_thread)."""

    def __init__(self, model_path: str, device: str = "cpu", max_batch_rows: int = 512, seed: int | None = None,
                 tokenizer=None, busy_cell=None):
        import torch
        from transformers import AutoTokenizer

        self.model_path = str(model_path)
        self.device = device
        self.max_batch_rows = max_batch_rows
        self.gather_s = GATHER_S
        one_thread_for_tiny_model(self.model_path, device)
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(self.model_path)
        self.model = _load_model(self.model_path, device)
        self.weight_version = 0
        self.weights_path = self.model_path
        self.adapters: dict[str, str] = {}  # name -> path, in load order
        self.default_adapter: str | None = None
        self._generator = torch.Generator(device=device)
        self._generator.manual_seed(seed if seed is not None else int(time.time_ns() % 2**31))
        self._model_lock = threading.Lock()
        self._spare = None  # a model no batch uses, for the next full-weights reload (_load)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._busy_since: float | None = None  # monotonic start of the batch the worker samples now
        self._busy_cell = busy_cell  # a shared double the same start is copied to (0.0 idle), read by a parent process
        self.batch_log = BatchLog()
        self._snapshot()

    def facts(self) -> HostFacts:
        """The snapshot taken after the last change (read per request and per streamed event: not rebuilt there)."""
        return self._facts

    def _changed(self) -> None:
        """A new weight version: every change ends here, under the model lock, and the snapshot follows it."""
        self.weight_version += 1
        self._snapshot()

    def _snapshot(self) -> None:
        self._facts = HostFacts(context_length(self.model), self.model.config.vocab_size, self.weight_version,
                                self.weights_path, dict(self.adapters), self.default_adapter)

    # ------------------------------------------------------------------ lifecycle

    def is_alive(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def start(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="builtin-sampler", daemon=True)
            self._worker.start()

    def stop(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join(10)
            self._worker = None

    # ------------------------------------------------------------------ sampling

    def submit(self, rows: list[Row], adapter: str | None, emit=None) -> Future:
        """A future of the rows' results; `emit`, when given, is called in the sampler thread with each step's
        ended rows as (index in `rows`, result) pairs."""
        future: Future = Future()
        self._jobs.put(_Job(rows, adapter, future, emit))
        return future

    def busy_for(self, now: float | None = None) -> float | None:
        """Seconds the current batch has been sampling; None when the worker is idle."""
        since = self._busy_since
        return None if since is None else (time.monotonic() if now is None else now) - since

    def _work(self) -> None:
        held: list[_Job] = []
        while True:
            job = held.pop(0) if held else self._jobs.get()
            if job is None:
                return
            batch, rows = [job], len(job.rows)
            # Take whatever else is queued now or arrives within GATHER_S: same adapter joins this batch, the rest
            # waits for the next.
            gather_until = time.monotonic() + self.gather_s
            while rows < self.max_batch_rows:
                try:
                    more = self._jobs.get(timeout=max(0.0, gather_until - time.monotonic()))
                except queue.Empty:
                    break
                if more is None:
                    held.append(more)
                    break
                if more.adapter == job.adapter and rows + len(more.rows) <= self.max_batch_rows:
                    batch.append(more)
                    rows += len(more.rows)
                else:
                    held.append(more)
            self._run(batch)

    def _run(self, batch: list[_Job]) -> None:
        rows = [row for job in batch for row in job.rows]
        try:
            with self._model_lock:
                began = self._busy_since = time.monotonic()
                if self._busy_cell is not None:
                    self._busy_cell.value = began
                try:
                    results = self._sample(rows, batch[0].adapter, _emitter(batch))
                finally:
                    self._busy_since = None
                    if self._busy_cell is not None:
                        self._busy_cell.value = 0.0
        except Exception as exc:
            log.exception("sampling failed")
            for job in batch:
                if not job.future.cancelled():  # a caller that gave up: setting it would end this thread
                    job.future.set_exception(exc)
            return
        busy_s = time.monotonic() - began
        start = 0
        for job in batch:
            if not job.future.cancelled():
                job.future.set_result(results[start:start + len(job.rows)])
            start += len(job.rows)
        # After the answers went out: the log line never delays a request.
        if line := self.batch_log.add(len(rows), busy_s, time.monotonic()):
            log.info("%s", line)

    def _sample(self, rows: list[Row], adapter: str | None, on_done=None) -> list[Generated]:
        model = self.model
        if hasattr(model, "peft_config"):
            if adapter is None:
                with model.disable_adapter():
                    return sample_rows(model, self.tokenizer, rows, self._generator, on_done)
            model.set_adapter(adapter)
        return sample_rows(model, self.tokenizer, rows, self._generator, on_done)

    # ------------------------------------------------------------------ weights

    def reload(self, path: str) -> str | None:
        """Serve the full weights saved at `path`; None when done, else why not (nothing changed)."""
        model = self._load(path)
        if model.config.vocab_size != self.model.config.vocab_size:
            return f"vocab size {model.config.vocab_size} differs from the served model's {self.model.config.vocab_size}"
        # Adapters were attached to the old base model: a full reload starts clean (the trainer re-sends LoRA).
        self._swap(model, path)
        return None

    def _load(self, path: str):
        """The model at `path`, outside the model lock: the weights copied into the spare (the model the last swap
        replaced, which no batch uses any more) where it is the same model, else built afresh."""
        spare, self._spare = self._spare, None
        if spare is not None and _load_weights_into(spare, path):
            return spare
        del spare  # a half-copied spare is not held while the new model is built
        return _load_model(path, self.device)

    def _swap(self, model, path: str) -> None:
        with self._model_lock:
            old = self.model
            # The replaced model is the next reload's spare: on CPU only, where two copies of the models this
            # backend serves there (tiny, 135M) are cheap and a reload held two anyway while it built the new one;
            # not one with LoRA layers attached, and not the model just loaded.
            keep = self.device == "cpu" and not hasattr(old, "peft_config") and old is not model
            self._spare = old if keep else None
            self.model = model
            self.weights_path = path
            self.adapters.clear()
            self.default_adapter = None
            self._changed()

    def load_adapter(self, name: str, path: str) -> None:
        from peft import PeftModel

        with self._model_lock:
            if name in self.adapters and hasattr(self.model, "peft_config"):
                self.model.delete_adapter(name)
                del self.adapters[name]
            if hasattr(self.model, "peft_config"):
                self.model.load_adapter(path, adapter_name=name)
            else:
                self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name).eval()
            self.adapters[name] = path
            self.default_adapter = name
            self._changed()

    def unload_adapter(self, name: str) -> None:
        with self._model_lock:
            self.model.delete_adapter(name)
            del self.adapters[name]
            if self.default_adapter == name:
                self.default_adapter = next(reversed(self.adapters), None)
            if not self.adapters:
                # A PeftModel without adapters cannot disable_adapter() (KeyError on the deleted active one):
                # the base model, its LoRA layers removed, serves again.
                self.model = self.model.unload()
            self._changed()


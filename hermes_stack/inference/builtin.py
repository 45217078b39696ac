"""The builtin backend: torch + transformers in this process (CPU default), answering SGLang's and OpenAI's shapes.

Concurrency: one worker thread owns the model. Requests queue rows; the worker takes everything queued (same
adapter, up to `max_batch_rows`) and samples it as one batch, so concurrent requests are batched, never interleaved.
A weight reload loads the new model outside the lock, then swaps it under the same lock the worker holds while
sampling: a batch runs entirely on the old weights or entirely on the new ones.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from hermes_stack.inference.backend import BackendReply, Generated
from hermes_stack.inference.openai_shapes import (
    chat_response,
    completion_response,
    generate_response,
    prompt_from_messages,
)
from hermes_stack.inference.sampling import (
    RequestError,
    SamplingParams,
    openai_sampling_params,
    parse_sampling_params,
)
from hermes_stack.inference.torch_sampler import Row, context_length, sample_rows
from hermes_stack.modelcore.embedded import one_thread_for_tiny_model
from hermes_stack.service_json import json_bytes

log = logging.getLogger("hermes.inference")

# A batch sampling for less than this long counts as a healthy, busy server (SGLang's /health_generate likewise answers
# 200 while requests make progress): a 1-token check queued behind a rollout of a real model on a busy CPU would
# otherwise time out and mark a serving server unhealthy. A batch running longer than this is treated as stuck.
BUSY_HEALTHY_S = 600.0
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


def _parse_each(raw_list: list[Any]) -> list[SamplingParams]:
    """parse_sampling_params for each prompt's params, once per distinct dict: a chunk's list form repeats a few
    dicts for hundreds of prompts, and parsing each was 4 % of the server's samples (py-spy, issue 22)."""
    parsed: dict[bytes, SamplingParams] = {}
    by_id: dict[int, SamplingParams] = {}  # the one-object form repeats the same dict: no key to build
    out = []
    for raw in raw_list:
        if id(raw) not in by_id:
            # JSON bytes, keys sorted, as the key: 1, 1.0 and true stay apart (parse refuses a boolean n), so do
            # NaN and null (json_bytes); by orjson: json.dumps of a 256-row chunk's dicts was ~1.3 ms (issue 22)
            key = json_bytes(raw, sort_keys=True)
            if key not in parsed:
                parsed[key] = parse_sampling_params(raw)
            by_id[id(raw)] = parsed[key]
        out.append(by_id[id(raw)])
    return out


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


class BuiltinBackend:
    name = "builtin"

    def __init__(self, model_path: str, served_model: str | None = None, device: str = "cpu",
                 max_batch_rows: int = 512, seed: int | None = None):
        import torch
        from transformers import AutoTokenizer

        self.model_path = str(model_path)
        self.served_model = served_model or self.model_path
        self.device = device
        self.max_batch_rows = max_batch_rows
        self.gather_s = GATHER_S
        one_thread_for_tiny_model(self.model_path, device)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.model = _load_model(self.model_path, device)
        self.weight_version = 0
        self.weights_path = self.model_path
        self.adapters: dict[str, str] = {}  # name -> path, in load order
        self.default_adapter: str | None = None
        self._generator = torch.Generator(device=device)
        self._generator.manual_seed(seed if seed is not None else int(time.time_ns() % 2**31))
        self._model_lock = threading.Lock()
        self._reload_lock = asyncio.Lock()
        self._spare = None  # a model no batch uses, for the next full-weights reload (_load)
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._warned: set[str] = set()
        self._busy_since: float | None = None  # monotonic start of the batch the worker samples now
        self.batch_log = BatchLog()

    # ------------------------------------------------------------------ lifecycle

    def is_ready(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    async def start(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="builtin-sampler", daemon=True)
            self._worker.start()

    async def stop(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            await asyncio.to_thread(self._worker.join, 10)
            self._worker = None

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
                try:
                    results = self._sample(rows, batch[0].adapter, _emitter(batch))
                finally:
                    self._busy_since = None
        except Exception as exc:
            log.exception("sampling failed")
            for job in batch:
                job.future.set_exception(exc)
            return
        busy_s = time.monotonic() - began
        start = 0
        for job in batch:
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

    async def _submit(self, rows: list[Row], adapter: str | None, emit=None) -> list[Generated]:
        if not self.is_ready():
            raise BackendReply(503, {"error": {"message": "the builtin backend is not started", "type": "unavailable"}})
        future: Future = Future()
        self._jobs.put(_Job(rows, adapter, future, emit))
        return await asyncio.wrap_future(future)

    # ------------------------------------------------------------------ request helpers

    def _check(self, params: SamplingParams) -> None:
        for key in params.ignored:
            if key not in self._warned:
                self._warned.add(key)
                log.warning("sampling parameter %r is not implemented by the builtin backend; ignored", key)

    def _rows(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Row]:
        ctx = context_length(self.model)
        vocab = self.model.config.vocab_size  # once: transformers' config attribute lookup is slow per row
        rows = []
        for ids, p in zip(prompts, params):
            if not ids:
                raise RequestError("empty prompt")
            if len(ids) >= ctx:
                raise RequestError(f"prompt has {len(ids)} tokens, the model's context is {ctx}")
            if any((not isinstance(t, int)) or t < 0 or t >= vocab for t in ids):
                raise RequestError(f"input_ids must be integers in [0, {vocab})")
            self._check(p)
            rows.extend(Row(tuple(ids), p) for _ in range(p.n))
        return rows

    def _adapter(self, requested: Any) -> str | None:
        """The adapter a request's `model` selects. As SGLang (entrypoints/openai/serving_base.py,
        OpenAIServingBase._resolve_lora_path): `base-model:adapter-name` selects that adapter, and an adapter that is
        not loaded is an error; any other name is answered, never refused (SGLang does not check the model name;
        the response repeats it). The Hermes extension: a name that selects no adapter gets the newest one (the
        trainer's current policy), as the sglang backend's _with_adapter does; a name that is not served is logged
        once."""
        if requested is None or requested == self.served_model or requested == "":
            return self.default_adapter
        if isinstance(requested, str) and ":" in requested:
            adapter = requested.split(":", 1)[1]
            if adapter not in self.adapters:
                raise RequestError(f"LoRA adapter {adapter!r} (from model {requested!r}) is not loaded; loaded: "
                                   f"{', '.join(self.adapters) or 'none'}")
            return adapter
        if requested in self.adapters:
            return requested
        if requested == "base":
            return None
        if requested not in self._warned:
            self._warned.add(requested)
            log.warning("model %r is not a served name (%s); answered by %s, as SGLang answers any model name",
                        requested, ", ".join(self.models()), self.served_model)
        return self.default_adapter

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    # ------------------------------------------------------------------ SGLang native

    async def generate(self, body: dict[str, Any]) -> Any:
        if body.get("stream"):
            raise RequestError("stream: this backend streams through generate_stream (the /generate route)")
        single, rows = self._generate_rows(body)
        results = await self._submit(rows, self._adapter(body.get("lora_path")))
        want_lp = body.get("return_logprob", False)
        with_text = bool(body.get("return_text_in_logprobs", False))
        answers = generate_response(results, want_lp, with_text, self.tokenizer, self.weight_version)
        return answers[0] if single and len(answers) == 1 else answers

    def generate_stream(self, body: dict[str, Any]) -> AsyncIterator[bytes]:
        """/generate with `stream: true`, as SGLang's server-sent events (http_server.py generate_request, its
        tokenizer manager's _handle_batch_request): `data: <answer>` per event, a batched request's answers carrying
        their `index` in the (n-expanded) batch, `data: [DONE]` last; a failure after the stream began is an event
        `{"error": {"message": ...}}`, as SGLang's. Each row is sent once, when it ends, whole (SGLang sends a row's
        progress every stream_interval tokens as well; its last event, finish_reason set, is the whole answer): the
        rows of a step go out together while the batch's longer rows still sample, so the environment scores
        them meanwhile (issue 22). A bad request raises here, before the stream starts (a plain JSON error)."""
        single, rows = self._generate_rows(body)
        adapter = self._adapter(body.get("lora_path"))
        want_lp = body.get("return_logprob", False)
        with_text = bool(body.get("return_text_in_logprobs", False))
        return self._stream(rows, adapter, single, want_lp, with_text)

    async def _stream(self, rows: list[Row], adapter: str | None, single: bool, want_lp: bool,
                      with_text: bool) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        ended: asyncio.Queue = asyncio.Queue()
        task = asyncio.ensure_future(self._submit(
            rows, adapter, emit=lambda pairs: loop.call_soon_threadsafe(ended.put_nowait, pairs)))

        def job_ended(job: asyncio.Future) -> None:
            # Read its outcome here: a client that left mid-stream leaves the job running (its rows are in the
            # sampler's batch), and its error would otherwise be logged as never retrieved.
            if not job.cancelled():
                job.exception()
            ended.put_nowait(None)

        task.add_done_callback(job_ended)
        sent = 0
        try:
            while sent < len(rows):
                pairs = await ended.get()
                if pairs is None:  # the job ended before every row was sent: it failed
                    await task
                    raise RuntimeError(f"the sampler ended with {len(rows) - sent} of {len(rows)} rows unsent")
                answers = generate_response([g for _, g in pairs], want_lp, with_text, self.tokenizer,
                                            self.weight_version)
                if not single or len(rows) > 1:  # one prompt with n > 1 is a batch of n rows: they need an index
                    for (i, _), answer in zip(pairs, answers):
                        answer["index"] = i
                sent += len(pairs)
                yield b"".join(b"data: " + orjson.dumps(a) + b"\n\n" for a in answers)
        except Exception as exc:  # noqa: BLE001 - after the stream began, an error is an event (SGLang's shape)
            message = exc.body.get("error", {}).get("message") if isinstance(exc, BackendReply) else None
            yield b"data: " + orjson.dumps({"error": {"message": message or f"{type(exc).__name__}: {exc}"}}) + b"\n\n"
        yield b"data: [DONE]\n\n"

    def _generate_rows(self, body: dict[str, Any]) -> tuple[bool, list[Row]]:
        """(a single prompt?, its rows) of a /generate body; RequestError for a malformed one."""
        ids, text = body.get("input_ids"), body.get("text")
        if (ids is None) == (text is None):
            raise RequestError("give exactly one of input_ids or text")
        if ids is not None:
            single = bool(ids) and isinstance(ids[0], int)
            prompts = [ids] if single else ids
            if not isinstance(prompts, list) or not all(isinstance(p, list) for p in prompts):
                raise RequestError("input_ids must be a list of token ids or a list of such lists")
        else:
            single = isinstance(text, str)
            texts = [text] if single else text
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise RequestError("text must be a string or a list of strings")
            prompts = [self._encode(t) for t in texts]
        raw = body.get("sampling_params") or {}
        raw_list = raw if isinstance(raw, list) else [raw] * len(prompts)
        if len(raw_list) != len(prompts):
            raise RequestError("sampling_params list must have one entry per input")
        return single, self._rows(prompts, _parse_each(raw_list))

    # ------------------------------------------------------------------ OpenAI

    async def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        # stream: the front (server.py) turns this answer into server-sent events
        if body.get("echo"):
            raise RequestError("echo is not supported by the builtin backend")
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompts = [self._encode(prompt)]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompts = [self._encode(p) for p in prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompts = [prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
            prompts = prompt
        else:
            raise RequestError("prompt must be a string, a list of strings, or token ids")
        # The completions route's `logprobs` is the number of top log-probs (serving_completions.py,
        # OpenAIServingCompletion._convert_to_internal_request: top_logprobs_num=request.logprobs).
        wanted = body.get("logprobs")
        top = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) else 0
        params = openai_sampling_params(body, default_max_tokens=16, context=context_length(self.model),
                                        top_logprobs=top)
        rows = self._rows(prompts, [params] * len(prompts))
        results = await self._submit(rows, self._adapter(body.get("model")))
        return completion_response(results, wanted is not None and wanted is not False,
                                   self.tokenizer, body.get("model") or self.served_model)

    async def chat_completions(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list")
        ids = prompt_from_messages(self.tokenizer, messages)
        # top_logprobs are computed when asked and returned with logprobs=true (serving_chat.py,
        # OpenAIServingChat._convert_to_internal_request: top_logprobs_num=request.top_logprobs or 0,
        # return_logprob=request.logprobs).
        params = openai_sampling_params(body, default_max_tokens=context_length(self.model),
                                        context=context_length(self.model),
                                        top_logprobs=body.get("top_logprobs") or 0 if body.get("logprobs") else 0)
        rows = self._rows([ids], [params])
        results = await self._submit(rows, self._adapter(body.get("model")))
        return chat_response(results, bool(body.get("logprobs")), self.tokenizer, body.get("model") or self.served_model)

    # ------------------------------------------------------------------ weights

    async def update_weights_from_disk(self, body: dict[str, Any]) -> dict[str, Any]:
        path = body.get("model_path")
        if not isinstance(path, str) or not Path(path).is_dir():
            return {"success": False, "message": f"model_path {path!r} is not a directory"}
        # One reload at a time, loaded and swapped in the order they came (asyncio's lock is first come, first
        # served): they share the spare model, and the newest push must be the one served.
        async with self._reload_lock:
            try:
                model = await asyncio.to_thread(self._load, path)
            except Exception as exc:  # noqa: BLE001 - reported to the caller like SGLang does
                return {"success": False, "message": f"failed to load {path}: {type(exc).__name__}: {exc}"}
            if model.config.vocab_size != self.model.config.vocab_size:
                return {"success": False, "message": f"vocab size {model.config.vocab_size} differs from the served "
                                                     f"model's {self.model.config.vocab_size}"}
            # Adapters were attached to the old base model: a full reload starts clean (the trainer re-sends LoRA).
            await asyncio.to_thread(self._swap, model, path)
        log.info("weights updated from %s (version %d)", path, self.weight_version)
        return {"success": True, "message": f"Succeeded to update model weights from {path}",
                "weight_version": str(self.weight_version)}

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
            self.weight_version += 1

    async def load_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not Path(path).is_dir():
            return {"success": False, "message": "lora_name must be a name and lora_path a directory"}
        try:
            await asyncio.to_thread(self._load_adapter, name, path)
        except Exception as exc:  # noqa: BLE001
            return {"success": False, "message": f"failed to load adapter {name} from {path}: {exc}"}
        log.info("LoRA adapter %s loaded from %s; it now serves requests that name no adapter", name, path)
        return {"success": True, "message": f"Loaded LoRA adapter {name}", "loaded_adapters": dict(self.adapters)}

    def _load_adapter(self, name: str, path: str) -> None:
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
            self.weight_version += 1

    async def unload_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("lora_name")
        if name not in self.adapters:
            return {"success": False, "message": f"adapter {name!r} is not loaded"}

        def unload() -> None:
            with self._model_lock:
                self.model.delete_adapter(name)
                del self.adapters[name]
                if self.default_adapter == name:
                    self.default_adapter = next(reversed(self.adapters), None)
                if not self.adapters:
                    # A PeftModel without adapters cannot disable_adapter() (KeyError on the deleted active one):
                    # the base model, its LoRA layers removed, serves again.
                    self.model = self.model.unload()
                self.weight_version += 1

        await asyncio.to_thread(unload)
        return {"success": True, "message": f"Unloaded LoRA adapter {name}"}

    # ------------------------------------------------------------------ info

    def busy_for(self, now: float | None = None) -> float | None:
        """Seconds the current batch has been sampling; None when the worker is idle."""
        since = self._busy_since
        return None if since is None else (time.monotonic() if now is None else now) - since

    async def health_generate(self) -> bool:
        busy = self.busy_for()
        if busy is not None and busy < BUSY_HEALTHY_S:
            return True  # generating right now: a 1-token check would only wait behind the batch
        ids = self._encode("1")
        result = await self._submit([Row(tuple(ids), SamplingParams(max_new_tokens=1))], self.default_adapter)
        return len(result) == 1

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "tokenizer_path": self.model_path, "is_generation": True,
                "weights_path": self.weights_path, "weight_version": str(self.weight_version),
                "served_model_name": self.served_model, "backend": self.name,
                "lora_adapters": list(self.adapters), "context_length": context_length(self.model)}

    def models(self) -> list[str]:
        return [self.served_model, *self.adapters]

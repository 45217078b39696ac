"""The builtin backend: torch + transformers (CPU default), answering SGLang's and OpenAI's shapes.

This front parses requests, checks them against the served model's facts and encodes the answers; the model, its
sampler thread and its weight changes live in a host (model_host.py): in this process, or in a child process
(child_host.py) so that the front's event loop and the sampler do not share an interpreter lock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from hermes_stack.inference.backend import BackendReply, Generated, exit_process
from hermes_stack.inference.model_host import ModelHost
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
from hermes_stack.inference.torch_sampler import Row
from hermes_stack.service_json import json_bytes

log = logging.getLogger("hermes.inference")

# A batch sampling for less than this long counts as a healthy, busy server (SGLang's /health_generate likewise answers
# 200 while requests make progress): a 1-token check queued behind a rollout of a real model on a busy CPU would
# otherwise time out and mark a serving server unhealthy. A batch running longer than this is treated as stuck.
BUSY_HEALTHY_S = 600.0
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


class BuiltinBackend:
    name = "builtin"

    def __init__(self, model_path: str, served_model: str | None = None, device: str = "cpu",
                 max_batch_rows: int = 512, seed: int | None = None, sampler: str = "thread",
                 log_level: str = "INFO"):
        """`sampler`: "thread" samples in this process (benches, tests, the dry-run's checks); "process" in a child
        process (the inference service: child_host.py says why)."""
        self.model_path = str(model_path)
        self.served_model = served_model or self.model_path
        self.device = device
        self._warned: set[str] = set()
        self._reload_lock = asyncio.Lock()
        if sampler == "process":
            from transformers import AutoTokenizer

            from hermes_stack.inference.child_host import ChildHost

            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            self.host = ChildHost(self.model_path, device, max_batch_rows, seed, log_level, on_fatal=exit_process)
        else:
            self.host = ModelHost(self.model_path, device, max_batch_rows, seed)
            self.tokenizer = self.host.tokenizer

    # What the served model is now, from its host (a child's as of its last change).
    @property
    def weight_version(self) -> int:
        return self.host.facts().weight_version

    @property
    def weights_path(self) -> str:
        return self.host.facts().weights_path

    @property
    def adapters(self) -> dict[str, str]:
        return self.host.facts().adapters

    @property
    def default_adapter(self) -> str | None:
        return self.host.facts().default_adapter

    # ------------------------------------------------------------------ lifecycle

    def is_ready(self) -> bool:
        return self.host.is_alive()

    async def start(self) -> None:
        await asyncio.to_thread(self.host.start)

    async def stop(self) -> None:
        await asyncio.to_thread(self.host.stop)

    async def _submit(self, rows: list[Row], adapter: str | None, emit=None) -> list[Generated]:
        if not self.is_ready():
            raise BackendReply(503, {"error": {"message": "the builtin backend is not started", "type": "unavailable"}})
        return await asyncio.wrap_future(self.host.submit(rows, adapter, emit))

    # ------------------------------------------------------------------ request helpers

    def _check(self, params: SamplingParams) -> None:
        for key in params.ignored:
            if key not in self._warned:
                self._warned.add(key)
                log.warning("sampling parameter %r is not implemented by the builtin backend; ignored", key)

    def _rows(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Row]:
        facts = self.host.facts()
        ctx, vocab = facts.context_length, facts.vocab_size
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
        facts = self.host.facts()
        if requested is None or requested == self.served_model or requested == "":
            return facts.default_adapter
        if isinstance(requested, str) and ":" in requested:
            adapter = requested.split(":", 1)[1]
            if adapter not in facts.adapters:
                raise RequestError(f"LoRA adapter {adapter!r} (from model {requested!r}) is not loaded; loaded: "
                                   f"{', '.join(facts.adapters) or 'none'}")
            return adapter
        if requested in facts.adapters:
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
        params = openai_sampling_params(body, default_max_tokens=16, context=self.host.facts().context_length,
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
        params = openai_sampling_params(body, default_max_tokens=self.host.facts().context_length,
                                        context=self.host.facts().context_length,
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
                why = await asyncio.to_thread(self.host.reload, path)
            except Exception as exc:  # noqa: BLE001 - reported to the caller like SGLang does
                return {"success": False, "message": f"failed to load {path}: {type(exc).__name__}: {exc}"}
            if why is not None:
                return {"success": False, "message": why}
        log.info("weights updated from %s (version %d)", path, self.weight_version)
        return {"success": True, "message": f"Succeeded to update model weights from {path}",
                "weight_version": str(self.weight_version)}

    async def load_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not Path(path).is_dir():
            return {"success": False, "message": "lora_name must be a name and lora_path a directory"}
        try:
            await asyncio.to_thread(self.host.load_adapter, name, path)
        except Exception as exc:  # noqa: BLE001
            return {"success": False, "message": f"failed to load adapter {name} from {path}: {exc}"}
        log.info("LoRA adapter %s loaded from %s; it now serves requests that name no adapter", name, path)
        return {"success": True, "message": f"Loaded LoRA adapter {name}", "loaded_adapters": dict(self.adapters)}

    async def unload_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("lora_name")
        if name not in self.adapters:
            return {"success": False, "message": f"adapter {name!r} is not loaded"}

        await asyncio.to_thread(self.host.unload_adapter, name)
        return {"success": True, "message": f"Unloaded LoRA adapter {name}"}

    # ------------------------------------------------------------------ info

    def busy_for(self, now: float | None = None) -> float | None:
        """Seconds the current batch has been sampling; None when the sampler is idle."""
        return self.host.busy_for(now)

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
                "lora_adapters": list(self.adapters), "context_length": self.host.facts().context_length}

    def models(self) -> list[str]:
        return [self.served_model, *self.adapters]

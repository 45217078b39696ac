"""The inference service's HTTP front (port 8001): auth, routes, errors. The backend does the work.

Routes mirror SGLang so the trainer and atroposlib (server_type "sglang") talk to either backend the same way:
GET /health (liveness, no auth), /health_generate, /get_model_info (and /model_info), /get_server_info (and
/server_info), /v1/models; POST /generate, /v1/completions, /v1/chat/completions, /update_weights_from_disk,
/load_lora_adapter, /unload_lora_adapter.

Behind SGLang's router (sglang-router 0.3.2, `make up REPLICAS=N`) each replica is a worker: the router's worker
discovery asks /server_info, /get_server_info, /model_info, /get_model_info (read from its log against this server,
docs/scaling.md), checks /health_generate every few seconds and forwards the generation routes with the client's
Authorization header. /get_server_info also carries this replica's own counters (`hermes`): its weights version and
the generation requests it served under each version, which `status` and the replica test read.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from hermes_stack.errors import InputError, Problem
from hermes_stack.health import marker_path, remove_marker, write_marker
from hermes_stack.inference.backend import Backend, BackendReply
from hermes_stack.inference.openai_shapes import chat_stream_chunks, completion_stream_chunks, sse_lines
from hermes_stack.inference.sampling import RequestError

log = logging.getLogger("hermes.inference")

OPEN_PATHS = {"/health"}
GENERATION_PATHS = {"/generate", "/v1/completions", "/v1/chat/completions"}
BASE_VERSION = "base"  # the weights version before any synced weights were loaded


class ServedCounters:
    """This replica's weights version (the `step-<N>` folder or adapter name it last loaded) and how many generation
    requests it answered under each version: the router's choice of replica made visible, per step."""

    def __init__(self) -> None:
        self.version = BASE_VERSION
        self.served: dict[str, int] = {}

    def loaded(self, version: str) -> None:
        self.version = version

    def count(self) -> None:
        self.served[self.version] = self.served.get(self.version, 0) + 1

    def as_json(self) -> dict[str, Any]:
        return {"weights_version": self.version, "requests_served": sum(self.served.values()),
                "served_by_version": dict(self.served)}


class GenerateResponse(JSONResponse):
    """/generate's answer (plain JSON types) rendered by orjson: under GRPO rollouts json.dumps of the answers was
    5.4 % of the inference process's samples, in the event loop the sampler thread shares the GIL with (py-spy,
    issue 22). FastAPI's own ORJSONResponse is deprecated in favour of response models, which /generate has none of."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class KeyAndCounters:
    """The API key on every route but /health, and the served counters, as a plain ASGI middleware. Not
    `@app.middleware("http")`: Starlette's BaseHTTPMiddleware passes every answer through a task group and memory
    streams. With httptools in place of h11, a 256-row rollout chunk's request and answer took ~4.3 ms in the CPU
    stack instead of ~6.8 (issue 22, docs/benchmarks.md)."""

    def __init__(self, app, expected: bytes, counters: ServedCounters) -> None:
        self.app, self.expected, self.counters = app, expected, counters

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if path not in OPEN_PATHS:
            given = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                answer = _error(401, "missing or wrong API key (Authorization: Bearer <HERMES_INFERENCE_KEY>)",
                                "authentication_error")
                return await answer(scope, receive, send)
        if path not in GENERATION_PATHS:
            return await self.app(scope, receive, send)

        async def counted(message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                self.counters.count()
            await send(message)

        await self.app(scope, receive, counted)


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def newest_weights(data_dir: Path) -> Path | None:
    """The newest finished `weights/step-<N>` the trainer synced (temp dirs of a killed export are ignored)."""
    from hermes_stack.modelcore.weights_layout import newest_step_dir

    return newest_step_dir(data_dir / "weights")


async def load_newest_weights(backend: Backend, data_dir: Path,
                              counters: ServedCounters | None = None) -> Path | None:
    """A restarted inference service serves the policy the trainer last synced, not the base model: the trainer
    only pushes after its next step, and rollouts meanwhile would come from the base model."""
    path = newest_weights(data_dir)
    if path is None:
        return None
    if (path / "adapter_config.json").exists():
        answer = await backend.load_lora_adapter({"lora_name": path.name, "lora_path": str(path)})
    else:
        answer = await backend.update_weights_from_disk({"model_path": str(path)})
    if not answer.get("success", True):  # e.g. pruned meanwhile: the trainer's next push still arrives
        log.warning("could not load the newest synced weights %s: %s; serving the base model until the trainer's "
                    "next push", path, answer.get("message"))
        return None
    if counters is not None:
        counters.loaded(path.name)
    log.info("serving the newest synced weights %s (not the base model)", path)
    return path


def outside_data_volume(field: str, path: Any, data_dir: Path | None) -> str | None:
    """Why a client's weight or adapter path is refused (None: it lies inside the data volume). Symlinks and `..` are
    resolved first, so neither leads out. The trainer writes every path it sends under $HERMES_DATA_DIR/weights."""
    if not isinstance(path, str) or not path:
        return None  # the backend names a missing or non-string path itself
    if data_dir is None:
        return f"{field} {path!r} refused: no data volume (HERMES_DATA_DIR) is configured to load from"
    root = os.path.realpath(data_dir)
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        return f"{field} {path!r} is outside the data volume {data_dir}; weights and adapters load only from there"
    return None


def streaming_of(body: dict[str, Any]) -> tuple[dict[str, Any], bool, bool]:
    """(the body the backend answers, stream?, include usage?). Either backend answers the whole request; a
    streaming one is then sent as SGLang's server-sent events (openai_shapes.chat_stream_chunks). Errors come before
    the stream starts, as plain JSON with their status, as SGLang's do."""
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"stream: found {stream!r}, expected true or false")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError(f"stream_options: found {options!r}, expected an object")
    rest = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    return rest, stream, bool(options.get("include_usage"))


def sse(chunks: list[dict[str, Any]]) -> StreamingResponse:
    return StreamingResponse(sse_lines(chunks), media_type="text/event-stream")


def create_app(backend: Backend, api_key: str | None, data_dir: Path | None = None, *,
               owns_data_volume: bool = True) -> FastAPI:
    """The inference service's app. `data_dir`: load paths must lie inside it. `owns_data_volume` (the stack's own
    inference service): at start it also serves the newest synced weights from there and writes the ready marker.
    An SGLang stand-in behind the front passes False: SGLang reads neither, and a second process loading the newest
    step would make the front's own load of it meet "already loaded"."""
    if not api_key:
        # Without a key every route, /update_weights_from_disk included, would be open to anyone who can reach it.
        raise InputError(Problem("(environment)", "HERMES_INFERENCE_KEY", "no value",
                                 "the key that protects the inference service",
                                 "start the stack with `make up`, which generates one; by hand, set the "
                                 "Compose secret hermes_inference_key (variable HERMES_INFERENCE_KEY)"))
    marker = marker_path(data_dir, "inference") if data_dir is not None and owns_data_volume else None
    # Ready = started AND the newest synced weights loaded: before that a push could race the front's own load.
    # start_s (this start, measured) and the backend's start limit go out on /health: a trainer keeps them and
    # rides out a restart for as long as the model takes to start, not a fixed bound.
    started: dict[str, float | None] = {"start_s": None}
    counters = ServedCounters()

    def ready() -> bool:
        return backend.is_ready() and started["start_s"] is not None

    async def start_backend() -> None:
        t0 = time.monotonic()
        restores = data_dir is not None and owns_data_volume
        if restores and hasattr(backend, "after_restart"):  # a supervised child restart (SGLang)
            backend.after_restart = lambda: load_newest_weights(backend, data_dir, counters)
        await backend.start()
        if restores:
            await load_newest_weights(backend, data_dir, counters)
            write_marker(data_dir, "inference", backend=backend.name, model=backend.served_model)
        started["start_s"] = round(time.monotonic() - t0, 1)
        log.info("inference ready: backend %s, model %s, auth on (started in %.1f s)", backend.name,
                 backend.served_model, started["start_s"])

    async def start_in_background() -> None:
        try:
            await start_backend()
        except Exception as exc:  # noqa: BLE001 - a backend that cannot start ends the service (exit 1)
            log.error("%s", exc)
            backend.on_fatal(str(exc))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # A slow backend (SGLang loads for minutes) starts in the background so /health answers meanwhile
        # ({"ready": false}); the builtin one is ready before the first request is accepted.
        task = asyncio.create_task(start_in_background()) if getattr(backend, "slow_start", False) else None
        if task is None:
            await start_backend()
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
            remove_marker(marker)  # only this process's: a restarted front may already have replaced it
            await backend.stop()

    app = FastAPI(title="hermes-stack inference", lifespan=lifespan, docs_url=None, redoc_url=None)

    app.add_middleware(KeyAndCounters, expected=f"Bearer {api_key}".encode(), counters=counters)

    @app.exception_handler(RequestError)
    async def bad_request(request: Request, exc: RequestError):
        return _error(400, str(exc), "invalid_request_error")

    @app.exception_handler(BackendReply)
    async def passthrough(request: Request, exc: BackendReply):
        return JSONResponse(exc.body, status_code=exc.status)

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as exc:
            raise RequestError(f"request body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise RequestError("request body must be a JSON object")
        return body

    @app.get("/health")
    async def health():
        return {"status": "ok", "ready": ready(), "weights_version": counters.version,
                "backend": backend.name, "start_s": started["start_s"],
                "start_timeout_s": getattr(backend, "start_timeout_s", None)}

    @app.get("/health_generate")
    async def health_generate():
        # Not before the newest synced weights are loaded: the router's health check is this route, so a replica
        # back from a crash gets no traffic while it would still serve the base model.
        if ready() and await backend.health_generate():
            return {"status": "ok"}
        return _error(503, "backend cannot generate yet", "unavailable")

    @app.get("/get_model_info")
    @app.get("/model_info")
    async def model_info():
        return backend.model_info()

    @app.get("/get_server_info")
    @app.get("/server_info")
    async def server_info():
        # SGLang answers its server args here; the router's discovery reads the model and the data-parallel size.
        info = backend.model_info()
        return {"model_path": info.get("model_path"), "tokenizer_path": info.get("tokenizer_path"),
                "served_model_name": backend.served_model, "dp_size": 1, "backend": backend.name,
                "hermes": counters.as_json()}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [
            {"id": name, "object": "model", "owned_by": "hermes-stack", "root": backend.served_model}
            for name in backend.models()
        ]}

    @app.post("/generate")
    async def generate(request: Request):
        # Rendered as it is (GenerateResponse): FastAPI's jsonable_encoder walked every log-prob of the answer and was
        # ~40% of the front's time under rollouts (py-spy, issue 22). The answer is plain JSON types already.
        body = await body_of(request)
        if not isinstance(body.get("stream", False), bool):
            raise RequestError(f"stream: found {body['stream']!r}, expected true or false")
        if body.get("stream") and hasattr(backend, "generate_stream"):
            # SGLang's server-sent events; a bad request is refused before the stream starts (plain JSON)
            return StreamingResponse(backend.generate_stream(body), media_type="text/event-stream")
        return GenerateResponse(await backend.generate(body))

    @app.post("/v1/completions")
    async def completions(request: Request):
        body, stream, usage = streaming_of(await body_of(request))
        answer = await backend.completions(body)
        return sse(completion_stream_chunks(answer, usage)) if stream else answer

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body, stream, usage = streaming_of(await body_of(request))
        answer = await backend.chat_completions(body)
        return sse(chat_stream_chunks(answer, usage)) if stream else answer

    def refused(message: str) -> JSONResponse:
        log.warning("%s", message)
        return JSONResponse({"success": False, "message": message}, status_code=403)

    @app.post("/update_weights_from_disk")
    async def update_weights(request: Request):
        body = await body_of(request)
        if why := outside_data_volume("model_path", body.get("model_path"), data_dir):
            return refused(why)
        answer = await backend.update_weights_from_disk(body)
        if answer.get("success"):
            counters.loaded(Path(str(body.get("model_path"))).name)
        return JSONResponse(answer, status_code=200 if answer.get("success") else 400)

    @app.post("/load_lora_adapter")
    async def load_lora(request: Request):
        body = await body_of(request)
        if why := outside_data_volume("lora_path", body.get("lora_path"), data_dir):
            return refused(why)
        answer = await backend.load_lora_adapter(body)
        if answer.get("success") or "already loaded" in str(answer.get("message", "")):
            counters.loaded(str(body.get("lora_name")))
        return JSONResponse(answer, status_code=200 if answer.get("success") else 400)

    @app.post("/unload_lora_adapter")
    async def unload_lora(request: Request):
        answer = await backend.unload_lora_adapter(await body_of(request))
        return JSONResponse(answer, status_code=200 if answer.get("success") else 400)

    return app

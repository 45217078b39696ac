"""A local service that speaks the Tinker API's wire protocol (tinker SDK 0.38) and trains a small model in torch
behind it (tests.fakes.tinker_policy). A dev tool and test double for the paid Tinker cloud, never the
product's default: the real ServiceClient, TrainingClient and RestClient run unchanged against it.

    TINKER_API_KEY=tml-... python -m tests.fakes.tinker_service --model-dir DIR [--host H] [--port P]
        [--full] [--state-dir D] [--public-url URL]

Every answer is built from, and every JSON request validated against, the SDK's own pydantic types, so a field the
SDK stops sending or renames fails here. What it speaks:
- GET  /api/v1/healthz (no auth; what the engine probes and the container's healthcheck asks)
- POST /api/v1/client/config, /client/dynamic_config, /create_session, /session_heartbeat, /telemetry
- POST /api/v1/create_model, /get_info, /forward_backward (protobuf, optionally zstd), /optim_step,
  /save_weights_for_sampler, /save_weights, /load_weights, /save_weights_external -> an UntypedAPIFuture
- POST /api/v1/retrieve_future: `try_again` for the first `pending_polls` polls of each future, then the result
  (ForwardBackwardOutput as protobuf, the rest as JSON) or a RequestFailedResponse
- GET  /api/v1/training_runs/<run>/checkpoints/external_weights/<name>/external_weights_urls and the "signed" file
  URLs (the Hugging Face/peft files of that checkpoint)
- POST /api/v1/sessions/<id>/finish
Every /api/v1 call but healthz needs X-API-Key == the service's key, else 401 as the real service answers.

Failure knobs (tests): `statuses[path]` (HTTP statuses answered before the real answer, e.g. a transient 503),
`fail_futures[request_type]` (that request's future resolves to a server error), `silent` (from now on every request
is read and never answered: a server that stops answering mid-run), `pending_forever` (futures never resolve).
Without a model directory (`model_dir=None`) it answers with fixed log-probs and trains nothing (protocol tests only).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.types.try_again_response import TryAgainResponse

API = "/api/v1"
EXTERNAL_URLS = re.compile(rf"^{API}/training_runs/(?P<run>[^/]+)/checkpoints/(?P<ckpt>external_weights/[^/]+)"
                           r"/external_weights_urls$")
SIGNED = re.compile(r"^/signed/(?P<token>[0-9a-f]+)/(?P<file>.+)$")
FINISH = re.compile(rf"^{API}/sessions/(?P<session>[^/]+)/finish$")
# Without a model: the files of a minimal adapter, so export paths can be exercised with no torch model at all.
STUB_ADAPTER = {"adapter_config.json": b'{"peft_type": "LORA", "r": 8}', "adapter_model.safetensors": b"\0" * 16}
FIXED_LOGPROB = -0.5
# Sampler weights and downloads are written every step: a long run keeps only the newest few of each per model (the
# cloud keeps them with a TTL; here memory and /tmp are the limit). Training state (save_state) is always kept.
KEEP_PER_KIND = 4


@dataclass
class Call:
    path: str
    body: Any  # the SDK request type (JSON endpoints) or a decoded ForwardBackwardRequest dict
    headers: dict[str, str]


@dataclass
class Pending:
    request_type: str
    result: Any  # a pydantic response, or protobuf bytes for ForwardBackwardOutput
    polls_left: int
    failed: str | None = None


@dataclass
class Model:
    base_model: str
    lora_rank: int
    policy: Any = None  # a tinker_policy.Policy, or None without a model directory
    checkpoints: dict[str, Any] = field(default_factory=dict)  # tinker:// path -> saved state (or None)


def decode_forward_backward(raw: bytes, content_encoding: str | None) -> dict[str, Any]:
    """The protobuf ForwardBackwardRequest as plain Python: loss_fn, loss_fn_config, and per datum its input tokens
    and loss_fn_inputs arrays (with dtype), so tests can assert exactly what crossed the wire."""
    if content_encoding == "zstd":
        import zstandard

        raw = zstandard.ZstdDecompressor().decompress(raw)
    msg = pb.ForwardBackwardRequest()
    msg.ParseFromString(raw)
    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64}
    data = []
    for datum in msg.data:
        tokens = [int(t) for chunk in datum.model_input for t in np.frombuffer(chunk.encoded_text.tokens, np.int32)]
        inputs = {name: {"dtype": np.dtype(dtypes[t.dtype]).name,
                         "values": np.frombuffer(t.dense, dtypes[t.dtype]).tolist(), "shape": list(t.shape)}
                  for name, t in datum.loss_fn_inputs.items()}
        data.append({"tokens": tokens, "loss_fn_inputs": inputs})
    return {"model_id": msg.model_id, "seq_id": msg.seq_id, "forward_only": msg.forward_only, "loss_fn": msg.loss_fn,
            "loss_fn_config": dict(msg.loss_fn_config), "data": data}


def forward_backward_output(per_datum: list[list[float]], metrics: dict[str, float]) -> bytes:
    """A protobuf ForwardBackwardOutput: per-datum log-probs of the target tokens (an ArrayRecord) and the metrics."""
    arrays = [np.asarray(values, np.float32) for values in per_datum]
    offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
    logprobs = pb.BatchedTensor(data=b"".join(a.tobytes() for a in arrays), offsets=offsets.tobytes(),
                                dtype=pb.DTYPE_FLOAT32)
    record = pb.ArrayRecord(type_tag="ArrayRecord", fields={"logprobs": logprobs}, num_datums=len(arrays))
    return pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record],
                                    metrics=metrics).SerializeToString()


class LocalTinker:
    """The service. `with LocalTinker(...) as s:` serves on 127.0.0.1 and a free port (tests, benches)."""

    def __init__(self, api_key: str = "tml-fake-key", *, model_dir: str | Path | None = None, full: bool = False,
                 pending_polls: int = 1, use_pyqwest: bool = True, compress_fwdbwd: bool = False,
                 state_dir: str | Path | None = None, public_url: str | None = None, seed: int | None = 0):
        self.api_key = api_key
        self.model_dir = Path(model_dir) if model_dir else None
        self.full = full
        self.seed = seed
        self.pending_polls = pending_polls
        self.client_config = types.ClientConfigResponse(use_pyqwest_transport=use_pyqwest,
                                                        proto_compress_fwdbwd=compress_fwdbwd)
        self.state_dir = Path(state_dir) if state_dir else None
        self.public_url = public_url
        self.calls: list[Call] = []
        self.unknown: list[str] = []
        self.errors: list[str] = []  # the service's own exceptions: the SDK would retry them away unseen
        self.statuses: dict[str, list[int]] = {}
        self.fail_futures: dict[str, str] = {}
        self.silent = threading.Event()
        self._stopped = threading.Event()
        self.pending_forever = False
        self.sessions: dict[str, str] = {}  # session id -> finish reason ("" while open)
        self.models: dict[str, Model] = {}
        self.compute_s = 0.0  # torch time spent on requests, wall (benches: the SDK round trip is the rest)
        self.compute_cpu_s = 0.0  # the same in CPU seconds of the handling thread (meaningful on a busy machine)
        self._exports: dict[str, Path] = {}  # signed token -> export directory
        self._futures: dict[str, Pending] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="local-tinker-")

    # ---------------------------------------------------------------- lifecycle

    def start(self, host: str = "127.0.0.1", port: int = 0) -> Self:
        self._server = ThreadingHTTPServer((host, port), self.handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()  # a handler held in `silent` mode returns instead of holding the socket
        self._server.shutdown()
        self._server.server_close()
        self._tmp.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return self.public_url or f"http://127.0.0.1:{self.port}"

    def bodies(self, path: str) -> list[Any]:
        """What the SDK sent to `path` (e.g. "/api/v1/optim_step"), in order."""
        with self._lock:
            return [c.body for c in self.calls if c.path == path]

    def paths(self) -> list[str]:
        with self._lock:
            return [c.path for c in self.calls]

    def policy(self, model_id: str) -> Any:
        return self.models[model_id].policy

    # ---------------------------------------------------------------- request handling (server threads, locked)

    def _future(self, request_type: str, result: Any, model_id: str | None = None,
                failed: str | None = None) -> dict[str, Any]:
        request_id = f"req-{next(self._ids)}"
        self._futures[request_id] = Pending(request_type, result, self.pending_polls,
                                            failed or self.fail_futures.get(request_type))
        return types.UntypedAPIFuture(request_id=request_id, model_id=model_id).model_dump(mode="json")

    def _run(self, request_type: str, model_id: str | None, compute: Any) -> dict[str, Any]:
        """Runs the model work now (in request order, as the SDK sends them) and parks its result in a future; a
        failure becomes the future's RequestFailedResponse, as on Tinker."""
        if self.fail_futures.get(request_type):
            return self._future(request_type, None, model_id)
        began, began_cpu = time.perf_counter(), time.thread_time()
        try:
            result = compute()
        except Exception as exc:  # noqa: BLE001 - the client sees it as a failed request, like Tinker's own
            return self._future(request_type, None, model_id, failed=f"{type(exc).__name__}: {exc}")
        finally:
            self.compute_s += time.perf_counter() - began
            self.compute_cpu_s += time.thread_time() - began_cpu
        return self._future(request_type, result, model_id)

    def _retrieve(self, request: types.FutureRetrieveRequest) -> tuple[int, Any]:
        pending = self._futures.get(request.request_id)
        if pending is None:
            return 404, {"detail": f"unknown request {request.request_id}"}
        if pending.polls_left > 0 or self.pending_forever:
            pending.polls_left -= 1
            return 200, TryAgainResponse(request_id=request.request_id, queue_state="active")
        if pending.failed is not None:
            return 200, types.RequestFailedResponse(error=pending.failed, category=types.RequestErrorCategory.Server)
        return 200, pending.result

    def _new_model(self, model_id: str, base_model: str, rank: int, lora: types.LoraConfig | None = None,
                   options: dict[str, bool] | None = None) -> Model:
        """A model with `lora`'s modules (create_model), or a saved state's `options` (a model built from it)."""
        policy = None
        if self.model_dir is not None:
            from .tinker_policy import Policy

            if options is None:
                options = {} if lora is None else {"train_unembed": lora.train_unembed, "train_mlp": lora.train_mlp,
                                                   "train_attn": lora.train_attn}
            seed = lora.seed if lora is not None and lora.seed is not None else self.seed
            policy = Policy(self.model_dir, rank, full=self.full, seed=seed, **options)
        model = Model(base_model, rank, policy)
        self.models[model_id] = model
        return model

    def _save(self, model_id: str, kind: str, name: str, with_optimizer: bool) -> str:
        path = f"tinker://{model_id}/{kind}/{name}"
        policy = self.models[model_id].policy
        state = policy.state(with_optimizer) if policy is not None else None
        self.models[model_id].checkpoints[path] = state
        if kind == "sampler_weights":
            self._prune(model_id, kind)
        if self.state_dir is not None and state is not None and kind == "weights":
            import torch

            self.state_dir.mkdir(parents=True, exist_ok=True)
            torch.save(state, self.state_dir / (re.sub(r"[^A-Za-z0-9_.-]", "_", path) + ".pt"))
        return path

    def _prune(self, model_id: str, kind: str) -> list[Any]:
        """Forget all but the newest KEEP_PER_KIND checkpoints of `kind`; returns what they held."""
        checkpoints = self.models[model_id].checkpoints
        paths = [p for p in checkpoints if p.startswith(f"tinker://{model_id}/{kind}/")]
        return [checkpoints.pop(p) for p in paths[:-KEEP_PER_KIND]]

    def _find_checkpoint(self, path: str) -> Any:
        for model in self.models.values():
            if path in model.checkpoints:
                return model, model.checkpoints[path]
        if self.state_dir is not None:  # saved by an earlier run of this service
            file = self.state_dir / (re.sub(r"[^A-Za-z0-9_.-]", "_", path) + ".pt")
            if file.is_file():
                import torch

                return None, torch.load(file, weights_only=False)
        raise FileNotFoundError(f"checkpoint {path} not found")

    def _forward_backward(self, request: dict[str, Any]) -> bytes:
        data_in = [(d["tokens"], d["loss_fn_inputs"]) for d in request["data"]]
        policy = self.models[request["model_id"]].policy
        if policy is None:  # protocol-only mode
            per_datum = [[FIXED_LOGPROB] * len(inputs["target_tokens"]["values"]) for _, inputs in data_in]
            tokens = sum(len(x) for x in per_datum)
            return forward_backward_output(per_datum, {"loss:sum": 0.5 * tokens, "tokens:sum": float(tokens)})
        from .tinker_policy import DatumIn

        data = []
        for tokens, inputs in data_in:
            missing = {"target_tokens", "logprobs", "advantages"} - set(inputs)
            if missing:
                raise ValueError(f"loss_fn_inputs lack {sorted(missing)} (the {request['loss_fn']} loss needs them)")
            data.append(DatumIn(tokens, [int(v) for v in inputs["target_tokens"]["values"]],
                                inputs["logprobs"]["values"], inputs["advantages"]["values"]))
        per_datum, metrics = policy.forward_backward(data, request["loss_fn"], request["loss_fn_config"] or None,
                                                     request["forward_only"])
        return forward_backward_output(per_datum, metrics)

    def _export(self, model_id: str, name: str) -> types.SaveWeightsExternalResponseInternal:
        path = f"tinker://{model_id}/external_weights/{name}"
        token = uuid.uuid4().hex
        directory = Path(self._tmp.name) / token
        policy = self.models[model_id].policy
        if policy is None:
            directory.mkdir(parents=True)
            for file, content in STUB_ADAPTER.items():
                (directory / file).write_bytes(content)
        else:
            policy.export(directory)
        self._exports[token] = directory
        self.models[model_id].checkpoints[path] = token
        for old in self._prune(model_id, "external_weights"):
            shutil.rmtree(self._exports.pop(old, ""), ignore_errors=True)
        size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
        return types.SaveWeightsExternalResponseInternal(path=path, size_bytes=size)

    def handle_post(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if path == f"{API}/forward_backward":
            request = decode_forward_backward(raw, headers.get("content-encoding"))
            self.calls.append(Call(path, request, headers))
            kind = "Forward" if request["forward_only"] else "ForwardBackward"
            if request["model_id"] not in self.models:
                return 404, {"detail": f"unknown model {request['model_id']}"}
            return 200, self._run(kind, request["model_id"], lambda: self._forward_backward(request))
        body = json.loads(raw or b"{}")
        if match := FINISH.match(path):
            self.calls.append(Call(path, body, headers))
            self.sessions[match["session"]] = body["reason"]["type"]
            return 200, None
        parse = {
            f"{API}/client/config": types.ClientConfigRequest, f"{API}/client/dynamic_config": types.ClientConfigRequest,
            f"{API}/create_session": types.CreateSessionRequest, f"{API}/session_heartbeat": None,
            f"{API}/telemetry": types.TelemetrySendRequest, f"{API}/create_model": types.CreateModelRequest,
            f"{API}/get_info": types.GetInfoRequest, f"{API}/optim_step": types.OptimStepRequest,
            f"{API}/save_weights_for_sampler": types.SaveWeightsForSamplerRequest,
            f"{API}/save_weights": types.SaveWeightsRequest, f"{API}/load_weights": types.LoadWeightsRequest,
            f"{API}/save_weights_external": types.SaveWeightsExternalRequest,
            f"{API}/retrieve_future": types.FutureRetrieveRequest,
        }
        if path not in parse:
            self.unknown.append(f"POST {path}")
            return 404, {"detail": "Not Found"}
        request = parse[path].model_validate(body) if parse[path] else body  # extra or missing fields raise here
        self.calls.append(Call(path, request, headers))
        return self._answer(path, request)

    def _answer(self, path: str, r: Any) -> tuple[int, Any]:
        name = path.removeprefix(API + "/")
        if name == "client/config":
            return 200, self.client_config
        if name == "client/dynamic_config":
            return 200, types.ClientDynamicConfigResponse()
        if name == "create_session":
            session_id = str(uuid.uuid4())
            self.sessions[session_id] = ""
            return 200, types.CreateSessionResponse(session_id=session_id)
        if name == "session_heartbeat":
            return 200, types.SessionHeartbeatResponse()
        if name == "telemetry":
            return 200, types.TelemetryResponse(status="accepted")
        if name == "retrieve_future":
            return self._retrieve(r)
        if name == "create_model":
            model_id = f"{r.session_id}:train:{r.model_seq_id}"
            rank = r.lora_config.rank if r.lora_config else 0

            def create() -> types.CreateModelResponse:
                self._new_model(model_id, r.base_model, rank, r.lora_config)
                return types.CreateModelResponse(model_id=model_id)

            return 200, self._run("CreateModel", model_id, create)
        if r.__class__ is not types.LoadWeightsRequest and getattr(r, "model_id", None) not in self.models:
            return 404, {"detail": f"unknown model {getattr(r, 'model_id', None)}"}
        if name == "get_info":
            model = self.models[r.model_id]
            return 200, types.GetInfoResponse(
                model_id=r.model_id, is_lora=not self.full, lora_rank=model.lora_rank, model_name=model.base_model,
                model_data=types.ModelData(arch="llama", model_name=model.base_model, tokenizer_id=model.base_model))
        if name == "optim_step":
            params = r.optim_params
            if not isinstance(params, types.AdamParams):
                return 200, self._future("OptimStep", None, r.model_id, failed=f"optimizer {params.type} unsupported")
            policy = self.models[r.model_id].policy

            def step() -> types.OptimStepResponse:
                if policy is None:
                    return types.OptimStepResponse(metrics={"grad_norm:mean": 0.25})
                return types.OptimStepResponse(metrics=policy.optim_step(
                    params.learning_rate, params.beta1, params.beta2, params.eps, params.weight_decay,
                    params.grad_clip_norm))

            return 200, self._run("OptimStep", r.model_id, step)
        if name == "save_weights_for_sampler":
            return 200, self._run("SaveWeightsForSampler", r.model_id, lambda: types.SaveWeightsForSamplerResponseInternal(
                path=self._save(r.model_id, "sampler_weights", r.path, with_optimizer=False)))
        if name == "save_weights":
            return 200, self._run("SaveWeights", r.model_id, lambda: types.SaveWeightsResponse(
                path=self._save(r.model_id, "weights", r.path, with_optimizer=True)))
        if name == "save_weights_external":
            return 200, self._run("SaveWeightsExternal", r.model_id, lambda: self._export(r.model_id, r.path))
        if name == "load_weights":
            model_id = r.model_id or f"{r.session_id}:train:{r.model_seq_id}"

            def load() -> types.LoadWeightsResponse:
                source, state = self._find_checkpoint(r.path)
                if model_id not in self.models:
                    base = source.base_model if source else (r.base_model or "")
                    rank = source.lora_rank if source else int(state["lora_rank"]) if state else 0
                    self._new_model(model_id, base, rank, options=(state or {}).get("lora_options"))
                policy = self.models[model_id].policy
                if policy is not None and state is not None:
                    policy.load(state, with_optimizer=r.optimizer)
                return types.LoadWeightsResponse(path=r.path, model_id=model_id)

            return 200, self._run("LoadWeights", model_id, load)
        raise AssertionError(f"no answer for {path}")

    def handle_get(self, path: str, headers: dict[str, str]) -> tuple[int, Any]:
        if match := EXTERNAL_URLS.match(path):
            self.calls.append(Call(path, dict(match.groupdict()), headers))
            run, ckpt = match["run"], match["ckpt"]
            token = self.models.get(run, Model("", 0)).checkpoints.get(f"tinker://{run}/{ckpt}")
            if token not in self._exports:
                return 404, {"detail": f"no checkpoint tinker://{run}/{ckpt}"}
            directory = self._exports[token]
            urls = {str(p.relative_to(directory)): f"{self.base_url}/signed/{token}/{p.relative_to(directory)}"
                    for p in sorted(directory.rglob("*")) if p.is_file()}
            expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
            return 200, types.ExternalWeightsUrlsResponse(urls=urls, expires=expires)
        self.unknown.append(f"GET {path}")
        return 404, {"detail": "Not Found"}

    def signed_file(self, path: str) -> bytes | None:
        match = SIGNED.match(path)
        if not match or match["token"] not in self._exports:
            return None
        directory = self._exports[match["token"]]
        file = (directory / match["file"]).resolve()
        if directory.resolve() not in file.parents or not file.is_file():
            return None
        return file.read_bytes()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: tests and the container log only what matters
                pass

            def _reply(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
                if isinstance(payload, bytes):
                    data, kind = payload, "application/x-protobuf"
                else:
                    if hasattr(payload, "model_dump"):
                        payload = payload.model_dump(mode="json", exclude_none=True)
                    data, kind = json.dumps(payload).encode(), "application/json"
                self.send_response(status)
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _silent(self) -> bool:
                """A server that stopped answering: the request is read, nothing is said until the service stops."""
                if not service.silent.is_set():
                    return False
                service._stopped.wait()
                self.close_connection = True
                return True

            def _gate(self, path: str) -> bool:
                """Auth, then any injected status for this path; True when the request was answered here."""
                if path.startswith("/signed/") or path == f"{API}/healthz":
                    return False
                if self.headers.get("x-api-key") != service.api_key:
                    with service._lock:
                        service.calls.append(Call(path, None, dict(self.headers)))
                    self._reply(401, {"detail": "Invalid API key"})
                    return True
                with service._lock:
                    queued = service.statuses.get(path)
                    status = queued.pop(0) if queued else None
                if status is not None:
                    with service._lock:
                        service.calls.append(Call(path, f"HTTP {status}", dict(self.headers)))
                    # retry-after-ms keeps the SDK's own backoff short (it honours the header).
                    self._reply(status, {"detail": f"injected {status}"}, {"retry-after-ms": "10"})
                    return True
                return False

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if self._silent():
                    return
                if path == f"{API}/healthz":
                    with service._lock:
                        service.calls.append(Call(path, None, dict(self.headers)))
                    self._reply(200, types.HealthResponse(status="ok"))
                    return
                if path.startswith("/signed/"):
                    with service._lock:
                        content = service.signed_file(path)
                    if content is None:
                        self._reply(404, {"detail": "no such file"})
                    else:
                        self._reply_bytes(content)
                    return
                if self._gate(path):
                    return
                self._handle(service.handle_get, path, {k.lower(): v for k, v in self.headers.items()})

            def do_POST(self) -> None:
                path = self.path.split("?")[0]
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self._silent() or self._gate(path):
                    return
                self._handle(service.handle_post, path, {k.lower(): v for k, v in self.headers.items()}, raw)

            def _handle(self, handle: Any, *args: Any) -> None:
                try:
                    with service._lock:
                        status, payload = handle(*args)
                except Exception:  # noqa: BLE001 - recorded for the tests, answered as a server error
                    service.errors.append(traceback.format_exc())
                    status, payload = 500, {"detail": "local tinker service bug"}
                self._reply(status, payload)

            def _reply_bytes(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/octet-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.tinker_service",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--model-dir", type=Path, default=os.environ.get("HERMES_EMBEDDED_MODEL") or None,
                        help="the base model every create_model trains (default: $HERMES_EMBEDDED_MODEL)")
    parser.add_argument("--full", action="store_true", help="train every weight instead of a LoRA adapter")
    parser.add_argument("--state-dir", type=Path, default=None, help="also keep save_state checkpoints here")
    parser.add_argument("--public-url", default=None,
                        help="the root clients reach this service at (the download URLs it hands out)")
    parser.add_argument("--pending-polls", type=int, default=1, help="try_again answers before each result")
    args = parser.parse_args(argv)
    key = os.environ.get("TINKER_API_KEY", "")
    if not key.startswith(("tml-", "eyJ")):
        print("tinker_service: TINKER_API_KEY: expected a key starting tml- (the key clients must send)",
              file=sys.stderr)
        return 2
    if args.model_dir is None or not (Path(args.model_dir) / "config.json").is_file():
        print(f"tinker_service: --model-dir {args.model_dir}: expected a model directory with config.json",
              file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)  # the tiny model gains nothing from threads on a shared CPU
    service = LocalTinker(key, model_dir=args.model_dir, full=args.full, pending_polls=args.pending_polls,
                          state_dir=args.state_dir, public_url=args.public_url)
    service.start(args.host, args.port)
    print(f"local tinker service on {args.host}:{service.port} ({'full weights' if args.full else 'LoRA'} on "
          f"{args.model_dir}); clients set TINKER_BASE_URL={service.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

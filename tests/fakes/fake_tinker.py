"""A Tinker API on a loopback port that speaks the wire protocol of the tinker SDK (0.38): the real ServiceClient,
TrainingClient and RestClient run unchanged against it; only the remote end is fake.

Why a server and not an httpx transport: the SDK builds its own httpx clients inside InternalClientHolder (and by
default on the pyqwest transport), with no transport or http_client option on ServiceClient.

What it speaks (every answer is built from, and every JSON request validated against, the SDK's own pydantic types, so
a field the SDK stops sending or renames fails here):
- GET  /api/v1/healthz (no auth; what the engine probes)
- POST /api/v1/client/config, /client/dynamic_config, /create_session, /session_heartbeat, /telemetry
- POST /api/v1/create_model, /get_info, /forward_backward (protobuf, optionally zstd), /optim_step,
  /save_weights_for_sampler, /save_weights, /load_weights, /save_weights_external -> an UntypedAPIFuture
- POST /api/v1/retrieve_future: `try_again` for the first `pending_polls` polls of each future, then the result
  (ForwardBackwardOutput as protobuf, the rest as JSON) or a RequestFailedResponse
- GET  /api/v1/training_runs/<run>/checkpoints/external_weights/<name>/external_weights_urls and the "signed" file URLs
- POST /api/v1/sessions/<id>/finish
Every /api/v1 call but healthz needs X-API-Key == api_key, else 401 as the real service answers.

Failure knobs: `statuses[path]` (HTTP statuses answered before the real answer, e.g. a transient 503) and
`fail_futures[request_type]` (the future of that request resolves to a server error).
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
import threading
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.types.try_again_response import TryAgainResponse

from fakes.loopback import JsonHandler, LoopbackServer

API = "/api/v1"
EXTERNAL_URLS = re.compile(rf"^{API}/training_runs/(?P<run>[^/]+)/checkpoints/(?P<ckpt>external_weights/[^/]+)"
                           r"/external_weights_urls$")
FINISH = re.compile(rf"^{API}/sessions/(?P<session>[^/]+)/finish$")
ADAPTER_FILES = {"adapter_config.json": b'{"peft_type": "LORA", "r": 8}', "adapter_model.safetensors": b"\0" * 16}


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
    checkpoints: list[str] = field(default_factory=list)


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


def forward_backward_output(request: dict[str, Any]) -> bytes:
    """A protobuf ForwardBackwardOutput: per-datum logprobs of the target tokens (an ArrayRecord) and loss metrics."""
    per_datum = [np.full(len(d["loss_fn_inputs"]["target_tokens"]["values"]), -0.5, np.float32) for d in request["data"]]
    offsets = np.cumsum([0] + [a.nbytes for a in per_datum]).astype(np.int64)
    logprobs = pb.BatchedTensor(data=b"".join(a.tobytes() for a in per_datum), offsets=offsets.tobytes(),
                                dtype=pb.DTYPE_FLOAT32)
    record = pb.ArrayRecord(type_tag="ArrayRecord", fields={"logprobs": logprobs}, num_datums=len(per_datum))
    tokens = sum(len(a) for a in per_datum)
    return pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record],
                                    metrics={"loss:sum": 0.5 * tokens, "tokens:sum": float(tokens)}).SerializeToString()


class FakeTinker(LoopbackServer):
    def __init__(self, api_key: str = "tml-fake-key", pending_polls: int = 1, use_pyqwest: bool = True,
                 compress_fwdbwd: bool = False):
        self.api_key = api_key
        self.pending_polls = pending_polls
        self.client_config = types.ClientConfigResponse(use_pyqwest_transport=use_pyqwest,
                                                        proto_compress_fwdbwd=compress_fwdbwd)
        self.calls: list[Call] = []
        self.unknown: list[str] = []
        self.errors: list[str] = []  # the fake's own exceptions: the SDK would retry them away unseen
        self.statuses: dict[str, list[int]] = {}
        self.fail_futures: dict[str, str] = {}
        self.sessions: dict[str, str] = {}  # session id -> finish reason ("" while open)
        self.models: dict[str, Model] = {}
        self._futures: dict[str, Pending] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bodies(self, path: str) -> list[Any]:
        """What the SDK sent to `path` (e.g. "/api/v1/optim_step"), in order."""
        with self._lock:
            return [c.body for c in self.calls if c.path == path]

    def paths(self) -> list[str]:
        with self._lock:
            return [c.path for c in self.calls]

    # ---------------------------------------------------------------- request handling (server threads)

    def _future(self, request_type: str, result: Any, model_id: str | None = None,
                failed: str | None = None) -> dict[str, Any]:
        request_id = f"req-{next(self._ids)}"
        self._futures[request_id] = Pending(request_type, result, self.pending_polls,
                                            failed or self.fail_futures.get(request_type))
        return types.UntypedAPIFuture(request_id=request_id, model_id=model_id).model_dump(mode="json")

    def _retrieve(self, request: types.FutureRetrieveRequest) -> tuple[int, Any]:
        pending = self._futures.get(request.request_id)
        if pending is None:
            return 404, {"detail": f"unknown request {request.request_id}"}
        if pending.polls_left > 0:
            pending.polls_left -= 1
            return 200, TryAgainResponse(request_id=request.request_id, queue_state="active")
        if pending.failed is not None:
            return 200, types.RequestFailedResponse(error=pending.failed, category=types.RequestErrorCategory.Server)
        return 200, pending.result

    def _checkpoint(self, model_id: str, kind: str, name: str) -> str:
        path = f"tinker://{model_id}/{kind}/{name}"
        self.models[model_id].checkpoints.append(path)
        return path

    def handle_post(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if path == f"{API}/forward_backward":
            request = decode_forward_backward(raw, headers.get("content-encoding"))
            self.calls.append(Call(path, request, headers))
            kind = "Forward" if request["forward_only"] else "ForwardBackward"
            return 200, self._future(kind, forward_backward_output(request), request["model_id"])
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
            self.models[model_id] = Model(r.base_model, r.lora_config.rank if r.lora_config else 0)
            return 200, self._future("CreateModel", types.CreateModelResponse(model_id=model_id), model_id)
        if name == "get_info":
            model = self.models[r.model_id]
            return 200, types.GetInfoResponse(
                model_id=r.model_id, is_lora=True, lora_rank=model.lora_rank, model_name=model.base_model,
                model_data=types.ModelData(arch="qwen3", model_name=model.base_model, tokenizer_id=model.base_model))
        if name == "optim_step":
            return 200, self._future("OptimStep", types.OptimStepResponse(metrics={"grad_norm:mean": 0.25}),
                                     r.model_id)
        if name == "save_weights_for_sampler":
            result = types.SaveWeightsForSamplerResponseInternal(
                path=self._checkpoint(r.model_id, "sampler_weights", r.path))
            return 200, self._future("SaveWeightsForSampler", result, r.model_id)
        if name == "save_weights":
            result = types.SaveWeightsResponse(path=self._checkpoint(r.model_id, "weights", r.path))
            return 200, self._future("SaveWeights", result, r.model_id)
        if name == "save_weights_external":
            result = types.SaveWeightsExternalResponseInternal(
                path=self._checkpoint(r.model_id, "external_weights", r.path), size_bytes=32)
            return 200, self._future("SaveWeightsExternal", result, r.model_id)
        if name == "load_weights":
            source = r.path.removeprefix("tinker://").split("/")[0]
            if source not in self.models or r.path not in self.models[source].checkpoints:
                return 200, self._future("LoadWeights", None, failed=f"checkpoint {r.path} not found")
            model_id = r.model_id or f"{r.session_id}:train:{r.model_seq_id}"
            self.models.setdefault(model_id, Model(self.models[source].base_model, self.models[source].lora_rank))
            return 200, self._future("LoadWeights", types.LoadWeightsResponse(path=r.path, model_id=model_id),
                                     model_id)
        raise AssertionError(f"no answer for {path}")

    def handle_get(self, path: str, headers: dict[str, str]) -> tuple[int, Any]:
        if match := EXTERNAL_URLS.match(path):
            self.calls.append(Call(path, dict(match.groupdict()), headers))
            urls = {name: f"{self.base_url}/signed/{match['run']}/{match['ckpt']}/{name}" for name in ADAPTER_FILES}
            expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
            return 200, types.ExternalWeightsUrlsResponse(urls=urls, expires=expires)
        self.unknown.append(f"GET {path}")
        return 404, {"detail": "Not Found"}

    def handler(self) -> type[JsonHandler]:
        fake = self

        class Handler(JsonHandler):
            def _reply(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
                if isinstance(payload, bytes):  # protobuf result
                    self.send_response(status)
                    self.send_header("content-type", "application/x-protobuf")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if hasattr(payload, "model_dump"):
                    payload = payload.model_dump(mode="json", exclude_none=True)
                data = json.dumps(payload).encode()
                self.send_response(status)
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _gate(self, path: str) -> bool:
                """Auth, then any injected status for this path; True when the request was answered here."""
                if path.startswith("/signed/") or path == f"{API}/healthz":
                    return False
                if self.headers.get("x-api-key") != fake.api_key:
                    with fake._lock:
                        fake.calls.append(Call(path, None, dict(self.headers)))
                    self._reply(401, {"detail": "Invalid API key"})
                    return True
                with fake._lock:
                    queued = fake.statuses.get(path)
                    status = queued.pop(0) if queued else None
                if status is not None:
                    with fake._lock:
                        fake.calls.append(Call(path, f"HTTP {status}", dict(self.headers)))
                    # retry-after-ms keeps the SDK's own backoff short (it honours the header).
                    self._reply(status, {"detail": f"injected {status}"}, {"retry-after-ms": "10"})
                    return True
                return False

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == f"{API}/healthz":
                    with fake._lock:
                        fake.calls.append(Call(path, None, dict(self.headers)))
                    self._reply(200, types.HealthResponse(status="ok"))
                    return
                if path.startswith("/signed/"):
                    name = path.rsplit("/", 1)[-1]
                    self._reply_bytes(ADAPTER_FILES[name])
                    return
                if self._gate(path):
                    return
                self._answer(fake.handle_get, path, {k.lower(): v for k, v in self.headers.items()})

            def do_POST(self) -> None:
                path = self.path.split("?")[0]
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self._gate(path):
                    return
                self._answer(fake.handle_post, path, {k.lower(): v for k, v in self.headers.items()}, raw)

            def _answer(self, handle: Any, *args: Any) -> None:
                try:
                    with fake._lock:
                        status, payload = handle(*args)
                except Exception:  # noqa: BLE001 - recorded for the test, answered as a server error
                    fake.errors.append(traceback.format_exc())
                    status, payload = 500, {"detail": "fake tinker bug"}
                self._reply(status, payload)

            def _reply_bytes(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/octet-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

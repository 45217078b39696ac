"""A fake TaoToken gateway: a real HTTP server on loopback speaking OpenAI chat-completions and Anthropic messages.

Like the real one it checks the key (Bearer for the OpenAI shape, x-api-key for the Anthropic shape) and answers 401
for a wrong key, and 404 for any path with a doubled /v1 (`/v1/v1/...`) or an unknown path.
`reply(text_of_last_user_message, body) -> str` decides the answer; every request is recorded (without headers).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

Reply = Callable[[str, dict], str]


def _default_reply(prompt: str, body: dict) -> str:
    return "OK"


@dataclass
class FakeGateway:
    api_key: str = "sk-fake-gateway-key-0123456789"
    reply: Reply = _default_reply
    models: tuple[str, ...] = ("fake-gpt", "claude-fake")
    requests: list[dict] = field(default_factory=list)
    fail_with: int | None = None  # answer every call with this status (e.g. 500) when set

    def start(self) -> FakeGateway:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                path = self.path.split("?")[0]
                gateway.requests.append({"method": method, "path": path, "body": body})
                if "/v1/v1" in path:
                    return self._send(404, {"error": {"message": f"no route {path}"}})
                if path in ("/v1/models", "/v1/chat/completions"):
                    if self.headers.get("authorization") != f"Bearer {gateway.api_key}":
                        return self._send(401, {"error": {"message": "invalid api key"}})
                elif path == "/v1/messages":
                    if self.headers.get("x-api-key") != gateway.api_key:
                        return self._send(401, {"type": "error", "error": {"type": "authentication_error"}})
                else:
                    return self._send(404, {"error": {"message": f"no route {path}"}})
                if gateway.fail_with:
                    return self._send(gateway.fail_with, {"error": {"message": "injected failure"}})
                if path == "/v1/models" and method == "GET":
                    return self._send(200, {"object": "list", "data": [{"id": m} for m in gateway.models]})
                messages = body.get("messages") or []
                prompt = str(messages[-1].get("content", "")) if messages else ""
                text = gateway.reply(prompt, body)
                if path == "/v1/chat/completions":
                    return self._send(200, {
                        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}],
                    })
                return self._send(200, {
                    "id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"),
                    "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                })

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

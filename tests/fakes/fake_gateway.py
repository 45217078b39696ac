"""A fake TaoToken gateway: a real HTTP server on loopback speaking OpenAI chat-completions and Anthropic messages.

Like the real one it checks the key (Bearer for the OpenAI shape, x-api-key for the Anthropic shape) and answers 401
for a wrong key, and 404 for any path with a doubled /v1 (`/v1/v1/...`) or an unknown path.
`reply(text_of_last_user_message, body) -> str` decides the answer; every request is recorded (without headers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fakes.loopback import JsonHandler, LoopbackServer

Reply = Callable[[str, dict], str]


def _default_reply(prompt: str, body: dict) -> str:
    return "OK"


@dataclass
class FakeGateway(LoopbackServer):
    api_key: str = "sk-fake-gateway-key-0123456789"
    reply: Reply = _default_reply
    models: tuple[str, ...] = ("fake-gpt", "claude-fake")
    requests: list[dict] = field(default_factory=list)
    fail_with: int | None = None  # answer every call with this status (e.g. 500) when set

    def handler(self) -> type[JsonHandler]:
        gateway = self

        class Handler(JsonHandler):
            def _handle(self, method: str) -> None:
                body = self.read_json()
                path = self.path.split("?")[0]
                gateway.requests.append({"method": method, "path": path, "body": body})
                if "/v1/v1" in path:
                    return self.send_json(404, {"error": {"message": f"no route {path}"}})
                if path in ("/v1/models", "/v1/chat/completions"):
                    if self.headers.get("authorization") != f"Bearer {gateway.api_key}":
                        return self.send_json(401, {"error": {"message": "invalid api key"}})
                elif path == "/v1/messages":
                    if self.headers.get("x-api-key") != gateway.api_key:
                        return self.send_json(401, {"type": "error", "error": {"type": "authentication_error"}})
                else:
                    return self.send_json(404, {"error": {"message": f"no route {path}"}})
                if gateway.fail_with:
                    return self.send_json(gateway.fail_with, {"error": {"message": "injected failure"}})
                if path == "/v1/models" and method == "GET":
                    return self.send_json(200, {"object": "list", "data": [{"id": m} for m in gateway.models]})
                messages = body.get("messages") or []
                prompt = str(messages[-1].get("content", "")) if messages else ""
                text = gateway.reply(prompt, body)
                if path == "/v1/chat/completions":
                    return self.send_json(200, {
                        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}],
                    })
                return self.send_json(200, {
                    "id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"),
                    "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                })

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

        return Handler

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

"""What every fake HTTP service in the tests shares: a ThreadingHTTPServer on a loopback port, run on a daemon
thread, usable as a context manager, and a handler base that answers JSON and keeps pytest output clean."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


def free_port() -> int:
    """A loopback port nothing listens on once this returns (the one free-port helper of the tests)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_json(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}


class LoopbackServer:
    """Subclasses implement handler() -> a JsonHandler subclass; start() serves it on 127.0.0.1 (port 0 picks one)."""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def start(self, port: int = 0, host: str = "127.0.0.1") -> Self:
        # host "0.0.0.0" only inside a container of the project (the Docker tier's fake gateway)
        self._server = ThreadingHTTPServer((host, port), self.handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

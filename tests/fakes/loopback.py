"""What every fake HTTP service in the tests shares: a ThreadingHTTPServer on a loopback port, run on a daemon
thread, usable as a context manager, and a handler base that answers JSON and keeps pytest output clean."""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

# free_port hands out ports below the kernel's ephemeral range (32768 and up on Linux), from a band of this pytest-xdist
# worker's own, in turn. A port the kernel gave (bind to 0) was free again once returned, so another worker's server
# could take it meanwhile: in CI a test's "nothing listens there" port answered, and a recorder got another test's
# requests. Now a port the kernel hands out is never one of these, and two workers never share one.
_BAND, _BANDS_FROM = 1500, 20000
_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
_LOW = _BANDS_FROM + (int(_worker) % 8 if _worker.isdigit() else 0) * _BAND
_next = itertools.count(random.randrange(_BAND))


def free_port() -> int:
    """A loopback port nothing listens on once this returns (the one free-port helper of the tests)."""
    for _ in range(_BAND):
        port = _LOW + next(_next) % _BAND
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use (a server of this worker's, or another program's)
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_LOW}..{_LOW + _BAND - 1}")


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

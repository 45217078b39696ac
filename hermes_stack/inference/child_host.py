"""A `ModelHost` in a child process, driven over a pipe: the built-in server's sampler off the front's interpreter.

Why a process (issue 22): in one process the front's event loop (reading requests, encoding streamed answers) and the
sampler share one interpreter lock. torch releases the lock inside each op, so whenever the event loop has work it
takes the lock and the sampler, which needs it back microseconds later, waits for the event loop's whole burst: the
two run in series even on two cores. A Python burst of 13 % of a core beside the sampler slowed a 256-row batch by
13 ms in a thread and by 2 ms in another process (docs/benchmarks.md). SGLang splits its server the same way: the
HTTP front and tokenizer manager in one process, the scheduler that owns the model in another (its
`launch_server`), talking over sockets.

The protocol is pickled tuples on a multiprocessing Pipe.
- Parent to child: ("sample", job, rows, adapter, streamed), ("call", id, method, args) for reload, load_adapter and
  unload_adapter, ("stop",).
- Child to parent: ("ready", facts) or ("failed", message) once; ("rows", job, pairs) for a streamed job's rows as
  they end; ("done", job, results) (None for a streamed job: its rows came already); ("error", job, message);
  ("return", id, value, facts) or ("raise", id, message, facts).

The child exits when its pipe closes (the parent has gone); the parent calls `on_fatal` when the child goes without
being stopped (the service then exits, and its container restarts, as when SGLang's child dies: sglang.py).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import threading
import time
from concurrent.futures import Future
from typing import Any

from hermes_stack.inference.backend import BackendReply
from hermes_stack.inference.model_host import HostFacts
from hermes_stack.inference.torch_sampler import Row

log = logging.getLogger("hermes.inference")

CALLS = ("reload", "load_adapter", "unload_adapter")


class SamplerGone(RuntimeError):
    """The child process ended while a request or call waited on it."""


class ChildHost:
    """`ModelHost`'s interface (facts, start, stop, is_alive, submit, busy_for, reload, load_adapter, unload_adapter)
    over a spawned child that runs one. Blocking methods block the calling thread only (the front calls them through
    asyncio.to_thread); `submit` never blocks on the child."""

    # spawn runs the parent's main module again in the child under another name: a script that starts one must keep
    # its work under `if __name__ == "__main__":` (python -m hermes_stack.inference does).
    def __init__(self, model_path: str, device: str = "cpu", max_batch_rows: int = 512, seed: int | None = None,
                 log_level: str = "INFO", on_fatal=None):
        self.model_path = str(model_path)
        self.device = device
        self.max_batch_rows = max_batch_rows
        self.seed = seed
        self.log_level = log_level
        self.on_fatal = on_fatal
        # spawn, not fork: the parent has torch's thread pools and (on a GPU) CUDA state a fork cannot carry.
        self._context = multiprocessing.get_context("spawn")
        self._busy = self._context.Value("d", 0.0, lock=False)
        self._process = None
        self._conn = None
        self._reader: threading.Thread | None = None
        self._send_lock = threading.Lock()
        self._pending: dict[int, tuple[Future, Any, list]] = {}  # job -> (future, emit, rows streamed so far)
        self._calls: dict[int, Future] = {}
        self._ids = itertools.count(1)  # job and call ids (next() on a count is atomic under the GIL)
        self._stopping = False
        self._facts: HostFacts | None = None

    def facts(self) -> HostFacts:
        if self._facts is None:
            raise BackendReply(503, {"error": {"message": "the sampler process is not started", "type": "unavailable"}})
        return self._facts

    # ------------------------------------------------------------------ lifecycle

    def is_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    def start(self) -> None:
        if self._process is not None:
            return
        parent, child = self._context.Pipe()
        self._process = self._context.Process(
            target=child_main, name="builtin-sampler", daemon=True,
            args=(child, self.model_path, self.device, self.max_batch_rows, self.seed, self.log_level, self._busy))
        self._process.start()
        child.close()  # the parent's copy: the child's end closes when the child exits, and recv() sees EOF
        self._conn = parent
        while not parent.poll(1.0):
            if not self._process.is_alive():
                raise RuntimeError(f"the sampler process exited while starting (exit code {self._process.exitcode})")
        try:
            message = parent.recv()
        except EOFError:
            self._process.join(10)
            message = ("failed", f"it exited while starting (exit code {self._process.exitcode})")
        if message[0] != "ready":
            self._process.join(10)
            raise RuntimeError(f"the sampler process could not start: {message[1]}")
        self._facts = message[1]
        self._reader = threading.Thread(target=self._read, name="builtin-sampler-pipe", daemon=True)
        self._reader.start()

    def stop(self) -> None:
        if self._process is None:
            return
        self._stopping = True
        try:
            self._send(("stop",))
        except (OSError, SamplerGone):
            pass
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        if self._reader is not None:
            self._reader.join(5)
        self._conn.close()
        self._process = self._reader = self._conn = None
        self._stopping = False

    # ------------------------------------------------------------------ sampling

    def submit(self, rows: list[Row], adapter: str | None, emit=None) -> Future:
        future: Future = Future()
        job = next(self._ids)
        self._pending[job] = (future, emit, [])
        try:
            self._send(("sample", job, rows, adapter, emit is not None))
        except (OSError, SamplerGone) as exc:
            self._pending.pop(job, None)
            future.set_exception(_unavailable(f"the sampler process is gone ({exc})"))
        return future

    def busy_for(self, now: float | None = None) -> float | None:
        since = self._busy.value
        return None if not since else (time.monotonic() if now is None else now) - since

    # ------------------------------------------------------------------ weights

    def reload(self, path: str) -> str | None:
        return self._call("reload", path)

    def load_adapter(self, name: str, path: str) -> None:
        self._call("load_adapter", name, path)

    def unload_adapter(self, name: str) -> None:
        self._call("unload_adapter", name)

    # ------------------------------------------------------------------ the pipe

    def _send(self, message: tuple) -> None:
        if self._conn is None:
            raise SamplerGone("the sampler process is not started")
        with self._send_lock:
            self._conn.send(message)

    def _call(self, method: str, *args) -> Any:
        future: Future = Future()
        call = next(self._ids)
        self._calls[call] = future
        try:
            self._send(("call", call, method, args))
        except (OSError, SamplerGone) as exc:
            self._calls.pop(call, None)
            raise SamplerGone(f"the sampler process is gone ({exc})") from exc
        return future.result()

    def _read(self) -> None:
        conn = self._conn
        try:
            while True:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    break
                except Exception:  # an answer that cannot be read: the pipe can no longer be trusted
                    log.exception("the sampler's pipe sent what could not be read")
                    break
                try:
                    self._dispatch(message)
                except Exception:  # one request's bad ending must not end the pipe every request shares
                    log.exception("the sampler's answer %r could not be delivered", message[0])
        finally:
            self._gone()

    def _dispatch(self, message: tuple) -> None:
        kind = message[0]
        if kind == "rows":
            _, job, pairs = message
            _future, emit, streamed = self._pending[job]
            streamed.extend(pairs)
            emit(pairs)
        elif kind == "done":
            _, job, results = message
            future, _emit, streamed = self._pending.pop(job)
            if results is None:
                results = [generated for _, generated in sorted(streamed, key=lambda pair: pair[0])]
            _settle(future, result=results)
        elif kind == "error":
            _, job, text = message
            _settle(self._pending.pop(job)[0], error=RuntimeError(text))
        elif kind in ("return", "raise"):
            _, call, value, facts = message
            self._facts = facts
            future = self._calls.pop(call)
            if kind == "return":
                _settle(future, result=value)
            else:
                _settle(future, error=RuntimeError(value))

    def _gone(self) -> None:
        process = self._process
        if process is not None:
            process.join(5)  # its pipe closes as it exits; reaped, it has an exit code to name
        code = process.exitcode if process is not None else None
        reason = f"the sampler process exited (exit code {code})" if code is not None else "the sampler process exited"
        for future, _emit, _rows in list(self._pending.values()):
            _settle(future, error=_unavailable(reason))
        for future in list(self._calls.values()):
            _settle(future, error=SamplerGone(reason))
        self._pending.clear()
        self._calls.clear()
        if not self._stopping and self.on_fatal is not None:
            self.on_fatal(reason)


def _settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Give a waiting future its outcome, unless its caller gave up on it (cancelled)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _unavailable(message: str) -> BackendReply:
    return BackendReply(503, {"error": {"message": message, "type": "unavailable"}})


def child_main(conn, model_path: str, device: str, max_batch_rows: int, seed: int | None, log_level: str,
               busy) -> None:
    """The child: one ModelHost, its worker thread sampling, this thread reading the pipe. Calls run in their own
    threads, so a reload loads while a batch samples, as in one process."""
    import signal

    from hermes_stack.service_log import setup_logging

    # Ctrl-C reaches the whole process group: the parent stops the child ("stop", or its pipe closing), so the child
    # does not die first and look like a crash.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setup_logging(log_level)
    send_lock = threading.Lock()

    def send(message: tuple) -> None:
        with send_lock:
            conn.send(message)

    try:
        from hermes_stack.inference.model_host import ModelHost

        host = ModelHost(model_path, device=device, max_batch_rows=max_batch_rows, seed=seed, busy_cell=busy)
        host.start()
    except Exception as exc:  # noqa: BLE001 - said to the parent, which raises it where the service starts
        send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    from hermes_stack.service_heap import freeze_startup_heap

    freeze_startup_heap("inference sampler")  # the model stays for the run; a batch's objects do not
    send(("ready", host.facts()))

    def sampled(job: int, streamed: bool):
        def done(future: Future) -> None:
            exc = future.exception()
            if exc is not None:
                send(("error", job, f"{type(exc).__name__}: {exc}"))
            else:
                send(("done", job, None if streamed else future.result()))
        return done

    def called(call: int, method: str, args: tuple) -> None:
        try:
            outcome = ("return", getattr(host, method)(*args))
        except Exception as exc:  # noqa: BLE001 - the parent's call raises it
            outcome = ("raise", f"{type(exc).__name__}: {exc}")
        # The snapshot is taken under the send lock: calls end in their own threads, and the parent keeps the last
        # snapshot it reads, which must then be the newest.
        with send_lock:
            try:
                conn.send((outcome[0], call, outcome[1], host.facts()))
            except Exception as exc:  # noqa: BLE001 - a value that does not pickle: the call still ends
                conn.send(("raise", call, f"the answer could not be sent: {type(exc).__name__}: {exc}",
                           host.facts()))

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent has gone
            break
        if message[0] == "stop":
            break
        if message[0] == "sample":
            _, job, rows, adapter, streamed = message
            emit = (lambda pairs, job=job: send(("rows", job, pairs))) if streamed else None
            host.submit(rows, adapter, emit).add_done_callback(sampled(job, streamed))
        elif message[0] == "call" and message[2] in CALLS:
            _, call, method, args = message
            threading.Thread(target=called, args=(call, method, args), daemon=True).start()
    host.stop()

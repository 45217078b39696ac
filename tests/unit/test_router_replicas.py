"""The pinned router (sglang-router) in front of two built-in replicas on loopback, with the stack's own router
command line: it registers them with the routes our front answers, spreads requests over both, the trainer's push
reaches both past it, and after a kill -9 of one replica the push skips it, traffic goes on through the other, and
the restarted replica loads the newest weights itself and serves on them. The Docker tier runs the same in compose
(tests/docker/test_replicas.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest
from fakes.loopback import free_port

from hermes_stack.router.args import CIRCUIT_RETRY_S, router_argv
from hermes_stack.trainer.weights_sync import InferenceClient
from tests.fakes.fixture_model import build_fixture_model

pytestmark = pytest.mark.slow
KEY = "router-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SERVER = """
import sys, uvicorn
from pathlib import Path
from hermes_stack.inference.builtin import BuiltinBackend
from hermes_stack.inference.server import create_app
app = create_app(BuiltinBackend(sys.argv[1], served_model="tiny"), sys.argv[3], data_dir=Path(sys.argv[4]))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), access_log=False, log_level="warning")
"""




def counters(url: str) -> dict | None:
    try:
        return httpx.get(f"{url}/get_server_info", headers=AUTH, timeout=3).json()["hermes"]
    except (httpx.HTTPError, ValueError, KeyError):
        return None


def wait_for(predicate, what: str, bound_s: float = 120.0):
    deadline = time.monotonic() + bound_s
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"{what}: not within {bound_s:.0f} s"
        time.sleep(0.3)
    return result


def test_two_replicas_behind_the_router_survive_a_kill_and_return_on_the_newest_weights(tmp_path):
    pytest.importorskip("sglang_router")
    model, data = build_fixture_model(tmp_path / "model"), tmp_path / "data"
    ports = [free_port(), free_port()]
    urls = tuple(f"http://127.0.0.1:{p}" for p in ports)

    def replica(port: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", SERVER, str(model), str(port), KEY, str(data)],
                                stderr=subprocess.DEVNULL)

    procs = [replica(p) for p in ports]
    try:
        for url in urls:
            wait_for(lambda url=url: counters(url), f"replica {url}")
        port = free_port()
        argv = router_argv(urls, port, "WARNING")
        argv[argv.index("0.0.0.0")] = "127.0.0.1"
        procs.append(subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", *argv, "--api-key", KEY,
                                       "--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1",
                                       "--health-check-interval-secs", "1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        router = f"http://127.0.0.1:{port}"

        def healthy(n: int):
            try:
                return httpx.get(f"{router}/readiness", timeout=2).json().get("healthy_workers") == n
            except (httpx.HTTPError, ValueError):
                return False

        wait_for(lambda: healthy(2), "the router with two healthy workers")
        client = InferenceClient(f"{router}/v1", KEY, replica_urls=urls)

        def push(step: int) -> dict:
            build_fixture_model(data / "weights" / f"step-{step}", seed=step)
            return client.push_weights(data / "weights" / f"step-{step}", step)

        def generate(n: int) -> None:
            for _ in range(n):
                httpx.post(f"{router}/v1/completions", headers=AUTH, timeout=60,
                           json={"model": "tiny", "prompt": "1+1=", "max_tokens": 2}).raise_for_status()

        assert push(1)["loaded"] == list(urls)
        generate(6)
        first = [counters(u) for u in urls]
        assert [c["weights_version"] for c in first] == ["step-1", "step-1"]
        assert all(c["served_by_version"].get("step-1", 0) > 0 for c in first), first  # both served the step

        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(timeout=10)
        answer = push(2)
        assert answer["loaded"] == [urls[0]] and answer["skipped"] == [urls[1]]
        generate(24)  # the router routes around the dead replica (its retries, then its health checks); its
        assert counters(urls[0])["served_by_version"]["step-2"] >= 24  # circuit breaker opens on the failures

        procs.append(replica(ports[1]))  # back from the crash: it loads weights/step-2 before it is ready
        back = wait_for(lambda: counters(urls[1]), "the restarted replica")
        assert back["weights_version"] == "step-2"
        wait_for(lambda: healthy(2), "the router taking the restarted replica back")

        def served_by_the_restarted() -> bool:
            generate(2)
            return counters(urls[1])["served_by_version"].get("step-2", 0) > 0

        # Traffic within the breaker's retry time (CIRCUIT_RETRY_S) and a margin, not sglang-router's default 60 s:
        # a review saw a restarted replica, healthy and on the newest weights, serve nothing for a minute.
        wait_for(served_by_the_restarted, "the restarted replica serving again", bound_s=CIRCUIT_RETRY_S + 25)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=30)

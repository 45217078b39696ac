"""Rollout throughput with 1 and with 2 inference replicas behind SGLang's router, for the same batch. Prints
figures; asserts nothing.

    python bench/replicas.py [--requests 32] [--max-tokens 32] [--concurrency 16] [--hidden 256] [--layers 4]

Each replica is the stack's own built-in inference server (hermes_stack.inference.server.create_app on a
BuiltinBackend, one process each, torch on CPU with 1 thread) on loopback; the router is the pinned sglang-router
with the stack's own command line (hermes_stack/router/args.py). The model is a random tiny Llama
(tests/fakes/fixture_model.py) of the given size. The batch: `--requests` /v1/completions with `--max-tokens`
tokens each (ignore_eos, so every request generates exactly that many), sent `--concurrency` at a time through the
router, as the environment sends a step's rollouts. On a 2-core machine two replicas share the same two cores: no
gain is expected; the figure is for the record and for GPU users (one GPU per replica).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
KEY = "bench-replicas-key"

SERVER = """
import sys, uvicorn
from hermes_stack.inference.builtin import BuiltinBackend
from hermes_stack.inference.server import create_app
app = create_app(BuiltinBackend(sys.argv[1], served_model="bench"), sys.argv[3], data_dir=None)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), access_log=False, log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, path: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + path, headers={"Authorization": f"Bearer {KEY}"}, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url}{path} not ready within {timeout_s:.0f} s")


def start_stack(model: Path, replicas: int, procs: list[subprocess.Popen]) -> tuple[str, list[subprocess.Popen]]:
    """Start the replicas and the router; every process goes into `procs` at once, so the caller stops them even
    when a start fails."""
    from hermes_stack.router.args import router_argv

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    workers = []
    for _ in range(replicas):
        port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-c", SERVER, str(model), str(port), KEY], env=env))
        workers.append(f"http://127.0.0.1:{port}")
    for url in workers:
        wait_ready(url, "/health_generate")
    port = free_port()
    argv = router_argv(tuple(workers), port, "WARNING")
    argv[argv.index("0.0.0.0")] = "127.0.0.1"
    # Its Prometheus exporter's own port (default 29000): one per container in compose, one per run here.
    argv += ["--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"]
    procs.append(subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", *argv, "--api-key", KEY],
                                  env=env, stdout=subprocess.DEVNULL))
    router = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            body = httpx.get(router + "/readiness", timeout=2).json()
            if body.get("healthy_workers") == replicas:
                return router, procs
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"router {router}: {replicas} healthy workers not reported within 60 s")


def run_batch(router: str, requests: int, max_tokens: int, concurrency: int) -> tuple[float, int]:
    body = {"model": "bench", "max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True}
    with httpx.Client(base_url=router, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as http:
        def one(i: int) -> int:
            answer = http.post("/v1/completions", json={**body, "prompt": f"{i % 10}+{i % 7}="})
            answer.raise_for_status()
            return int(answer.json()["usage"]["completion_tokens"])

        one(0)  # warm-up (first request per process pays torch's start)
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            tokens = sum(pool.map(one, range(requests)))
        return time.perf_counter() - start, tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    from tests.fakes.fixture_model import build_fixture_model

    with tempfile.TemporaryDirectory() as tmp:
        model = build_fixture_model(Path(tmp) / "model", hidden=args.hidden, layers=args.layers)
        print(f"batch: {args.requests} completions x {args.max_tokens} tokens, {args.concurrency} in flight, "
              f"through sglang-router (round_robin); model: random Llama hidden {args.hidden}, {args.layers} layers; "
              f"{os.cpu_count()} CPU cores")
        print("| replicas | wall s | completion tokens | tokens/s | requests/s |")
        print("|---|---|---|---|---|")
        for replicas in (1, 2):
            procs: list[subprocess.Popen] = []
            try:
                router, procs = start_stack(model, replicas, procs)
                seconds, tokens = run_batch(router, args.requests, args.max_tokens, args.concurrency)
            finally:
                for p in procs:
                    p.terminate()
                for p in procs:
                    p.wait(timeout=30)
            print(f"| {replicas} | {seconds:.2f} | {tokens} | {tokens / seconds:.1f} | {args.requests / seconds:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()

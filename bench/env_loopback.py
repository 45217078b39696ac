"""The environment's rollout rate without Docker: the real run-api, the built-in inference service and the
environment service as processes on 127.0.0.1, with the shipped configs (embedded profile), and a trainer stand-in
that registers, takes each batch from /batch, "trains" for --train-s seconds and then writes the served step as the
trainer does after a push (no weights change).

    .venv/bin/python bench/env_loopback.py [--algo grpo] [--batches 20] [--train-s 0.5] [--burn] [--reload] [--py-spy 20]

--burn: the stand-in holds a core while it "trains" (a busy loop), as the trainer does, instead of sleeping.
--reload: after each batch it has the server load weights from disk (the same ones), as the trainer's push does.

Prints the batches' rate (sequences taken per second of wall time), the stand-in's mean wait per batch, and the
environment's own rollout rate from its batch lines (env.py: sequences generated, dropped ones included, per second
during which it had groups in flight). --py-spy N records the environment for N seconds (py-spy on PATH or next to
the Python) and prints its hottest frames. Traffic stays on loopback; nothing outside this machine is started.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
ROLLOUT_RATE = re.compile(r"rollout rate ([0-9.]+) sequences/s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what}: not up after {timeout_s:.0f} s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def py_spy_binary() -> str | None:
    return shutil.which("py-spy") or next((str(p) for p in (BIN / "py-spy",) if p.exists()), None)


def hottest(collapsed: Path, top: int = 25, leaf: bool = False) -> list[tuple[float, str]]:
    """(share of samples, frame) for the frames most often on the stack (inclusive), or with `leaf` most often
    running themselves (the innermost frame), from py-spy's raw format."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        frames = stack.split(";")
        for frame in (frames[-1:] if leaf else set(frames)):
            counts[frame] += int(n)
    return [(c / max(1, total), f) for f, c in counts.most_common(top)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("grpo", "ppo"), default="grpo")
    parser.add_argument("--batches", type=int, default=20, help="batches measured after --skip")
    parser.add_argument("--skip", type=int, default=3)
    parser.add_argument("--train-s", type=float, default=0.5, help="the stand-in's training time per batch")
    parser.add_argument("--burn", action="store_true",
                        help="the stand-in holds a core while it trains (a busy loop) instead of sleeping")
    parser.add_argument("--reload", action="store_true", help="the stand-in pushes weights each batch")
    parser.add_argument("--py-spy", type=float, default=0.0, help="seconds of py-spy on the environment")
    parser.add_argument("--py-spy-target", choices=("environment", "inference"), default="environment")
    parser.add_argument("--root", type=Path, default=ROOT,
                        help="the checkout whose services run (its .venv when it has one): a before/after pair")
    parser.add_argument("--keep-logs", type=Path, help="copy the services' logs (and py-spy's record) into this folder")
    args = parser.parse_args(argv)
    from hermes_stack.config.loader import load_stack
    from hermes_stack.environment.rollout_clock import rate_from_log
    from hermes_stack.modelcore.embedded import build as build_embedded
    from hermes_stack.modelcore.weights_layout import write_served_step

    root = args.root.resolve()
    python = str(root / ".venv" / "bin" / "python") if (root / ".venv" / "bin" / "python").exists() \
        else sys.executable
    stack = load_stack(args.algo, root / "configs", profile="embedded")
    rollout = stack.config.rollout
    sequences = rollout.sequences_per_step
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build_embedded(tmp / "embedded", seed=0)
        api_port, inf_port = free_port(), free_port()
        atropos, inference = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{inf_port}"
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("TAOTOKEN_", "WANDB_"))}
        environ.update(HERMES_ALGO=args.algo, HERMES_CONFIG_DIR=str(root / "configs"), HERMES_PROFILE="embedded",
                       HERMES_EMBEDDED_MODEL=str(tmp / "embedded"), HERMES_INFERENCE_KEY="loopback-bench",
                       HERMES_INFERENCE_PORT=str(inf_port), HERMES_INFERENCE_HOST="127.0.0.1",
                       HERMES_ATROPOS_URL=atropos, HERMES_INFERENCE_URL=inference + "/v1",
                       HERMES_DATA_DIR=str(tmp / "data"), HERMES_KEYFILE=str(tmp / "absent"),
                       PYTHONPATH=str(root))
        logs = {name: open(tmp / f"{name}.log", "w")  # noqa: SIM115 - closed in the finally below
                for name in ("api", "inference", "environment")}

        def start(name: str, argv: list[str]) -> subprocess.Popen:
            proc = subprocess.Popen(argv, env=environ, cwd=tmp, stdout=logs[name], stderr=subprocess.STDOUT)
            procs.append(proc)
            return proc

        try:
            api = start("api", [str(Path(python).parent / "run-api"), "--host", "127.0.0.1", "--port", str(api_port)])
            inf = start("inference", [python, "-m", "hermes_stack.inference"])
            wait_up(atropos + "/", api, "run-api")
            wait_up(inference + "/health", inf, "inference")
            registration = {"wandb_group": "g", "wandb_project": "p", "batch_size": sequences,
                            "max_token_len": rollout.max_token_length, "checkpoint_dir": str(tmp / "ckpt"),
                            "save_checkpoint_interval": -1, "starting_step": 0,
                            "num_steps": args.skip + args.batches + 10}
            httpx.post(atropos + "/register", json=registration, timeout=5).raise_for_status()
            httpx.get(atropos + "/batch", timeout=5)
            pushed = tmp / "data" / "weights" / "pushed"  # inside the data volume, as the server requires
            if args.reload:
                shutil.copytree(tmp / "embedded", pushed)
            env = start("environment", [python, "-m", "hermes_stack.environment", "serve"])
            named = {"environment": env, "inference": inf, "run-api": api}
            client = httpx.Client(timeout=30)
            taken: list[float] = []
            waits: list[float] = []
            spy = None
            while len(taken) < args.skip + args.batches + 1:
                began = time.monotonic()
                while True:
                    if env.poll() is not None:
                        raise SystemExit(f"environment exited with {env.returncode}")
                    body = client.get(atropos + "/batch").json()
                    if body.get("batch"):
                        break
                    time.sleep(0.05)
                now = time.monotonic()
                taken.append(now)
                if len(taken) == args.skip + 1:
                    cpu_before = {name: cpu_seconds(p.pid) for name, p in named.items()}
                waits.append(now - began)
                if len(taken) == args.skip + 1 and args.py_spy > 0 and (binary := py_spy_binary()):
                    spy = subprocess.Popen([binary, "record", "-d", str(int(args.py_spy)), "-r", "100", "-p",
                                            str(named[args.py_spy_target].pid), "-f", "raw", "-o", str(tmp / "env.spy"), "--nonblocking"],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
                if args.burn:  # a trainer's core: training holds one CPU for its step (the stack's contention)
                    until = time.monotonic() + args.train_s
                    while time.monotonic() < until:
                        pass
                else:
                    time.sleep(args.train_s)
                if args.reload:  # the trainer's push: the server loads the (same) weights from disk
                    client.post(inference + "/update_weights_from_disk", json={"model_path": str(pushed)},
                                headers={"Authorization": "Bearer loopback-bench"}).raise_for_status()
                write_served_step(tmp / "data" / "weights", len(taken))  # as the trainer does after its push
            if spy is not None:
                spy.wait(args.py_spy + 60)
            cpu = {name: cpu_seconds(p.pid) - cpu_before[name] for name, p in named.items()}
            measured = taken[args.skip:]
            rate = sequences * (len(measured) - 1) / (measured[-1] - measured[0])
            mean_wait = sum(waits[args.skip + 1:]) / len(waits[args.skip + 1:])
            load = os.getloadavg()[0]
            env_log = (tmp / "environment.log").read_text()
            env_rates = [float(x) for x in ROLLOUT_RATE.findall(env_log)][args.skip:]
            print(f"{args.algo}: loopback {rate:.0f} sequences/s taken ({sequences} per batch, {args.batches} "
                  f"batches, stand-in trains {args.train_s:.2f} s each; mean wait per batch {mean_wait:.2f} s; "
                  f"code: {root}); "
                  f"load {load:.1f}", flush=True)
            span = measured[-1] - measured[0]
            print(f"{args.algo}: CPU per wall second while measured: " + ", ".join(
                f"{name} {seconds / span:.2f}" for name, seconds in cpu.items()), flush=True)
            if env_rates:
                print(f"{args.algo}: environment's rollout rate (its batch lines, median of {len(env_rates)}) "
                      f"{sorted(env_rates)[len(env_rates) // 2]:.0f} sequences/s; over all of them "
                      f"{rate_from_log(env_log, args.skip)[0]:.0f} (bench/stack_throughput.py's figure)", flush=True)
            if spy is not None and (tmp / "env.spy").exists():
                for share, frame in hottest(tmp / "env.spy"):
                    print(f"  {100 * share:5.1f}%  {frame[:150]}")
                print("  innermost frames (where the samples ran):")
                for share, frame in hottest(tmp / "env.spy", top=15, leaf=True):
                    print(f"  {100 * share:5.1f}%  {frame[:150]}")
        finally:
            for proc in reversed(procs):
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            for f in logs.values():
                f.close()
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for name in (*logs, "env"):
                    for path in tmp.glob(f"{name}.*"):
                        shutil.copy(path, args.keep_logs / path.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

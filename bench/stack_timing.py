"""Stack timings (issue 3's goals), printed as a small table:

1. `hermes-stack dry-run` with images built: wall time to all-healthy + dry-run passed, next to each service's own
   start time (container StartedAt -> first passing healthcheck) and the critical path through the dependencies
   (goal: within 3 s of it).
2. Rebuild of all images after a one-line code change (goal <= 20 s).
3. With --cold: build from nothing (images and build cache removed; goal for `make up` <= 10 min).

    .venv/bin/python bench/stack_timing.py [--algo grpo] [--cold] [--skip-up]

It brings the stack up and leaves it down (volumes removed) at the end. Traffic stays on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EDIT = ROOT / "hermes_stack" / "status.py"  # in the code layer of environment and trainer only


def sh(argv: list[str], check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "HERMES_ROOT": str(ROOT), **(env or {})})
    if check and done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done


def hs(*args: str) -> subprocess.CompletedProcess:
    return sh([sys.executable, "-m", "hermes_stack", *args])


def timed(fn) -> float:
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def _ts(text: str) -> float:
    # Docker prints nanoseconds; datetime takes microseconds.
    head, _, rest = text.rstrip("Z").partition(".")
    frac = (rest[:6] or "0").ljust(6, "0")
    return datetime.fromisoformat(f"{head}.{frac}+00:00").timestamp()


def own_start_times(project: str) -> dict[str, float]:
    """Per service: seconds from container start to its first passing healthcheck."""
    ids = sh(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}"]).stdout.split()
    out = {}
    for cid in ids:
        info = json.loads(sh(["docker", "inspect", cid]).stdout)[0]
        service = info["Config"]["Labels"].get("com.docker.compose.service")
        health = (info["State"].get("Health") or {}).get("Log") or []
        ok = [h for h in health if h.get("ExitCode") == 0]
        if service and ok:
            # The log keeps the last 5 probes only: right after `up` the first passing one is still there.
            out[service] = _ts(ok[0]["End"]) - _ts(info["State"]["StartedAt"])
    return out


def build_all(algo: str) -> float:
    return timed(lambda: hs("build", "--algo", algo, "--device", "cpu"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="grpo", choices=["ppo", "grpo"])
    parser.add_argument("--cold", action="store_true", help="also time a build from no images and no cache")
    parser.add_argument("--skip-up", action="store_true", help="only the build timings")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []

    if args.cold:
        hs("down", "--algo", args.algo, "--volumes")
        for image in ("hermes-stack/atropos:latest", "hermes-stack/environment:latest", "hermes-stack/trainer:cpu"):
            sh(["docker", "image", "rm", "-f", image], check=False)
        sh(["docker", "builder", "prune", "-af"], check=False)
        rows.append(("cold build of all images (base image cached)", f"{build_all(args.algo):.1f} s"))

    build_all(args.algo)  # warm
    original = EDIT.read_text()
    try:
        EDIT.write_text(original + f"\n# bench edit {time.time()}\n")
        rows.append(("rebuild after a one-line code change", f"{build_all(args.algo):.1f} s"))
    finally:
        EDIT.write_text(original)
    build_all(args.algo)  # back to the committed code

    if not args.skip_up:
        hs("down", "--algo", args.algo, "--volumes")
        total = timed(lambda: hs("dry-run", "--algo", args.algo, "--device", "cpu", "--no-build"))
        own = own_start_times(f"hermes-{args.algo}")
        hs("down", "--algo", args.algo, "--volumes")
        for service, seconds in sorted(own.items()):
            rows.append((f"  {service}: own start (container start -> healthy)", f"{seconds:.1f} s"))
        slowest = max(own.values(), default=0.0)
        chain = own.get("atropos", 0.0) + own.get("inference", 0.0)
        rows.append(("dry-run command: to healthy + dry-run passed", f"{total:.1f} s"))
        rows.append(("slowest single service's own start", f"{slowest:.1f} s"))
        rows.append(("dependency chain atropos -> inference", f"{chain:.1f} s"))

    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()

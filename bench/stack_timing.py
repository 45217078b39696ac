"""Stack timings (issue 3's goals), printed as a small table:

1. `hermes-stack dry-run` with images built (--runs N times, median): wall time to all-healthy + dry-run passed, next
   to each service's own start time (container start -> first `health_status: healthy` event) and the critical path
   (goal: within 3 s of the slowest service), and what the dry-run's checks (memory, weight sync, log-probs) add
   to it: their own times from the trainer's lines (goal: at most 3 s on the CPU stack). Times come from
   `docker events`, not from the health log (it keeps only the last 5 probes, so the first passing one is often
   gone), with a timeline of the median run.
2. Rebuild of all images after a one-line code change (goal <= 20 s).
3. With --cold: build from nothing (images and build cache removed; goal for `make up` <= 10 min).
4. With --probe-cost: CPU per healthcheck probe (the probe's python plus the engine's exec work), which is what a
   shorter healthcheck interval costs all the time while the stack runs.

    .venv/bin/python bench/stack_timing.py [--algo grpo] [--runs 3] [--cold] [--skip-up] [--skip-build]
                                           [--probe-cost] [--baseline DIR]

It brings the stack up and leaves it down (volumes removed) at the end. Traffic stays on this machine. The machine
is shared: the load average is printed next to each run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EDIT = ROOT / "hermes_stack" / "status.py"  # in the code layer of environment and trainer only
TICK = os.sysconf("SC_CLK_TCK")


def sh(argv: list[str], check: bool = True, env: dict | None = None, root: Path = ROOT) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, check=False,
                          env={**os.environ, "HERMES_ROOT": str(root), **(env or {})})
    if check and done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done


def hs(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    """The controller of the checkout at `root` (`-m` imports it from the working directory)."""
    return sh([sys.executable, "-m", "hermes_stack", *args], root=root)


def timed(fn) -> float:
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


# ---- the dry-run's timeline from docker events ----------------------------------------------------------------------

def events(project: str, since: float, until: float) -> list[tuple[float, str, str]]:
    """(seconds after `since`, status, service) for the project's container events, oldest first."""
    out = sh(["docker", "events", "--since", f"{since:.6f}", "--until", f"{until:.6f}",
              "--filter", f"label=com.docker.compose.project={project}", "--filter", "type=container",
              "--format", '{{.TimeNano}}\t{{.Status}}\t{{index .Actor.Attributes "com.docker.compose.service"}}']
             ).stdout
    rows = []
    for line in out.splitlines():
        nanos, status, service = line.split("\t")
        rows.append((int(nanos) / 1e9 - since, status.strip(), service))
    return rows


def first(rows: list[tuple[float, str, str]], service: str, status: str) -> float | None:
    return next((t for t, s, svc in rows if svc == service and s.startswith(status)), None)


def dry_run_once(algo: str, root: Path = ROOT) -> dict[str, float]:
    """One `hermes-stack dry-run --no-build` from a stopped stack: its wall time and the events' milestones."""
    hs("down", "--algo", algo, "--volumes", root=root)
    started = time.time()
    output: list[str] = []
    total = timed(lambda: output.append(hs("dry-run", "--algo", algo, "--device", "cpu", "--no-build",
                                           root=root).stdout))
    rows = events(f"hermes-{algo}", started, time.time())
    inference = sh(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project=hermes-{algo}",
                    "--filter", "label=com.docker.compose.service=inference"]).stdout.split()
    logged = sh(["docker", "logs", "--timestamps", *inference[:1]]).stdout if inference else ""
    hs("down", "--algo", algo, "--volumes", root=root)
    m = {"total": total, **check_times(output[0])}
    for service in ("gateway-check", "atropos", "inference"):
        for status, key in (("create", "created"), ("start", "started"), ("health_status: healthy", "healthy"),
                            ("die", "exited")):
            if (t := first(rows, service, status)) is not None:
                m[f"{service} {key}"] = t
    ready = next((line.split()[0] for line in logged.splitlines() if "inference ready" in line), None)
    if ready:  # the service's own log line, to see how long the healthcheck took to notice
        m["inference logged ready"] = _epoch(ready) - started
    m["dry-run started"] = first(rows, "trainer", "start") or float("nan")
    m["dry-run exited"] = first(rows, "trainer", "die") or float("nan")
    for service in ("atropos", "inference"):
        m[f"{service} own start"] = m[f"{service} healthy"] - m[f"{service} started"]
    m["slowest own start"] = max(m["atropos own start"], m["inference own start"])
    return m


CHECK_LINE = re.compile(r"dry-run check (prompts|memory|weight sync|log-probs): .*; ([0-9.]+) s$")


def check_times(stdout: str) -> dict[str, float]:
    """The dry-run's checks (trainer/prompt_check.py, memory_check.py, policy_checks.py), each line ending in its own
    time: they run once inference and Atropos are ready, so their sum is what they add to `up`'s critical path."""
    found = {f"check {m.group(1)}": float(m.group(2))
             for m in (CHECK_LINE.search(line.strip()) for line in stdout.splitlines()) if m}
    if found:
        found["checks"] = sum(found.values())
    return found


TIMELINE = ["gateway-check created", "gateway-check started", "gateway-check exited", "atropos started",
            "atropos healthy", "inference started", "dry-run started", "inference logged ready", "inference healthy",
            "dry-run exited"]


def _epoch(stamp: str) -> float:
    """Docker's RFC 3339 timestamp with nanoseconds -> epoch seconds (datetime takes microseconds)."""
    from datetime import datetime

    head, _, rest = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(rest[:6] or '0').ljust(6, '0')}+00:00").timestamp()


def up_rows(algo: str, runs: int, baseline: Path | None = None) -> list[tuple[str, str]]:
    """`runs` dry-runs of this checkout; with a baseline checkout, alternating with its controller and compose files
    (same images), so both see the same machine load."""
    roots = {"": ROOT, **({f"baseline {baseline}: ": baseline} if baseline else {})}
    results: dict[str, list[dict[str, float]]] = {label: [] for label in roots}
    for i in range(runs):
        for label, root in roots.items():
            before = load()
            m = dry_run_once(algo, root)
            results[label].append(m)
            print(f"  {label}run {i + 1}: {m['total']:.1f} s, slowest own start {m['slowest own start']:.1f} s "
                  f"({before} before, {load()} after)", file=sys.stderr)
    med = statistics.median
    rows = []
    for label, ms in results.items():
        median = sorted(ms, key=lambda m: m["total"])[len(ms) // 2]
        rows += [(f"{label}  {s}: own start (container start -> healthy), median of {runs}",
                  f"{med(m[f'{s} own start'] for m in ms):.1f} s") for s in ("atropos", "inference")]
        totals = [m["total"] for m in ms]
        rows.append((f"{label}dry-run command: to healthy + dry-run passed, median of {runs}",
                     f"{med(totals):.1f} s (runs: {', '.join(f'{t:.1f}' for t in totals)})"))
        rows.append((f"{label}slowest single service's own start, median",
                     f"{med(m['slowest own start'] for m in ms):.1f} s"))
        rows.append((f"{label}  difference, median", f"{med(m['total'] - m['slowest own start'] for m in ms):.1f} s"))
        if all("checks" in m for m in ms):
            names = ("memory", "weight sync", "log-probs")
            rows.append((f"{label}the dry-run's checks (memory, weight sync, log-probs): their own time, median",
                         f"{med(m['checks'] for m in ms):.2f} s ("
                         + ", ".join(f"{n} {med(m[f'check {n}'] for m in ms):.2f}" for n in names) + ")"))
        rows.append((f"{label}timeline of the median run (s after the command started)",
                     ", ".join(f"{k} {median[k]:.1f}" for k in TIMELINE if k in median)))
    return rows


# ---- what a healthcheck probe costs ----------------------------------------------------------------------------------

def _engine_ticks() -> dict[int, int]:
    """Per pid: CPU ticks of dockerd, containerd and the shims, with their reaped children (runc, the probe)."""
    ticks = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if comm in ("dockerd", "containerd") or comm.startswith("containerd-shim"):
            ticks[int(stat.parent.name)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return ticks


def _ticks_since(before: dict[int, int]) -> int:
    after = _engine_ticks()
    return sum(after[pid] - before[pid] for pid in before.keys() & after.keys())  # processes alive throughout


def probe_cost(algo: str, n: int = 20) -> list[tuple[str, str]]:
    hs("down", "--algo", algo, "--volumes")
    hs("dry-run", "--algo", algo, "--device", "cpu", "--no-build")
    rows = []
    try:
        for service in ("atropos", "inference"):
            cid = sh(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project=hermes-{algo}",
                      "--filter", f"label=com.docker.compose.service={service}"]).stdout.split()[0]
            probe = ["docker", "exec", cid, "python", "-m", "hermes_stack.health", service]
            sh(probe)  # warm
            ticks, wall = _engine_ticks(), time.monotonic()
            for _ in range(n):
                sh(probe)
            cpu = _ticks_since(ticks) / TICK / n
            rows.append((f"  {service} probe: wall / CPU (engine + probe process, `docker exec` CLI excluded)",
                         f"{(time.monotonic() - wall) / n * 1000:.0f} ms / {cpu * 1000:.0f} ms"))
    finally:
        hs("down", "--algo", algo, "--volumes")
    return rows


def build_all(algo: str) -> float:
    return timed(lambda: hs("build", "--algo", algo, "--device", "cpu"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="grpo", choices=["ppo", "grpo"])
    parser.add_argument("--runs", type=int, default=3, help="dry-run repetitions (median reported)")
    parser.add_argument("--cold", action="store_true", help="also time a build from no images and no cache")
    parser.add_argument("--skip-up", action="store_true", help="only the build timings")
    parser.add_argument("--skip-build", action="store_true", help="only the dry-run timings (images must be built)")
    parser.add_argument("--probe-cost", action="store_true", help="also measure what one healthcheck probe costs")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout of another revision (git archive REV | tar -x -C DIR): its dry-runs alternate "
                             "with this one's, on the same images")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = [("machine", f"{os.cpu_count()} cores, {load()} at start")]

    if args.cold:
        hs("down", "--algo", args.algo, "--volumes")
        for image in ("hermes-stack/atropos:latest", "hermes-stack/environment:latest", "hermes-stack/trainer:cpu"):
            sh(["docker", "image", "rm", "-f", image], check=False)
        sh(["docker", "builder", "prune", "-af"], check=False)
        rows.append(("cold build of all images (base image cached)", f"{build_all(args.algo):.1f} s"))

    if not args.skip_build:
        build_all(args.algo)  # warm
        original = EDIT.read_text()
        try:
            EDIT.write_text(original + f"\n# bench edit {time.time()}\n")
            rows.append(("rebuild after a one-line code change", f"{build_all(args.algo):.1f} s"))
        finally:
            EDIT.write_text(original)
        build_all(args.algo)  # back to the committed code

    if not args.skip_up:
        rows += up_rows(args.algo, args.runs, args.baseline.resolve() if args.baseline else None)
    if args.probe_cost:
        rows += probe_cost(args.algo)
    rows.append(("machine", f"{load()} at the end"))

    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()

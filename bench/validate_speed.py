"""How fast is `hermes-stack validate --algo grpo`? Prints figures; asserts nothing.

    python bench/validate_speed.py [-n 20]

Runs `python -m hermes_stack validate --algo grpo` N times as a subprocess on the shipped configs (wall time, min and
median), then once on a copy whose GRPO file says advantage_estimator = "gae", printing its exit code and message.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    """-> (wall seconds, CPU seconds user+sys of the child, result)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=20, help="runs to time")
    parser.add_argument("--device", default="auto", help="passed to validate (auto, cpu, gpu)")
    opts = parser.parse_args()

    args = ["validate", "--algo", "grpo", "--config-dir", str(ROOT / "configs"), "--device", opts.device]
    run(args, ROOT)  # warm the bytecode and page caches
    times, cpus, codes = [], [], set()
    for _ in range(opts.n):
        seconds, cpu, done = run(args, ROOT)
        times.append(seconds)
        cpus.append(cpu)
        codes.add(done.returncode)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"validate --algo grpo (shipped configs), {opts.n} runs: wall min {min(times):.3f} s, "
          f"median {statistics.median(times):.3f} s, max {max(times):.3f} s; CPU (user+sys) median "
          f"{statistics.median(cpus):.3f} s; exit codes {sorted(codes)}")

    with tempfile.TemporaryDirectory() as tmp:
        cdir = Path(tmp) / "configs"
        shutil.copytree(ROOT / "configs", cdir)
        toml = cdir / "config_grpo.toml"
        toml.write_text(toml.read_text().replace('advantage_estimator = "group_relative"',
                                                 'advantage_estimator = "gae"'))
        seconds, _, done = run(["validate", "--algo", "grpo", "--config-dir", str(cdir), "--device", opts.device], ROOT)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        print(f"GRPO file with gae: exit {done.returncode} in {seconds:.3f} s")
        for line in errors:
            print(f"  {line}")


if __name__ == "__main__":
    main()

"""conftest.root_logging_restored: a root handler a test's main() bound to that test's capture does not outlive it
(a clean clone's unit tier failed a bad-input test on a "--- Logging error ---" traceback a background thread of the
Tinker SDK printed through such a handler)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_a_handler_left_on_a_closed_capture_prints_nothing_into_the_next_test():
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:randomly", "-p",
                          "no:cacheprovider", str(HERE / "logging_hygiene_cases.py")],
                         cwd=HERE.parents[1], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and "2 passed" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]

"""scripts/provision-docker.sh starts dockerd with stdin, stdout and stderr only: started under `flock LOCK make
test`, the daemon (and containerd after it) inherited the lock's fd and held the lock for their whole life."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("flock") is None or not Path("/proc/self/fd").is_dir(), reason="flock and /proc")
def test_the_daemon_start_closes_the_callers_other_fds(tmp_path):
    text = (ROOT / "scripts" / "provision-docker.sh").read_text()
    (block,) = re.findall(r"\n  \(\n(    for fd in /proc/self/fd/\*.*?\n    exec setsid dockerd [^\n]*)\n  \) &\n", text,
                          flags=re.DOTALL)
    marker = tmp_path / "started"
    daemon = block.replace("exec setsid dockerd >/var/log/dockerd.log", f"exec setsid bash -c 'touch {marker}; "
                           "exec sleep 20.0417' >/dev/null")  # a duration of its own, to find it by
    script = tmp_path / "start.sh"
    script.write_text(f"set -euo pipefail\n(\n{daemon}\n) &\necho $!\n")
    lock = tmp_path / "lock"
    subprocess.run(["flock", str(lock), "bash", str(script)], capture_output=True, text=True, check=True, timeout=30)
    try:
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists()
        # The lock is free while the "daemon" runs on: it holds no fd of its caller's.
        assert subprocess.run(["flock", "-n", str(lock), "true"], timeout=10, check=False).returncode == 0
    finally:
        subprocess.run(["pkill", "-f", "sleep 20.0417"], check=False)

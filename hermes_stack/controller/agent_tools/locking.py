"""One advisory lock per project for the agent tools' read-check-write steps, across every MCP server process (two
servers of one project, or one server's concurrent tool calls in its worker threads).

Held across: an edit's read of the two config files, its validation and its write (else two servers editing two
keys at once each wrote its own copy of the old file and one edit was lost); and rl_start_training's check for a
run that is starting or running and the start of its own `up` (else two starts both saw no run and both started
one). The lock is `flock` on .hermes/agent-tools.lock: the kernel drops it when its holder exits, so a killed
server never leaves the project locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from hermes_stack.controller.stack_state import STATE_DIR

LOCK_FILE = "agent-tools.lock"
# A holder validates the configs (about a second; the gsm8k download check on the GPU profile can take longer) and
# starts a detached `up`: a minute is far past that, and still short of an MCP client's own call timeout.
WAIT_S = 60.0


class Busy(Exception):
    """The lock stayed held for WAIT_S: another server's edit or start has not finished."""


def lock_path(root: Path) -> Path:
    return root / STATE_DIR / LOCK_FILE


@contextlib.contextmanager
def project_lock(root: Path, wait_s: float = WAIT_S) -> Iterator[None]:
    """Hold the project's lock for the block; Busy when it is not free within `wait_s` seconds."""
    path = lock_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Busy(f"another hermes-stack MCP call on {root} held {path.relative_to(root)} for more "
                               f"than {wait_s:g} s") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock

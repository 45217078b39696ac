"""The trainer's --dry-run as a one-off container that `up` runs alongside (CPU) or after (GPU) `up --wait`."""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from hermes_stack.errors import StackError

if TYPE_CHECKING:
    from hermes_stack.controller.compose import Compose

DRY_RUN = ["python", "-m", "hermes_stack.trainer", "--dry-run"]


class DryRunAlongside:
    """The trainer's --dry-run as a one-off container, started together with `up --wait` so its model load overlaps
    the services' start; the dry-run itself waits (bounded by --wait) for inference and Atropos. Its output is kept
    and shown once `up --wait` succeeded; if `up --wait` fails, cancel() removes the container."""

    NETWORK_WAIT_S = 60.0

    def __init__(self, compose: Compose, project: str, wait_s: int):
        from hermes_stack.controller.compose import default_network, run_argv

        self._compose, self.network = compose, default_network(project)
        self.name = f"{project}-dry-run-{os.getpid()}"
        self.argv = run_argv(compose.params, "trainer", [*DRY_RUN, "--wait", str(wait_s)], name=self.name)
        self.lines: list[str] = []
        self.failure: Exception | None = None
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dry-run", daemon=True)

    def start(self) -> DryRunAlongside:
        self._thread.start()
        return self

    def _run(self) -> None:
        # `up --wait` creates the project network. Two compose commands creating it at once make two networks of
        # one name (Engine 20.10), and every later command fails as "ambiguous": start once it exists.
        deadline = time.monotonic() + self.NETWORK_WAIT_S
        while not self._compose.network_exists(self.network):
            if self._cancelled.wait(0.1):
                return
            if time.monotonic() > deadline:
                self.failure = StackError(f"network {self.network} did not appear within "
                                          f"{self.NETWORK_WAIT_S:.0f} s of `up`; the dry-run did not start")
                return
        try:
            for line in self._compose.stream(self.argv):
                self.lines.append(line)
        except Exception as exc:  # noqa: BLE001 - handed to the main thread by finish()
            self.failure = exc

    def finish(self, timeout_s: float) -> list[str]:
        """Wait for the dry-run to end; its output lines. `failure` says whether it passed."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.cancel()
            raise StackError(f"dry-run did not end within {timeout_s:.0f} s after the services were healthy; "
                             "its container was removed. Output so far: " + " | ".join(self.lines[-5:]))
        return list(self.lines)

    def cancel(self, within_s: float = 60.0) -> None:
        """Remove the one-off container until its `compose run` has ended (it may not have created it yet)."""
        from hermes_stack.controller.compose import CommandFailed

        self._cancelled.set()
        deadline = time.monotonic() + within_s
        while self._thread.is_alive() and time.monotonic() < deadline:
            try:
                self._compose.docker(["rm", "--force", self.name])
            except CommandFailed:
                pass  # not created yet: try again until `compose run` gives up
            self._thread.join(0.5)

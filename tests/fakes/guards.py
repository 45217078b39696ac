"""Test guards shared by the tiers: a call that may hang (the tinker SDK's own ~300 s retry loop) fails the test."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def bounded(fn: Callable[[], Any], seconds: float = 60.0) -> Any:
    """Runs fn on a daemon thread so that a hang fails the test instead of stalling the suite."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"no answer within the {seconds:.0f} s guard"
    if "error" in box:
        raise box["error"]
    return box.get("value")

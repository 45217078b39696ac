"""The environment's own rollout rate: sequences generated (dropped groups included) per second of wall time during
which at least one group was in flight. Time with nothing in flight (Atropos' queue full, the loop's poll) is left
out, so the figure says how fast the environment generates when it is asked to, next to the inference server's raw
rate (bench/stack_throughput.py). Groups cancelled by atroposlib (its queue filled meanwhile) count their time but
not their sequences: they never came back."""

from __future__ import annotations

import re
import time
from collections.abc import Callable


def rollout_rate(sequences: int, busy_s: float) -> float:
    """Sequences per second of in-flight time (0 when nothing was in flight)."""
    return sequences / busy_s if busy_s > 0 else 0.0


class RolloutClock:
    """Counts the wall time during which `inflight > 0`; `enter()`/`leave()` around each group's generation."""

    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self.inflight = 0
        self._since: float | None = None
        self._busy = 0.0

    def enter(self) -> None:
        if self.inflight == 0:
            self._since = self._now()
        self.inflight += 1

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0 and self._since is not None:
            self._busy += self._now() - self._since
            self._since = None

    def busy_s(self) -> float:
        """In-flight seconds so far, the open interval included."""
        return self._busy + (self._now() - self._since if self._since is not None else 0.0)


BATCH_LINE = re.compile(r"batch (\d+): .*?rollout rate [0-9.]+ sequences/s \((\d+) generated in ([0-9.]+) s ")


def rate_from_log(text: str, skip: int = 0) -> tuple[float, int, float]:
    """(rollout rate, sequences, in-flight seconds) over the environment's batch lines (env.py's `_log_batch`)
    after the first `skip`: total sequences over total in-flight time, not a mean of per-line rates."""
    lines = [(int(n), float(s)) for _, n, s in BATCH_LINE.findall(text)][skip:]
    sequences, busy = sum(n for n, _ in lines), sum(s for _, s in lines)
    return rollout_rate(sequences, busy), sequences, busy


AWAITING = re.compile(r"batch \d+: .*?with groups in flight, chunks awaiting /generate ([0-9.]+) s\)")


def awaiting_from_log(text: str, skip: int = 0) -> float:
    """Seconds the rollout chunks spent awaiting /generate over the batch lines after the first `skip` (summed over
    chunks, which may overlap): next to rate_from_log's in-flight time it splits the environment's time between the
    inference service (request, queue, sampling, answer) and its own work (decoding, scoring, layout)."""
    return sum(float(s) for s in AWAITING.findall(text)[skip:])

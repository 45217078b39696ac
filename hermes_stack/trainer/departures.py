"""Noticing an environment that stopped sending while no batch forms (pure bookkeeping, no I/O).

atroposlib's run-api batches a queue of groups from every registered environment. A group whose size does not pack
with the others (an environment of another group size) can block every batch, and nothing ever removes it: when its
environment has left, training stalls for good. The trainer samples each environment's queued groups (`/status-env`
self_queue_size) while it waits; an environment whose count has not moved for `after_s` while no batch formed has
stopped sending. The stack's own environment (its readiness marker names its env_id) is never judged departed: it
is alive, only blocked by the others' groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DepartureWatch:
    after_s: float
    _since: dict[int, tuple[int, float]] = field(default_factory=dict)  # env_id -> (queued groups, unchanged since)

    def reset(self) -> None:
        """A batch formed (or the queue was cleared): every environment starts a fresh window."""
        self._since.clear()

    def observe(self, now: float, queued: dict[int, int], own: set[int]) -> dict[int, tuple[int, float]]:
        """Record one sample {env_id: its queued groups}; return {env_id: (queued groups, seconds unchanged)} of the
        environments judged departed: not ours, with groups queued, unchanged for at least after_s."""
        departed = {}
        for env_id, count in queued.items():
            seen = self._since.get(env_id)
            if seen is None or seen[0] != count:
                self._since[env_id] = (count, now)
                continue
            quiet = now - seen[1]
            if env_id not in own and count > 0 and quiet >= self.after_s:
                departed[env_id] = (count, quiet)
        return departed

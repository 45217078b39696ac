"""How stale a batch is, and the bound on it (pure functions; the loop does the I/O).

Rollouts overlap training: the environment generates the next batch while the trainer trains this one, so a group
can come from a policy a few updates older than the one it trains. The engines correct for that already: the ratio
of the clipped objective is pi_theta / pi_behaviour with the behaviour log-probs the rollout carried
(`inference_logprobs`; engine_torch._fixed uses them as the "old" log-probs, recomputing only when a group has
none). What this module adds is the bound, as prime-rl's `max_off_policy_steps`, TRL's `max_staleness` and AReaL's
`max_head_offpolicyness` do: a group more than `bound` policy updates behind is not trained on.

A group's policy step is the weights step the inference service served when its generation began, which the
environment reads from `<data>/weights/served-step` (modelcore.weights_layout) and puts into the group's
`generation_params` (a ScoredData field Atropos passes through). The trainer writes that file after a push took, so
the step read is never newer than what generated the group: the staleness computed here is an upper bound.

    staleness(group) = policy version being trained (= steps completed) - the group's policy step

A group without a policy step (a user environment that does not tag its groups) has unknown staleness: it is kept
and counted as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermes_stack.modelcore.weights_layout import POLICY_STEP_KEY


def policy_step_of(group: dict[str, Any]) -> int | None:
    """The policy step a group was generated with (`generation_params.policy_step`), or None when untagged."""
    params = group.get("generation_params")
    if not isinstance(params, dict):
        return None
    value = params.get(POLICY_STEP_KEY)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class StalenessReport:
    kept: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)  # of the kept, tagged groups
    untagged: int = 0

    def metrics(self) -> dict[str, float]:
        known = self.staleness
        return {"staleness_max": float(max(known)) if known else float("nan"),
                "staleness_mean": sum(known) / len(known) if known else float("nan"),
                "stale_groups_dropped": float(len(self.dropped)),
                "untagged_groups": float(self.untagged)}


def split_by_staleness(groups: list[dict[str, Any]], policy_version: int, bound: int | None) -> StalenessReport:
    """Keep the groups at most `bound` policy updates behind `policy_version` (None: no bound, all kept).

    A policy step newer than the trainer (a restarted trainer resuming from an older checkpoint than the weights the
    inference service still serves) counts as staleness 0: the behaviour log-probs still correct it."""
    report = StalenessReport()
    for group in groups:
        step = policy_step_of(group)
        if step is None:
            report.untagged += 1
            report.kept.append(group)
            continue
        lag = max(0, policy_version - step)
        if bound is not None and lag > bound:
            report.dropped.append(group)
            continue
        report.kept.append(group)
        report.staleness.append(lag)
    return report

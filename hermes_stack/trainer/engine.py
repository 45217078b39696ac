"""The trainer engine interface (docs/architecture.md): what the training loop hands an engine, and what it gets back.

The engines take the [algorithm] section itself (config.models.AlgorithmSection, as validated by config/rules.py;
no second copy of its fields or defaults, and no second check).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

IGNORE = -100  # atroposlib's mask value for positions without loss (the prompt)


@dataclass(frozen=True)
class Sequence:
    """One scored completion from Atropos."""

    tokens: list[int]  # prompt + completion
    mask: list[int]  # -100 where no loss (prompt), the token id where trained (completion): atroposlib's masks
    score: float
    logprobs: list[float]  # inference logprob per token, aligned with tokens (prompt positions ignored); [] if none


class Engine(Protocol):
    """What the training loop (trainer/loop.py) drives: TorchEngine, TinkerEngine, the tests' TinyEngine."""

    def train_step(self, groups: list[list[Sequence]]) -> dict[str, float]:
        """One optimisation step on a batch of groups; returns metrics."""
        ...

    def export_weights(self, directory: Path) -> Path:
        """Write the current policy where the inference service can load it; returns the path written."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Policy, critic, optimizer (and step) for a checkpoint."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

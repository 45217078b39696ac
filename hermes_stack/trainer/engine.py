"""The trainer engine interface (docs/architecture.md): what the training loop hands an engine, and what it gets back."""

from __future__ import annotations

from collections.abc import Mapping
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


@dataclass(frozen=True)
class AlgoParams:
    """The [algorithm] section of config_<algo>.toml, as the engines read it."""

    name: str  # "ppo" | "grpo"
    advantage_estimator: str  # "gae" | "group_relative"
    gamma: float = 1.0
    lam: float = 0.95
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.0
    value_loss_coef: float = 0.0
    kl_coef: float = 0.1
    kl_penalty: str = "k3_loss"  # "k3_loss" | "k1_reward" (trainer/algorithms.py)

    @classmethod
    def from_section(cls, section: Any) -> AlgoParams:
        """From a pydantic AlgorithmSection or a plain mapping (e.g. tomllib's [algorithm] table)."""
        data = section if isinstance(section, Mapping) else section.model_dump()
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    @property
    def uses_critic(self) -> bool:
        return self.advantage_estimator == "gae"

    # No check() here: the algorithm rules (GRPO ignores gamma/lam, value_loss_coef per algorithm) live only in
    # config/rules.py, which every stack start runs before a trainer exists.


class Engine(Protocol):
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

"""The algorithms hermes-stack trains, and the one check of an `--algo` value: every config model, ServiceEnv, the
loader and the commands use these (the Makefile keeps its own make-time guard, which cannot import Python)."""

from __future__ import annotations

from typing import Literal

from hermes_stack.errors import Problem

ALGOS = ("ppo", "grpo")
Algo = Literal["ppo", "grpo"]  # a type checker needs the literal spelled out; test_algos checks it equals ALGOS


def algo_problem(algo: str) -> Problem | None:
    """The command-line problem of an unknown `--algo`, or None."""
    if algo in ALGOS:
        return None
    return Problem("command line", "--algo", repr(algo), " or ".join(ALGOS), "hermes-stack runs PPO or GRPO; e.g. --algo grpo")

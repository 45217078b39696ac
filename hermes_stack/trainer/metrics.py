"""Per-step metrics: one readable stdout line, one JSONL record on the volume, and wandb when configured.

The JSONL file is the controller's source for `hermes-stack status`: every record has at least the keys
step, reward_mean, loss, kl, time and checkpoint (null when that step saved none).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from hermes_stack.tasks.reward import CORRECT_OVERRIDE

# Order and short names of the stdout line; any other numeric metric still goes to JSONL and wandb.
_LINE_KEYS = [
    ("reward_mean", "reward_mean", ".3f"),
    ("rollout_accuracy", "acc", ".2f"),  # the environment's verdicts on this step's rollouts, when it gives them
    ("eval_accuracy", "heldout_acc", ".3f"),  # only on the steps that ran the held-out evaluation
    ("loss", "loss", ".4f"),
    ("policy_loss", "pg", ".4f"),
    ("value_loss", "vf", ".4f"),
    ("entropy", "ent", ".3f"),
    ("kl", "kl", ".4f"),
    ("clip_fraction", "clip", ".2f"),
    ("advantage_mean", "adv_mean", ".3f"),
    ("advantage_std", "adv_std", ".3f"),
    ("tokens_per_s", "tok/s", ".0f"),
    ("wait_s", "wait", ".1f"),
    ("step_s", "step_time", ".2f"),
    ("sync_s", "sync", ".2f"),
    ("staleness_max", "staleness", ".0f"),  # policy updates the batch's stalest group lags (trainer/staleness.py)
    ("stale_groups_dropped", "stale_dropped", ".0f"),
]


def reward_stats(scores: list[list[float]]) -> dict[str, float]:
    """Reward summary of one batch, given each group's scores."""
    flat = [s for group in scores for s in group]
    if not flat:
        return {"reward_mean": float("nan"), "reward_std": float("nan"), "reward_min": float("nan"),
                "reward_max": float("nan"), "groups_all_equal": float("nan")}
    mean = sum(flat) / len(flat)
    var = sum((s - mean) ** 2 for s in flat) / len(flat)
    equal = sum(1 for group in scores if len(set(group)) <= 1) / len(scores)
    return {"reward_mean": mean, "reward_std": math.sqrt(var), "reward_min": min(flat), "reward_max": max(flat),
            "groups_all_equal": equal}


def rollout_accuracy(batch: list[dict[str, Any]]) -> float | None:
    """The share of a batch's completions its environment judged correct, from the per-sequence `overrides` the
    built-in environment fills (environment/env.py); None when no sequence carries a verdict (a user's environment
    scores by its own rules, and a score alone does not say "correct")."""
    verdicts = [bool(o[CORRECT_OVERRIDE]) for item in batch for o in (item.get("overrides") or [])
                if isinstance(o, dict) and CORRECT_OVERRIDE in o]
    return sum(verdicts) / len(verdicts) if verdicts else None


def _fmt(value: Any, spec: str) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return format(value, spec)


def format_line(step: int, num_steps: int, metrics: dict[str, Any], checkpoint: str | None = None) -> str:
    """`step 12/200 reward_mean=0.610 loss=0.0123 kl=0.0040 ...` — the line `docker compose logs trainer` shows."""
    parts = [f"step {step}/{num_steps}"]
    for key, short, spec in _LINE_KEYS:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{short}={_fmt(float(value), spec)}")
    if checkpoint:
        parts.append(f"checkpoint={checkpoint}")
    return " ".join(parts)


def record(step: int, metrics: dict[str, Any], checkpoint: str | None, now: float | None = None) -> dict[str, Any]:
    """The JSONL record of one step. Non-finite floats become null so every line is strict JSON."""
    rec: dict[str, Any] = {"step": step, "time": time.time() if now is None else now, "checkpoint": checkpoint}
    for key in ("reward_mean", "loss", "kl"):
        rec[key] = None
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        rec[key] = float(value) if math.isfinite(float(value)) else None
    return rec


class MetricsSink:
    """Writes each step to stdout, `metrics.jsonl` (append, flushed per line) and optionally wandb."""

    def __init__(self, jsonl_path: Path, num_steps: int, *, wandb_project: str | None = None,
                 wandb_group: str | None = None, wandb_enabled: bool = False, run_config: dict | None = None,
                 stream: TextIO | None = None):
        self.jsonl_path = jsonl_path
        self.num_steps = num_steps
        self.stream = stream or sys.stdout
        jsonl_path.parent.mkdir(parents=True, exist_ok=True)
        self._wandb = self._start_wandb(wandb_project, wandb_group, wandb_enabled, run_config or {})

    def _start_wandb(self, project: str | None, group: str | None, enabled: bool, run_config: dict) -> Any:
        # Off unless [wandb] enabled, the one switch, as the environment service reads it (runtime.py): a key in the
        # key file alone used to turn the trainer's logging on while the environment's stayed off. Enabled: online
        # with a key, offline (files under the data volume) without.
        has_key = bool(os.environ.get("WANDB_API_KEY"))
        if not enabled:
            return None
        try:
            import wandb  # lazy: large import, and absent from slim images
        except ImportError:
            self.info("wandb: not installed in this image; metrics go to stdout and metrics.jsonl only")
            return None
        mode = "online" if has_key else "offline"
        try:
            run = wandb.init(project=project or "hermes-stack", group=group, config=run_config, mode=mode,
                             dir=str(self.jsonl_path.parent), reinit=True)
        except Exception as exc:  # noqa: BLE001 - wandb failing must not stop training
            self.info(f"wandb: init failed ({type(exc).__name__}: {exc}); continuing without wandb")
            return None
        self.info(f"wandb: logging {mode} to project {project}")
        return run

    def info(self, message: str) -> None:
        print(message, file=self.stream, flush=True)

    def log(self, step: int, metrics: dict[str, Any], checkpoint: str | None = None) -> dict[str, Any]:
        rec = record(step, metrics, checkpoint)
        self.info(format_line(step, self.num_steps, metrics, checkpoint))
        with self.jsonl_path.open("a") as fh:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self._wandb is not None:
            try:
                self._wandb.log({k: v for k, v in rec.items() if isinstance(v, float)}, step=step)
            except Exception as exc:  # noqa: BLE001
                self.info(f"wandb: log failed ({exc}); disabling wandb")
                self._wandb = None
        return rec

    def event(self, kind: str, message: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        """Something that happened to the run (an environment departed, Atropos restarted): a record without a
        "step" key in metrics.jsonl, so `status` can say so and step readers skip it."""
        rec = {"event": kind, "message": message, "time": time.time(), **(fields or {})}
        with self.jsonl_path.open("a") as fh:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.flush()
        return rec

    def close(self) -> None:
        if self._wandb is not None:
            try:
                self._wandb.finish()
            except Exception as exc:  # noqa: BLE001 - the run is over; a wandb upload error must not fail it
                self.info(f"wandb: finish failed ({exc})")
            self._wandb = None

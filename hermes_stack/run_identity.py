"""What a run's checkpoints were trained with, and whether another configuration can resume them (issue 25).

A checkpoint's weights and optimizer state fit only the model, engine, LoRA shape and algorithm that wrote them.
The trainer writes this identity into every checkpoint's manifest (trainer/loop.save) and checks it before loading
one (trainer/loop.resume); the controller keeps the identity of the run it started (`.hermes/run-<project>.json`)
and checks it before anything starts (bring_up), so `make up MODEL=…` after a run of another model is one line, not
a crash-looping trainer.

The decision, as prime-rl (`--ckpt.resume-step`) and verl (`resume_mode: auto|disable|resume_path`) make it: by
default a run resumes when its configuration can, and says what else changed; when it cannot, nothing starts and
one line names the old run and the two commands that choose: delete the old run's checkpoints, or start a new run
beside it under its own project name (its own volume).

Stdlib only: imported by the controller and by the trainer image.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_stack.errors import Problem

# What a checkpoint cannot be loaded without: a change in any of these is a different run.
RESUME_KEYS = ("algo", "model", "engine", "lora_rank")
# Shown as "what changed" when a run resumes: the training may continue with them.
# `replicas` only in the controller's record (bring_up): a resume on another count said nothing, and on a GPU VM the
# other replicas' GPUs then sat idle unnoticed.
TUNABLE_KEYS = ("learning_rate", "kl_coef", "batch_size", "group_size", "temperature", "num_steps", "replicas")


def identity_of(stack: Any) -> dict[str, Any]:
    """The identity of a validated stack (StackConfig): what its checkpoints will carry."""
    s, c = stack.settings, stack.config
    return {"algo": stack.algo, "model": getattr(stack, "model", None) or s.inference.model_path,
            "engine": s.trainer.engine, "lora_rank": s.tinker.lora_rank,
            "learning_rate": s.tinker.learning_rate, "kl_coef": c.algorithm.kl_coef,
            "batch_size": c.rollout.batch_size, "group_size": c.rollout.group_size,
            "temperature": c.rollout.temperature, "num_steps": s.trainer.num_steps}


@dataclass(frozen=True)
class Decision:
    resume: bool
    blocking: tuple[str, ...] = ()  # "model embedded -> smollm2-135m"
    changed: tuple[str, ...] = ()  # tunable values that differ; the run resumes with the new ones

    def notice(self) -> str | None:
        if not self.resume or not self.changed:
            return None
        return "resuming the run's checkpoints with changed settings: " + ", ".join(self.changed)


def _diff(old: Mapping[str, Any], new: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{k} {old[k]} -> {new.get(k)}" for k in keys if k in old and old[k] != new.get(k))


def decide(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> Decision:
    """Resume `old`'s checkpoints with `new`, or not. No old identity (a fresh volume, or checkpoints written before
    identities existed): resume, as before."""
    if not old:
        return Decision(True)
    blocking = _diff(old, new, RESUME_KEYS)
    return Decision(not blocking, blocking, _diff(old, new, TUNABLE_KEYS))


def make_for(project: str, algo: str, target: str) -> str:
    """`make <target> ALGO=<algo>` aimed at `project` (pure): a project other than the default one is named, or the
    command acts on the last `up`'s stack of that algorithm (a hint's `make down VOLUMES=1` deleted another run)."""
    named = f"HERMES_PROJECT_NAME={project} " if project != f"hermes-{algo}" else ""
    return f"{named}make {target} ALGO={algo}"


def resume_command(project: str, algo: str, decision: Decision, old: Mapping[str, Any], configured_model: str,
                   is_catalog_name: Callable[[str], bool], up: str | None = None) -> str | None:
    """The `make up` that resumes the old run when its model (and the LoRA rank a catalog model brings) is what
    stands in the way (pure): without MODEL= when it trained the configs' own model, with MODEL=<it> when it trained
    a catalog model. After `make up MODEL=smollm2-135m` and `make down`, the `make up` that status suggests was
    refused, and the refusal named only the commands that delete the run or start another. `up`: the `make up` of
    this stack (its project and REPLICAS=), to which MODEL= is added."""
    keys = {b.split(" ", 1)[0] for b in decision.blocking}
    if "model" not in keys or keys - {"model", "lora_rank"}:  # a rank edited in the configs: no MODEL= helps
        return None
    up = up or make_for(project, algo, "up")
    model = old.get("model")
    if model == configured_model:
        return up
    if isinstance(model, str) and is_catalog_name(model):
        return f"{up} MODEL={model}"
    return None


def refusal(project: str, algo: str, decision: Decision, where: str | None = None,
            resume: str | None = None) -> Problem:
    """The one line when a configuration cannot resume the old run (`where`: what holds it, default its volume;
    `resume`: the command that resumes it, when one is known: resume_command)."""
    return Problem(where or f"{project} (data volume {project}_hermes-data)", "checkpoints", f"a run trained with {', '.join(decision.blocking)}",
                   "the same model, engine, LoRA rank and algorithm to resume it",
                   (f"`{resume}` resumes it; " if resume else "")
                   + f"`{make_for(project, algo, 'down')} VOLUMES=1` deletes that run's checkpoints and starts over; "
                   f"`HERMES_PROJECT_NAME={project}-2 make up ALGO={algo}`, with this command's MODEL= or REPLICAS=, "
                   "starts a new run beside it")


# ---------------------------------------------------------------- the controller's record of the run it started


def record_path(state_dir: Path, project: str) -> Path:
    return state_dir / f"run-{project}.json"


def read_record(state_dir: Path, project: str) -> dict[str, Any] | None:
    try:
        data = json.loads(record_path(state_dir, project).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(state_dir: Path, project: str, ident: Mapping[str, Any]) -> Path:
    path = record_path(state_dir, project)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(dict(ident), indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return path


def forget_record(state_dir: Path, project: str) -> None:
    record_path(state_dir, project).unlink(missing_ok=True)

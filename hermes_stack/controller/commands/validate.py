"""`hermes-stack validate`: check the key file and both config files, print the resolved (redacted) configuration.

Exit 0 valid (warnings allowed), 2 invalid, 1 unexpected. Nothing is started and nothing heavy is imported here
(no docker, no torch): the command must stay well under half a second.

Other commands (`up`, `dry-run`) call `validated_stack(...)`: the same checks, InputError on any problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hermes_stack.algos import algo_problem
from hermes_stack.config import profiles
from hermes_stack.config.models import MAX_REPLICAS
from hermes_stack.controller.commands.app import app
from hermes_stack.controller.device import choose_profile, device_problem
from hermes_stack.errors import InputError, Problem

if TYPE_CHECKING:
    from hermes_stack.config.loader import StackConfig

ALGO_HELP = "ppo or grpo: picks configs/config_<algo>.toml and settings_<algo>.json"


@dataclass
class Outcome:
    stack: StackConfig | None  # None when the files could not be read
    errors: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    keyfile_invalid: Path | None = None  # the key file's path when it had problems


def check_options(algo: str, device: str, gpu_memory: float | None, replicas: int | None = None) -> list[Problem]:
    out = [p for p in (algo_problem(algo), device_problem(device)) if p is not None]
    if replicas is not None and not 1 <= replicas <= MAX_REPLICAS:
        shown = str(replicas) if len(str(replicas)) <= 12 else f"a number of {len(str(replicas))} digits"
        out.append(Problem("command line", "--replicas (REPLICAS)", shown, f"an integer from 1 to {MAX_REPLICAS}",
                           "the number of inference servers behind the router; 1 is one server, no router"))
    if gpu_memory is not None and not 0 < gpu_memory <= 4096:
        out.append(Problem("command line", "--gpu-memory", f"{gpu_memory:g}", "GiB of one GPU, e.g. 24 or 80",
                           "the memory budget compares against this"))
    return out


def evaluate(algo: str, config_dir: Path, keyfile_path: Path | None = None, unlock: bool = False,
             gpu_memory: float | None = None, device: str = "auto", model: str | None = None,
             in_containers: bool = True, replicas: int | None = None) -> Outcome:
    """Run every check and collect everything: option, key-file and config problems come back together.
    `replicas` (--replicas, REPLICAS=N) replaces settings inference.replicas."""
    from hermes_stack.config.loader import evaluate_stack
    from hermes_stack.controller.environ_check import environment_problems, environment_warnings
    from hermes_stack.keyfile import load_keyfile, path_is_explicit, resolve_path

    errors = check_options(algo, device, gpu_memory, replicas)
    if errors:
        return Outcome(None, errors)
    outcome = Outcome(None, environment_problems(), warnings=environment_warnings())
    try:
        # Only the default file may be absent (offline mode); a path the user named must be a key file.
        keyfile = load_keyfile(keyfile_path, must_exist=path_is_explicit(keyfile_path))
    except InputError as exc:
        keyfile = None
        outcome.errors += exc.problems
        outcome.keyfile_invalid = resolve_path(keyfile_path)
    profile, gib, notes = choose_profile(device, gpu_memory)
    outcome.notices += notes
    try:
        stack, errors = evaluate_stack(algo, config_dir, profile, unlock, keyfile, gib, model)
    except InputError as exc:
        outcome.errors += exc.problems
        return outcome
    if replicas is not None:
        stack = with_replicas(stack, replicas)
    outcome.stack = stack
    outcome.errors += errors + (_controller_rules(stack, gib, replicas is not None) if in_containers else [])
    outcome.warnings += stack.warnings
    outcome.notices += stack.notices
    return outcome


def with_replicas(stack: StackConfig, replicas: int) -> StackConfig:
    """The stack with --replicas in place of settings inference.replicas (the services never read the count: `up`
    hands them the replicas' URLs)."""
    from dataclasses import replace

    settings = stack.settings
    return replace(stack, settings=settings.model_copy(
        update={"inference": settings.inference.model_copy(update={"replicas": replicas})}))


def _controller_rules(stack: StackConfig, gpu_memory_gib: float | None = None,
                      replicas_from_cli: bool = False) -> list[Problem]:
    """Rules about where the stack will run (containers), checked by validate and up, not by a service loading its
    own configuration inside one."""
    from hermes_stack.config import rules
    from hermes_stack.controller.device import detect_gpu_count

    replicas = stack.settings.inference.replicas
    gpu_rules = []
    if stack.profile == "gpu" and replicas > 1:
        where, key = (("command line", "--replicas (REPLICAS)") if replicas_from_cli
                      else (str(stack.settings_path), "inference.replicas"))
        gpu_rules = rules.replicas_fit_gpus(replicas, detect_gpu_count(gpu_memory_gib), where, key)

    inputs = rules.Inputs(algo=stack.algo, config=stack.config_as_written or stack.config,
                          settings=stack.settings_as_written or stack.settings, config_file=str(stack.config_path),
                          settings_file=str(stack.settings_path), profile=stack.profile)
    return rules.dataset_in_configs(inputs) + gpu_rules


def validated_stack(algo: str, config_dir: Path = Path("configs"), keyfile_path: Path | None = None,
                    unlock: bool = False, gpu_memory: float | None = None, device: str = "auto",
                    model: str | None = None, in_containers: bool = True,
                    replicas: int | None = None) -> StackConfig:
    """For `up`/`dry-run`: the StackConfig, printing the GPU memory split, warnings and notices; InputError with
    every problem. `in_containers` False (test-inference, which runs on the host): no rule about what the
    containers see."""
    from hermes_stack.controller import console

    outcome = evaluate(algo, config_dir, keyfile_path, unlock, gpu_memory, device, model, in_containers, replicas)
    for line in split_lines(outcome.stack):
        console.info(line)
    _report(outcome)
    return outcome.stack


def split_lines(stack: StackConfig | None) -> list[str]:
    """The GPU memory split the stack runs with, printed (none off the gpu profile or when it is unknown)."""
    split = stack.gpu_split if stack is not None else None
    return split.lines() if split is not None else []


# ---------------------------------------------------------------- printing


def _report(outcome: Outcome) -> None:
    """Notices, then warnings; then InputError with every problem, if any."""
    from hermes_stack.controller import console

    for line in outcome.notices:
        console.notice(line)
    for line in outcome.warnings:
        console.warn(line)
    if outcome.errors:
        raise InputError(outcome.errors)


def _fmt(value: object) -> str:
    if isinstance(value, str):
        # repr for a space or a character that does not print (an escape sequence in a value cleared the screen)
        return value if value and value.isprintable() and " " not in value else repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def summary_lines(stack: StackConfig, keyfile_invalid: Path | None = None) -> list[str]:
    """The resolved configuration, one line per section; values changed by the profile are marked *."""
    lines = [f"hermes-stack {stack.algo}: profile {stack.profile}"]
    overridden = {profiles.target_of(k) for k in stack.overrides}
    for where, path, model in (("config", stack.config_path, stack.config),
                               ("settings", stack.settings_path, stack.settings)):
        lines.append(f"  {path}")
        for section, sub in model:
            pairs = " ".join(f"{name}={_fmt(v)}{'*' if (where, section, name) in overridden else ''}"
                             for name, v in sub)
            lines.append(f"    [{section}] {pairs}")
    kf = stack.keyfile
    if keyfile_invalid is not None:
        lines.append(f"  key file {keyfile_invalid}: invalid (see the errors below)")
    elif kf is None or kf.offline:
        lines.append("  key file: none (offline)")
    else:
        # A defaulted TINKER_API_KEY is a validation aid that no service receives (compose_env): not shown as a line.
        shown = " ".join(f"{k}={v}" for k, v in kf.redacted().items()
                         if not (k == "TINKER_API_KEY" and kf.tinker_key_defaulted))
        lines.append(f"  key file {kf.path}: {shown}")
    if stack.overrides:
        lines.append(f"  * = set by profile {stack.profile}: "
                     + ", ".join(f"{k}={_fmt(v)}" for k, v in stack.overrides.items()))
    return lines + split_lines(stack)


@app.command("validate")
def validate(
    algo: Annotated[str, typer.Option("--algo", help=ALGO_HELP)],
    config_dir: Annotated[Path, typer.Option("--config-dir", help="Folder holding the config files.")] = Path(
        "configs"),
    keyfile: Annotated[Path | None, typer.Option(
        "--keyfile", help="Key file (default: $HERMES_KEYFILE or .env.taotoken).")] = None,
    unlock: Annotated[bool, typer.Option("--unlock", help="Allow changing the locked tinker.* values (warns).")] = False,
    gpu_memory: Annotated[float | None, typer.Option(
        "--gpu-memory", help="GiB of GPU memory (default: from nvidia-smi).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu (embedded profile) or gpu.")] = "auto",
    model: Annotated[str | None, typer.Option(
        "--model", help="A catalog model (smollm2-135m): the real model on CPU, its hub id on GPU.")] = None,
    replicas: Annotated[int | None, typer.Option(
        "--replicas", help="Inference servers behind the router (default: settings inference.replicas).")] = None,
) -> None:
    """Check the key file and the configs; print the resolved, redacted configuration and every problem."""
    from hermes_stack.controller import console

    outcome = evaluate(algo, config_dir, keyfile, unlock, gpu_memory, device, model, replicas=replicas)
    if outcome.stack is not None:
        for line in summary_lines(outcome.stack, outcome.keyfile_invalid):
            console.info(line)
    _report(outcome)
    console.info(f"valid: {algo} ({len(outcome.warnings)} warning{'s' if len(outcome.warnings) != 1 else ''})")

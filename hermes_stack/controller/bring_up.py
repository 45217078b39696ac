"""`up` and `dry-run`, stage by stage:

validate -> preflight -> build -> up --wait (gateway-check, atropos, inference) with, on CPU, the dry-run alongside
(the trainer's --dry-run as a one-off container: it loads the model while the services start, then waits, bounded,
for inference and Atropos; inference generates, Atropos reachable, then the checks of trainer/prompt_check.py,
trainer/memory_check.py and trainer/policy_checks.py, no optimisation step; on GPU it starts after
up --wait) -> start training (up --wait of trainer and environment) -> where to look.
Every docker/compose call goes through hermes_stack.controller.compose; every printed line goes through the redactor.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_stack.controller import console
from hermes_stack.controller.compose_env import compose_env
from hermes_stack.controller.dry_run_alongside import DryRunAlongside
from hermes_stack.controller.stack_state import (
    STATE_DIR,
    Plan,
    dotenv_names,
    inference_key,
    plan_compose,
    project_root,
    save_plan,
    saved_plan,
    secrets_salt,
    write_dotenv,
)
from hermes_stack.errors import HermesError, StackError

if TYPE_CHECKING:
    from hermes_stack.controller.compose import Compose, ComposeParams
    from hermes_stack.controller.status import ServiceState

TRAINING = ["trainer", "environment"]


def _stage(n: int, total: int, text: str) -> float:
    console.out.print(f"[bold cyan][{n}/{total}][/] {text}", highlight=False)
    return time.monotonic()


def _done(started: float, text: str = "done") -> None:
    console.out.print(f"      [green]✓[/] {text} ({time.monotonic() - started:.1f} s)", highlight=False)


def build_inputs() -> str:
    """What the image builds need first, made by our scripts when missing: the base image (its tag is returned) and
    the host wheelhouse."""
    from hermes_stack.controller.compose import run_script

    base_image = run_script(project_root(), "base-image.sh")
    run_script(project_root(), "wheelhouse.sh")
    return base_image


def _key_from(stack) -> str | None:
    """The inference key the user set explicitly: the key-file line named by inference.api_key_env (by default
    HERMES_INFERENCE_KEY, usually absent: then `inference_key` generates one)."""
    keyfile = getattr(stack, "keyfile", None)
    if keyfile is None or keyfile.offline:
        return None
    return keyfile.get(stack.settings.inference.api_key_env)


def validated_with_key(algo: str, device: str, unlock: bool, keyfile: Path | None = None, model: str | None = None,
                       replicas: int | None = None):
    """The validated stack and the inference key `up` gives the services (registered for redaction)."""
    from hermes_stack.controller.commands.validate import validated_stack
    from hermes_stack.redaction import register_secrets

    stack = validated_stack(algo, Path("configs"), keyfile, unlock=unlock, device=device, model=model,
                            replicas=replicas)
    key = inference_key(project_root() / STATE_DIR, _key_from(stack))
    register_secrets({"HERMES_INFERENCE_KEY": key})
    return stack, key


def replica_count(stack) -> int:
    """inference.replicas of the validated stack (after --replicas); 1 for a stand-in stack of the tests."""
    inference = getattr(getattr(stack, "settings", None), "inference", None)
    return int(getattr(inference, "replicas", 1))


def configured_replicas(stack) -> int:
    """inference.replicas as the settings file says it: what a `make up` without REPLICAS= starts."""
    inference = getattr(getattr(stack, "settings_as_written", None), "inference", None)
    return int(getattr(inference, "replicas", 1) or 1)


def _stream(compose: Compose, argv: list[str], prefix: str = "      ") -> None:
    for line in compose.stream(argv):
        if line.strip():  # BuildKit's plain progress separates its steps with blank lines: 100+ of them per build
            console.info(prefix + line)


def _up(compose: Compose, services: Sequence[str], wait_timeout: int,
        on_failure: Callable[[], None] | None = None, keep: bool = False) -> None:
    """`compose up --wait`; on failure, run `on_failure` (then `ps` no longer lists what it removed), then raise
    what explain_up_failure makes of it (which services are not ready)."""
    from hermes_stack.controller.compose import CommandFailed
    from hermes_stack.controller.status import explain_up_failure

    try:
        compose.up(services, wait_timeout=wait_timeout, keep=keep)
    except CommandFailed as exc:
        if on_failure:
            on_failure()
        raise explain_up_failure(compose, exc) from None
    except BaseException:  # Ctrl-C: nothing to explain, but clean up
        if on_failure:
            on_failure()
        raise


def build_images(compose: Compose) -> None:
    """`compose build`, its progress shown as it comes; then the images this rebuild untagged go (only ours, by
    label: without this every code change left a 1-1.6 GB dangling image behind)."""
    from hermes_stack.controller.compose import build_argv, prune_built_images_argv

    _stream(compose, build_argv(compose.params))
    compose.run(prune_built_images_argv())


def _check_ports(stack, project: str) -> None:
    """Another stack on our host ports is named, with the command that stops it, before anything is created."""
    from hermes_stack.controller.host_ports import check_host_ports

    if stack is None or not hasattr(stack, "config"):
        return  # tests that stub validation
    check_host_ports({"[atropos] api_port": stack.config.atropos.api_port,
                      "inference.port": stack.settings.inference.port}, project)


def _check_owner(stack, algo: str, project: str) -> None:
    """The project's run belongs to another checkout: one line naming it, before anything changes."""
    from hermes_stack.controller.checkout_owner import check_owner
    from hermes_stack.errors import InputError

    if stack is None or not hasattr(stack, "config"):
        return  # tests that stub validation
    problem = check_owner(project, algo, project_root())
    if problem is not None:
        raise InputError(problem)


def volume_exists(name: str) -> bool:
    from hermes_stack.controller.compose import probe

    rc, out, _ = probe(["docker", "volume", "ls", "-q", "--filter", f"name=^{name}$"])
    return rc == 0 and name in out.split()


def _model_without_override(stack) -> str | None:
    """The model a `make up` without MODEL= trains (the configs' own, after the profile): read again only on the way
    to a refusal. None when the configs alone do not validate (the hint then names no resuming command)."""
    if not getattr(stack, "model", None):
        return stack.settings.inference.model_path
    from hermes_stack.config.loader import evaluate_stack

    try:
        plain, errors = evaluate_stack(stack.algo, stack.config_path.parent, stack.profile)
    except HermesError:
        return None
    return None if errors else plain.settings.inference.model_path


def _check_resume(stack, algo: str, project: str, has_volume=None, up: str | None = None) -> None:
    """A configuration that cannot resume the run whose checkpoints the project's volume holds (another model,
    engine, LoRA rank) is refused before anything starts, with the two commands that choose; one that can resumes
    and says what changed. The identity is then recorded for the next `up`."""
    from hermes_stack.errors import InputError
    from hermes_stack.modelcore.catalog import is_catalog_name
    from hermes_stack.run_identity import (
        decide,
        forget_record,
        identity_of,
        read_record,
        refusal,
        resume_command,
        write_record,
    )

    if stack is None or not hasattr(stack, "config"):
        return  # tests that stub validation
    state = project_root() / STATE_DIR
    old = read_record(state, project)
    if old is not None and not (has_volume or volume_exists)(f"{project}_hermes-data"):
        forget_record(state, project)  # the volume went (down --volumes, docker volume rm): a fresh run
        old = None
    new = {**identity_of(stack), "replicas": replica_count(stack)}
    decision = decide(old, new)
    if not decision.resume:
        if up is None:  # bring_up passes the one it prints everywhere else
            from hermes_stack.controller.replicas import up_command

            up = up_command(algo, replica_count(stack), project, configured_replicas(stack))
        resume = resume_command(project, algo, decision, old or {}, _model_without_override(stack),
                                is_catalog_name, up)
        raise InputError(refusal(project, algo, decision, resume=resume))
    if decision.notice():
        console.notice(decision.notice())
    write_record(state, project, new)


def _training_now(plan: Plan, algo: str, project: str, dry_run_only: bool) -> tuple[int, ServiceState] | None:
    """The step of this project's run and its trainer's container when it runs now (status.training_now); `dry-run`
    then is refused: its weight-sync check would push probe weights into the inference server the run samples from."""
    from hermes_stack.controller.status import training_now
    from hermes_stack.errors import InputError, Problem

    now = training_now(plan_compose(plan, echo=False))
    step = now[0] if now is not None else None
    if step is not None and dry_run_only:
        raise InputError(Problem("command line", "dry-run", f"the {project} stack training (step {step})",
                                 "a stack that is not training",
                                 f"make down ALGO={algo} first (the stop saves a checkpoint), then make dry-run "
                                 f"ALGO={algo}: its weight-sync check pushes probe weights into the inference server "
                                 "the run samples from"))
    return now


def _running_plan(algo: str, project: str, asked: Plan) -> Plan:
    """The plan a run that trains was started with (its own `up` recorded it, its replica override among its files);
    `asked` when none of this project is recorded."""
    saved = saved_plan(project_root() / STATE_DIR, algo)
    return saved if saved is not None and (saved.project or f"hermes-{algo}") == project else asked


def _check_replicas_of_the_run(algo: str, project: str, step: int, count: int, running_plan: Plan,
                               configured: int = 1) -> None:
    """A second `up` beside a run that trains asks for the replica count that run has: another count removed or
    rewrote the override the run's `status`, `logs` and `down` read it with (and its replicas became orphans)."""
    from hermes_stack.controller.replicas import replicas_in, up_command
    from hermes_stack.errors import InputError, Problem

    running = replicas_in(project_root(), running_plan.files, algo)
    if running == count:
        return
    again = up_command(algo, running, project, configured)
    raise InputError(Problem("command line", "REPLICAS", str(count),
                             f"{running}, the replica count of the {project} run training now (step {step})",
                             f"{again} starts its stopped services again; to change the count, make down ALGO={algo} "
                             "first (the stop saves a checkpoint)"))


def _start_beside_the_run(compose: Compose, wait_timeout: int, services: set[str]) -> list[str]:
    """Start the services stopped by hand beside a run that trains (status told the user `make up` does): as their
    containers are, the trainer untouched. Before, `up` said "training already" and left them stopped, and the
    trainer waited for its inference server until `make down`."""
    from hermes_stack.controller.status import service_states, to_start_beside_a_run

    # Only this configuration's services: a stopped inference-3 left from a run with more replicas is no service
    # of compose's now, and naming it fails the whole `up`.
    stopped = [s for s in to_start_beside_a_run(service_states(compose.ps())) if s in services]
    if stopped:
        console.info(f"  starting {', '.join(stopped)} again beside the training run (containers as they were)")
        _up(compose, stopped, wait_timeout, keep=True)
    return stopped


def _logs_command(params: ComposeParams, project: str) -> str:
    """The trainer's log as typed here: plain `docker compose` where our .env names this stack (a later `up` of the
    other algorithm's stack rewrote it, and the plain form then showed that stack's trainer), else the -f form."""
    from hermes_stack.controller.compose import logs_argv, printable

    if dotenv_names(project_root(), project):
        return "docker compose logs --follow trainer"
    return printable(logs_argv(params, "trainer", follow=True, user=True))


def already_training(algo: str, project: str, step: int, secrets_changed: bool = False,
                     started: Sequence[str] = (), up: str | None = None,
                     logs: str = "docker compose logs --follow trainer") -> list[str]:
    """What `up` says of a run that trains already (pure; commands as typed). Its containers keep the settings and
    the code they started with: the build and the dry-run are not run again beside it. `secrets_changed`: the
    running containers hold other secrets than the key file gives now (status.ServiceState.holds_other_secrets).
    `started`: the services stopped by hand that `up` started again beside it. `up`: the `make up` that starts this
    stack again (replicas.up_command: its count and project). `logs`: the trainer's log command (_logs_command)."""
    done = f"started {', '.join(started)} again, the rest untouched" if started else "nothing to start"
    up = up or f"make up ALGO={algo}"
    lines = [f"{project} is training already (step {step}): {done}.",
             f"trainer step lines: {logs}",
             f"health and reward:  make status ALGO={algo}",
             (f"changed settings or code: make down ALGO={algo}, then {up} (the stop saves a "
              "checkpoint; the run resumes there with them)")]
    if secrets_changed:
        lines.append(f"the key file's keys changed since this run started (or .hermes/ was deleted): its containers "
                     f"keep the old ones until make down ALGO={algo}, then {up}")
    return lines


def bring_up(algo: str, device: str, wait_timeout: int, unlock: bool, extra_files: list[str] | None,
             stop_after_dry_run: bool, build: bool = True, keyfile: Path | None = None,
             model: str | None = None, replicas: int | None = None) -> Plan:
    from hermes_stack.controller.compose import stack_files
    from hermes_stack.controller.device import resolve_device
    from hermes_stack.controller.preflight import SystemProbe, preflight
    from hermes_stack.controller.replicas import serving_services, up_command, write_override

    total = 5 if stop_after_dry_run else 6
    probe = SystemProbe()
    resolved = resolve_device(device, probe)

    t = _stage(1, total, f"validate {algo} configs and key file (device {resolved})")
    stack, key = validated_with_key(algo, resolved, unlock, keyfile, model, replicas)
    count = replica_count(stack)
    _done(t, f"profile {getattr(stack, 'profile', '?')}"
             + (f", {count} inference replicas behind the router" if count > 1 else "")
             + (f", model {stack.model}" if getattr(stack, "model", None) else ""))

    t = _stage(2, total, "preflight: Docker engine, Compose v2" + (", NVIDIA toolkit" if resolved == "gpu" else ""))
    findings = preflight(resolved, probe)
    project_name = os.environ.get("HERMES_PROJECT_NAME") or None
    project = project_name or f"hermes-{algo}"  # the `name:` in compose.<algo>.yml
    _check_owner(stack, algo, project)
    _check_ports(stack, project)
    # Asked before the override is written: a run that trains is read with the override its own `up` wrote.
    asked = Plan(algo, resolved, stack_files(algo, resolved, list(extra_files or ())), project_name)
    now = _training_now(asked, algo, project, stop_after_dry_run)
    # The `make up` every hint below names: this stack's count (where the settings' differs) and project.
    configured = configured_replicas(stack)
    again = up_command(algo, count, project, configured)
    if now is not None:  # a second `up` of a run that trains: nothing to start, nothing to touch
        plan = _running_plan(algo, project, asked)
        _check_replicas_of_the_run(algo, project, now[0], count, plan, configured)
        _done(t, ", ".join(f"{f.what} {f.detail}" for f in findings))
        console.info("")
        from hermes_stack.controller.compose_env import SECRETS_DIGEST

        step, trainer = now
        env = compose_env(stack, key, None, unlock, secrets_salt(project_root() / STATE_DIR))
        compose = plan_compose(plan, env)
        started = _start_beside_the_run(compose, wait_timeout, {"atropos", "environment", *serving_services(count)})
        for line in already_training(algo, project, step, trainer.holds_other_secrets(env[SECRETS_DIGEST]),
                                     started, again, _logs_command(compose.params, project)):
            console.info("  " + line)
        return plan
    _check_resume(stack, algo, project, up=again)
    # Every refusal has passed: the override, the plan that names it and its record now, together (a refusal or a
    # failed build in between left the record naming an override that was gone, and status, logs and down failed).
    # REPLICAS=N: the generated override goes right after the stack's own files, before the user's -f files.
    replica_file = write_override(project_root(), algo, resolved, count)
    plan = Plan(algo, resolved, stack_files(algo, resolved, [*([replica_file] if replica_file else []),
                                                              *(extra_files or ())]), project_name)
    save_plan(project_root() / STATE_DIR, plan)
    if stack is not None and hasattr(stack, "config"):
        from hermes_stack.controller.checkout_owner import claim

        claim(project, project_root())  # every check passed: this checkout's run
    _done(t, ", ".join(f"{f.what} {f.detail}" for f in findings) + ", host ports free")
    # Before the build: compose reads .env for interpolation too, so a stale one must not pick this build's images.
    dotenv = write_dotenv(project_root(), plan, project,
                          compose_env(stack, key, None, unlock, secrets_salt(project_root() / STATE_DIR)))

    t = _stage(3, total, "build images" if build else "images: using what is built")
    base_image = build_inputs() if build else None
    compose = plan_compose(plan, compose_env(stack, key, base_image, unlock, secrets_salt(project_root() / STATE_DIR)))
    if build:
        build_images(compose)
    _done(t)

    # On CPU the dry-run loads its model while the services start. Not on GPU: SGLang sizes its KV cache from the GPU
    # memory free when it starts, so the trainer's model must not be loaded before it (as in the steady state).
    alongside = resolved == "cpu"
    serving = ["atropos", *serving_services(count)]
    t = _stage(4, total, f"up --wait (gateway-check, {', '.join(serving)}), at most {wait_timeout} s"
                         + (", with the dry-run alongside" if alongside else ""))
    dry = DryRunAlongside(compose, project, wait_timeout)
    if alongside:
        dry.start()
    _up(compose, serving, wait_timeout, on_failure=dry.cancel)
    _done(t, "atropos and inference healthy")
    if not alongside:
        dry.start()

    t = _stage(5, total, "dry-run: model loaded, inference generates, Atropos reachable; the prompts fit, memory "
                         "measured, a weight push round trip, the log-prob convention; no optimisation step")
    try:
        lines = dry.finish(wait_timeout + 120)  # its own --wait bounds it; the margin covers the model load
    except BaseException:
        dry.cancel()
        raise
    for line in lines:
        console.info("      " + line)
    # A make target, not compose's `run`: typed by hand, that needs the secrets' variables only `up` sets.
    dry_again = " ".join(["make dry-run", f"ALGO={algo}", *([f"DEVICE={device}"] if device != "auto" else []),
                          *([f"MODEL={model}"] if model else []), *([f"REPLICAS={replicas}"] if replicas else [])])
    if project_name:
        dry_again = f"HERMES_PROJECT_NAME={project_name} {dry_again}"
    if dry.failure is not None:
        code = getattr(dry.failure, "returncode", "?")
        raise StackError(f"dry-run failed (exit {code}); the trainer's output is above. Run it again, the stack up "
                         f"to the dry-run: {dry_again}")
    for line in _check_user_environment(compose, stack, dry_again):
        console.info("      " + line)
    _done(t, "dry-run passed")

    if not stop_after_dry_run:
        t = _stage(6, total, f"start training: up --wait ({', '.join(TRAINING)})")
        try:
            _up(compose, TRAINING, wait_timeout)
        except StackError as exc:
            from hermes_stack.controller.status import UpFailed, finished_run

            if (complete := finished_run(compose)) is None:
                if isinstance(exc, UpFailed):
                    # The serving services stay up (their logs, a fix and `make up` again); say how to stop them.
                    raise exc.followed_by(f"the other services stay up for their logs; `make down ALGO={algo}` "
                                          "stops them") from None
                raise
            _done(t, f"nothing to train: the run is complete (checkpoint step {complete[0]} >= num_steps "
                     f"{complete[1]})")
            console.info("")
            for line in after_a_complete_run(algo, complete[0], again):
                console.info("  " + line)
            return plan
        _done(t, "trainer and environment healthy; training runs")

    console.info("")
    if stop_after_dry_run:  # no trainer runs: its step lines would be an empty log
        for line in after_a_dry_run(algo, again):
            console.info("  " + line)
        return plan
    console.info("Where to look (in this directory):")
    for line in where_to_look(algo, compose.params, dotenv, again):
        console.info("  " + line)
    return plan


ENVIRONMENT_CHECK = ["python", "-m", "hermes_stack.environment", "check"]


def _check_user_environment(compose: Compose, stack, again: str) -> list[str]:
    """A user's environment, before anything trains: its file imported, config_init() and setup() run in the
    environment image, as `serve` runs them (environment/__main__.py `check`). Without it, an import error or a
    failing setup() passed the dry-run and showed only as a crash loop once training had started. The built-in
    environment needs none: the trainer's dry-run checked its prompts. Its line, or StackError with the cause."""
    from hermes_stack import environments_catalog
    from hermes_stack.controller.compose import CommandFailed, run_argv
    from hermes_stack.controller.status import last_error

    config = getattr(stack, "config", None)
    if config is None:
        return []
    chosen = environments_catalog.users_environment(project_root(), config.environment.name)
    if chosen is None:
        return []
    lines: list[str] = []
    try:
        lines.extend(compose.stream(run_argv(compose.params, "environment", ENVIRONMENT_CHECK)))  # kept on failure
    except CommandFailed as exc:
        cause = last_error(lines) or last_error(str(exc).splitlines()) or f"exit {exc.returncode}"
        raise StackError(f"dry-run: environment {chosen.name} ({chosen.file}) failed its check: {cause}. Fix it, "
                         f"then check it again: {again}") from None
    return [line.split("environment check: ", 1)[1] for line in lines if "environment check: " in line][-1:]


def after_a_dry_run(algo: str, up: str | None = None) -> list[str]:
    """What `dry-run` leaves and what comes next (pure; commands as typed): Atropos and inference run, no trainer.
    `up`: the `make up` of this stack (replicas.up_command: with another count `up` replaces the running one)."""
    return ["the dry-run passed; nothing trains (Atropos and inference are up).",
            f"start training:     {up or f'make up ALGO={algo}'}",
            f"stop the services:  make down ALGO={algo}"]


def after_a_complete_run(algo: str, step: int, up: str | None = None) -> list[str]:
    """What a user can do when `up` finds the volume's run already at num_steps (pure; commands as typed). The
    trainer exited 0 and compose's `up --wait` of the environment behind it failed: not an error of the stack.
    `up`: the `make up` of this stack (replicas.up_command)."""
    up = up or f"make up ALGO={algo}"
    return [f"the run:            make report ALGO={algo}   (its curve and figures)",
            (f"train on:           set trainer.num_steps above {step} in configs/settings_{algo}.json, then {up} "
            f"(it resumes from step {step})"),
            f"start afresh:       make down ALGO={algo} VOLUMES=1 (deletes the checkpoints), then {up}",
            f"stop the services:  make down ALGO={algo}"]


def where_to_look(algo: str, params: ComposeParams, dotenv: bool, up: str | None = None) -> list[str]:
    """Commands that work as typed after `make up` (pure): make targets, which need no PATH entry, and plain
    `docker compose` when .env names the stack (else the -f form). The `make up` that resumes names the algorithm
    and the replica count (`up`, replicas.up_command): a bare `make up` after a PPO run started GRPO."""
    from hermes_stack.controller.compose import logs_argv, printable

    logs = "docker compose logs --follow trainer" if dotenv else printable(
        logs_argv(params, "trainer", follow=True, user=True))
    stop = (f"stop:               make down ALGO={algo}   (checkpoints kept; {up or f'make up ALGO={algo}'} resumes; "
            "VOLUMES=1 deletes them)")
    return [f"trainer step lines: {logs}", f"health and reward:  make status ALGO={algo}", stop]

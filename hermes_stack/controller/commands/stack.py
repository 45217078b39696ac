"""`hermes-stack up | dry-run | status | logs | down | render | build`: the stack's life cycle.

The commands check their command line and hand over: `up`/`dry-run` to hermes_stack.controller.bring_up, the remembered stack
to hermes_stack.controller.stack_state, docker to hermes_stack.controller.compose. Every printed line goes through the redactor.
"""

from __future__ import annotations

from pathlib import Path

import typer

from hermes_stack.controller import console
from hermes_stack.controller.commands.app import app
from hermes_stack.controller.compose import project_of
from hermes_stack.controller.stack_state import (
    STATE_DIR,
    Plan,
    forget_plan,
    load_plan,
    plan_compose,
    project_root,
    remove_dotenv,
    saved_plan,
    secrets_salt,
    stack_algo,
)
from hermes_stack.errors import HermesError, InputError, Problem

ALGO_OPT = typer.Option("grpo", "--algo", help="ppo or grpo: picks compose.<algo>.yml and configs/*_<algo>.*")
# The commands that talk to a running stack: without --algo, the one the last `up` here started.
STACK_ALGO_OPT = typer.Option(None, "--algo", help="ppo or grpo: the stack to talk to (default: the last `up`'s "
                              "here, else grpo)")
DEVICE_OPT = typer.Option("auto", "--device", help="auto (GPU only when the NVIDIA runtime is usable), cpu or gpu")
TIMEOUT_OPT = typer.Option(900, "--wait-timeout", help="Seconds `up --wait` may take before failing")
FILE_OPT = typer.Option(None, "--file", "-f", help="Extra compose override file, layered last (repeatable)")
KEYFILE_OPT = typer.Option(None, "--keyfile", help="Key file (default: $HERMES_KEYFILE or .env.taotoken); the "
                                                   "services get their variables from it, through the controller")
REPLICAS_OPT = typer.Option(None, "--replicas", help="Inference replicas behind SGLang's router (default: settings "
                            "inference.replicas; make up REPLICAS=N)")
UNLOCK_OPT = typer.Option(False, "--unlock", help="Allow changing the locked tinker fields (the services too)")
MODEL_OPT = typer.Option(None, "--model", help="A catalog model, e.g. smollm2-135m: on CPU the real model baked into "
                                               "the images (else inference.model_path; CPU default: the tiny model)")


def _check_algo(algo: str) -> None:
    from hermes_stack.algos import algo_problem

    if (problem := algo_problem(algo)) is not None:
        raise InputError(problem)


def _check_device(device: str) -> None:
    from hermes_stack.controller.device import device_problem

    if (problem := device_problem(device)) is not None:
        raise InputError(problem)


def _check_wait_timeout(seconds: int) -> None:
    from hermes_stack.controller.compose import wait_timeout_problem

    if (problem := wait_timeout_problem(seconds)) is not None:
        raise InputError(problem)


def _check_service(service: str, plan: Plan) -> None:
    """A service the stack's compose files declare: docker would say "no such service" with exit 1 and no names."""
    from hermes_stack.controller.compose import compose_services
    from hermes_stack.errors import near_miss

    known = compose_services(project_root(), plan.files)
    if not known or service in known:
        return
    near = near_miss(service, known)
    raise InputError(Problem("command line", "SERVICE", repr(service), f"one of {', '.join(known)}",
                             f"did you mean {near}?" if near else "leave it out for every service's log"))


def _check_files(files: list[str] | None) -> None:
    """Each -f override must be a compose file before anything is written or started: compose would refuse it
    only at `up`, after .env and the run's state name it (and `down` then fails on it too)."""
    from hermes_stack.controller.compose import override_file_problem

    problems = [p for f in files or () if (p := override_file_problem(project_root(), f)) is not None]
    if problems:
        raise InputError(problems)


@app.command()
def up(algo: str = ALGO_OPT, device: str = DEVICE_OPT, wait_timeout: int = TIMEOUT_OPT,
       unlock: bool = UNLOCK_OPT, file: list[str] = FILE_OPT, keyfile: Path = KEYFILE_OPT, model: str = MODEL_OPT,
       no_build: bool = typer.Option(False, "--no-build", help="Use the images already built"),
       replicas: int = REPLICAS_OPT) -> None:
    """Validate, preflight, build, start the stack, run the dry-run stage, then start training."""
    _bring_up(algo, device, wait_timeout, unlock, file, keyfile, model, no_build, replicas, stop_after_dry_run=False)


@app.command("dry-run")
def dry_run(algo: str = ALGO_OPT, device: str = DEVICE_OPT, wait_timeout: int = TIMEOUT_OPT,
            unlock: bool = UNLOCK_OPT, file: list[str] = FILE_OPT, keyfile: Path = KEYFILE_OPT, model: str = MODEL_OPT,
            no_build: bool = typer.Option(False, "--no-build", help="Use the images already built"),
            replicas: int = REPLICAS_OPT) -> None:
    """Everything `up` does up to and including the dry-run stage; no training starts."""
    _bring_up(algo, device, wait_timeout, unlock, file, keyfile, model, no_build, replicas, stop_after_dry_run=True)


def _bring_up(algo: str, device: str, wait_timeout: int, unlock: bool, file: list[str], keyfile: Path, model: str,
              no_build: bool, replicas: int, stop_after_dry_run: bool) -> None:
    """`up` and `dry-run`: the same argument checks, then bring_up, which stops after the dry-run stage or trains."""
    from hermes_stack.controller.bring_up import bring_up

    _check_algo(algo)
    _check_device(device)
    _check_wait_timeout(wait_timeout)
    _check_files(file)
    bring_up(algo, device, wait_timeout, unlock, file, stop_after_dry_run=stop_after_dry_run, build=not no_build,
             keyfile=keyfile, model=model, replicas=replicas)


@app.command()
def build(algo: str = ALGO_OPT, device: str = DEVICE_OPT) -> None:
    """Build the images (base image and wheelhouse first when missing)."""
    from hermes_stack.controller.bring_up import build_images, build_inputs
    from hermes_stack.controller.compose import stack_files
    from hermes_stack.controller.device import resolve_device
    from hermes_stack.controller.preflight import SystemProbe, preflight

    _check_algo(algo)
    _check_device(device)
    resolved = resolve_device(device, SystemProbe())
    preflight(resolved)
    plan = Plan(algo, resolved, stack_files(algo, resolved))
    build_images(plan_compose(plan, {"HERMES_BASE_IMAGE": build_inputs()}))


def _up_again(plan: Plan, project: str) -> str:
    """The `make up` that starts the last up's stack again, its replica count included: a resume without it would
    not be the run that was stopped. A project other than the default is named: with HERMES_PROJECT_NAME given for
    this command only, a bare `make up` would reach the last up's project."""
    from hermes_stack.controller.replicas import replicas_in, up_command

    return up_command(plan.algo, replicas_in(project_root(), plan.files, plan.algo), project,
                      _configured_replicas(plan.algo))


def _configured_replicas(algo: str) -> int:
    """settings inference.replicas as written (what a `make up` without REPLICAS= starts); 1 when the files cannot
    be read (status still answers: the hint then names the count whenever it is above 1)."""
    from hermes_stack.config.loader import load_files

    try:
        return int(load_files(algo, project_root() / "configs")[1].inference.replicas or 1)
    except HermesError:
        return 1


@app.command()
def status(algo: str | None = STACK_ALGO_OPT) -> None:
    """Each service's health, the training step, reward mean with a small trend, the last checkpoint."""
    from hermes_stack.controller.status import (
        current_events,
        error_lines,
        event_lines,
        found_complete,
        read_metrics,
        replica_lines,
        service_states,
        state_line,
        stopped_at,
        stopped_line,
        summary_of,
        up_again,
    )

    algo = stack_algo(project_root() / STATE_DIR, algo)
    _check_algo(algo)
    plan = load_plan(project_root() / STATE_DIR, algo)
    compose = plan_compose(plan, echo=False)
    states = service_states(compose.ps())
    project = project_of(compose.params)
    if not states:
        from hermes_stack.run_identity import make_for

        kept = compose.has_data_volume()  # after `make down` the run is still there
        up = _up_again(plan, project)
        console.info(f"{project}: no containers" + (f"; its run is on the kept volume ({make_for(project, algo, 'report')}"
                                                    f" draws it; {up} resumes it)" if kept else f" (start with: {up})"))
        return
    console.info(f"{project} ({plan.device}; {' '.join('-f ' + f for f in plan.files)})")
    text = read_metrics(compose)
    stopped_step = stopped_at(text)
    for s in states:
        console.info("  " + state_line(s, stopped_step))
    if (stopped := stopped_line(states, algo, project, found_complete(text))) is not None:
        console.info("  " + stopped)
    elif stopped_step is not None and any(s.service == "trainer" and s.state == "exited" for s in states):
        console.info(f"  the trainer was stopped after step {stopped_step} (docker compose stop): "
                     f"{up_again(states, algo, project)} resumes from that checkpoint")
    for line in error_lines(compose, states, algo, project):
        console.info(line)
    for line in replica_lines(compose, states):
        console.info(line)
    for line in summary_of(text).lines():
        console.info(line)
    for line in event_lines(current_events(text)):  # e.g. an environment that departed and what the trainer did
        console.info(line)


@app.command()
def logs(service: str = typer.Argument(None, help="atropos, inference, trainer, environment or gateway-check"),
         algo: str | None = STACK_ALGO_OPT, follow: bool = typer.Option(False, "--follow", "-f"),
         tail: int = typer.Option(None, "--tail", help="Only the last N lines per service")) -> None:
    """Service logs (secrets redacted)."""
    from hermes_stack.controller.compose import logs_argv

    algo = stack_algo(project_root() / STATE_DIR, algo)
    _check_algo(algo)
    if tail is not None and tail < 0:
        raise InputError(Problem("command line", "--tail", str(tail), "a number of lines, 0 or more",
                                 "e.g. --tail 100; leave it out for the whole log"))
    plan = load_plan(project_root() / STATE_DIR, algo)
    if service is not None:
        _check_service(service, plan)
    compose = plan_compose(plan, echo=False)
    if not compose.ps():  # compose prints nothing then, and exits 0: an empty screen says nothing
        project = project_of(compose.params)
        console.info(f"{project}: no containers, so no logs (start with: {_up_again(plan, project)})")
        return
    for line in compose.stream(logs_argv(compose.params, service, follow, tail)):
        console.info(line)


@app.command()
def down(algo: str | None = STACK_ALGO_OPT,
         volumes: bool = typer.Option(False, "--volumes", help="Also delete the data volume (checkpoints)")) -> None:
    """Stop and remove the stack's containers; the data volume stays unless --volumes."""
    algo = stack_algo(project_root() / STATE_DIR, algo)
    _check_algo(algo)
    plan = load_plan(project_root() / STATE_DIR, algo)
    compose = plan_compose(plan)
    project = project_of(compose.params)
    # Another checkout's run is not this checkout's to delete, nor its running stack this checkout's to stop (the
    # same HERMES_PROJECT_NAME in two checkouts).
    from hermes_stack.controller.checkout_owner import check_owner

    problem = check_owner(project, algo, project_root(), "down" if volumes else "stop")
    if problem is not None:
        raise InputError(problem)
    containers = bool(compose.ps())
    volume = compose.has_data_volume()
    compose.down(volumes=volumes)
    remove_dotenv(project_root(), project)
    if volumes:  # the run's checkpoints are gone: the next `up` starts a fresh run, whatever its configuration
        from hermes_stack.controller.checkout_owner import release
        from hermes_stack.run_identity import forget_record

        forget_record(project_root() / STATE_DIR, project)
        forget_plan(project_root() / STATE_DIR, algo, project)
        release(project)
    if containers:
        console.info(f"{project} stopped" + ("; volumes removed" if volumes else "; volumes kept"))
    elif volume and volumes:
        console.info(f"{project}: no containers; volumes removed")
    elif volume:  # a second `down`: "stopped" again read as if a stack had still been running
        console.info(f"{project}: nothing to stop (no containers); its run stays on the kept volume")
    else:
        console.info(f"{project}: nothing to stop (no containers{', no volume' if volumes else ''})")
    _other_stack_running(algo)


def _other_stack_running(algo: str) -> None:
    """After a `down` without ALGO= stopped the last up's stack, the other algorithm's may still run (its ports, its
    GPU): say so, with the command that stops it."""
    other = "ppo" if algo == "grpo" else "grpo"
    plan = saved_plan(project_root() / STATE_DIR, other)
    if plan is None:
        return
    compose = plan_compose(plan, echo=False)
    try:
        running = compose.ps()
    except HermesError:  # its files moved or compose cannot say: nothing to add
        return
    if running:
        console.info(f"{project_of(compose.params)} still runs: make down ALGO={other} stops it")



@app.command()
def render(algo: str = ALGO_OPT, device: str = DEVICE_OPT, file: list[str] = FILE_OPT,
           unlock: bool = UNLOCK_OPT, keyfile: Path = KEYFILE_OPT, model: str = MODEL_OPT,
           replicas: int = REPLICAS_OPT, wait_timeout: int = TIMEOUT_OPT) -> None:
    """Print the exact compose command `up` runs and the merged configuration, secrets redacted."""
    from hermes_stack.controller.bring_up import TRAINING, replica_count, validated_with_key
    from hermes_stack.controller.compose import printable, stack_files, up_argv
    from hermes_stack.controller.compose_env import compose_env
    from hermes_stack.controller.device import resolve_device
    from hermes_stack.controller.preflight import SystemProbe
    from hermes_stack.controller.replicas import override_name, render_override_name, serving_services, write_override
    from hermes_stack.redaction import redact_config

    _check_algo(algo)
    _check_device(device)
    _check_wait_timeout(wait_timeout)
    _check_files(file)
    resolved = resolve_device(device, SystemProbe())
    # The same validation, key and compose environment as `up`, so what is printed is what `up` runs.
    stack, key = validated_with_key(algo, resolved, unlock, keyfile, model, replicas)
    # Its own copy of the override: up's file belongs to the stack up started (status, logs and down read it).
    replica_file = write_override(project_root(), algo, resolved, replica_count(stack), render_override_name(algo))
    plan = Plan(algo, resolved, stack_files(algo, resolved, [*([replica_file] if replica_file else []), *(file or ())]))
    compose = plan_compose(plan, compose_env(stack, key, None, unlock, secrets_salt(project_root() / STATE_DIR)),
                           echo=False)
    # With up's own --wait-timeout (its default, 900, not compose.up's): the exact commands, with render's copy of
    # the override, which is there to type them with (up's own is written by up, for its count).
    console.info("# " + printable(up_argv(compose.params, ["atropos", *serving_services(replica_count(stack))],
                                          wait_timeout)))
    console.info("# " + printable(up_argv(compose.params, TRAINING, wait_timeout)))
    if replica_file:
        console.info(f"# (up writes the same override to {override_name(algo)})")
    # A review pasted them: compose stopped at the first secret. They document what `up` runs; `up` runs them.
    from hermes_stack.run_identity import make_for

    console.info(f"# (up runs them with the key file's secrets in compose's environment, which it never writes down: "
                 f"typed as they are, they stop at the first secret; {make_for(project_of(compose.params), algo, 'up')} "
                 "runs them)")
    console.info(redact_config(compose.config()))

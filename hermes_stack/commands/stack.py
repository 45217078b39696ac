"""`hermes-stack up | dry-run | status | logs | down | render | build`: the stack's life cycle.

up:  validate -> preflight -> build -> up --wait (gateway-check, atropos, inference) with, on CPU, the dry-run
     alongside (the trainer's --dry-run as a one-off container: it loads the model while the services start, then
     waits, bounded, for inference and Atropos; inference generates, Atropos reachable, no optimisation step; on GPU
     it starts after up --wait) -> start training (up --wait of trainer and environment) -> where to look.
Every docker/compose call goes through hermes_stack.compose; every printed line goes through the redactor.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from hermes_stack import console
from hermes_stack.cli import app
from hermes_stack.errors import InputError, Problem, StackError

STATE_DIR = Path(".hermes")
LAST_UP = "last-up.json"
KEY_FILE = "inference.key"
SERVING = ["atropos", "inference"]  # up first; gateway-check comes along as their dependency
TRAINING = ["trainer", "environment"]
DRY_RUN = ["python", "-m", "hermes_stack.trainer", "--dry-run"]
SCRIPT_TIMEOUT_S = 1800  # base image from nothing (mmdebstrap) ~2 min, wheelhouse ~30 s on 2 cores

ALGO_OPT = typer.Option("grpo", "--algo", help="ppo or grpo: picks compose.<algo>.yml and configs/*_<algo>.*")
DEVICE_OPT = typer.Option("auto", "--device", help="auto (GPU only when the NVIDIA runtime is usable), cpu or gpu")
TIMEOUT_OPT = typer.Option(900, "--wait-timeout", help="Seconds `up --wait` may take before failing")
FILE_OPT = typer.Option(None, "--file", "-f", help="Extra compose override file, layered last (repeatable)")
KEYFILE_OPT = typer.Option(None, "--keyfile", help="Key file (default: $HERMES_KEYFILE or .env.taotoken); the "
                                                   "services get their variables from it, through the controller")
UNLOCK_OPT = typer.Option(False, "--unlock", help="Allow changing the locked tinker fields (the services too)")
MODEL_OPT = typer.Option(None, "--model", help="A catalog model, e.g. smollm2-135m: on CPU the real model baked into "
                                               "the images (else inference.model_path; CPU default: the tiny model)")


@dataclass(frozen=True)
class Plan:
    algo: str
    device: str
    files: tuple[str, ...]
    project: str | None = None  # HERMES_PROJECT_NAME at `up` (None: the `name:` in compose.<algo>.yml)


def _root() -> Path:
    return Path(os.environ.get("HERMES_ROOT") or Path.cwd())


def _check_algo(algo: str) -> None:
    if algo not in ("ppo", "grpo"):
        raise InputError(Problem("command line", "--algo", repr(algo), "ppo or grpo",
                                 "hermes-stack runs PPO or GRPO; e.g. --algo grpo"))


def _check_device(device: str) -> None:
    if device not in ("auto", "cpu", "gpu"):
        raise InputError(Problem("command line", "--device", repr(device), "auto, cpu or gpu",
                                 "auto picks gpu only when the NVIDIA container runtime is usable"))


# ---- state the controller keeps between commands (.hermes/, gitignored) --------------------------------------------

def inference_key(state_dir: Path, from_keyfile: str | None) -> str:
    """The key protecting the inference service: the key file's value, else one generated once and kept 0600."""
    if from_keyfile:
        return from_keyfile
    path = state_dir / KEY_FILE
    if path.is_file():
        return path.read_text().strip()
    state_dir.mkdir(parents=True, exist_ok=True)
    key = "hs-" + secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return key


def stored_inference_key(state_dir: Path) -> str | None:
    """The key `up` generated offline (read-only: nothing is generated here), for test-inference."""
    try:
        return (state_dir / KEY_FILE).read_text().strip() or None
    except OSError:
        return None


def save_plan(state_dir: Path, plan: Plan) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / LAST_UP).write_text(json.dumps({"algo": plan.algo, "device": plan.device, "files": plan.files,
                                                 "project": plan.project}))


def load_plan(state_dir: Path, algo: str) -> Plan:
    """The files (and project) the last `up` of this algo used, so `logs`/`status`/`down` talk to the same stack."""
    try:
        data = json.loads((state_dir / LAST_UP).read_text())
        if data.get("algo") == algo:
            return Plan(algo, data["device"], tuple(data["files"]), data.get("project") or None)
    except (OSError, ValueError, KeyError):
        pass
    return Plan(algo, "gpu", (f"compose.{algo}.yml",))


# `.env` in the project directory: compose reads COMPOSE_FILE / COMPOSE_PROJECT_NAME from it, so `docker compose
# logs trainer` (ps, exec, down) typed there talks to the running stack. Only values that are not secret: the
# internal inference key stays in .hermes/inference.key (0600) and reaches compose through the controller's process
# environment; interpolation of it in a hand-typed command gives "" (logs, ps, exec and down do not use it).
DOTENV = ".env"
DOTENV_MARK = "# hermes-stack: written by `hermes-stack up` for the running stack"
DOTENV_PASSTHROUGH = ("HERMES_IMAGE_REPO",)  # non-secret selectors of the controller's own environment


def remove_dotenv(root: Path, project: str) -> bool:
    """After `down`: remove our .env when it names the stack just stopped (a user's own .env is never touched)."""
    path = root / DOTENV
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    if not text.startswith(DOTENV_MARK) or f"\nCOMPOSE_PROJECT_NAME={project}\n" not in text:
        return False
    path.unlink()
    return True


def dotenv_text(plan: Plan, project: str, env: dict[str, str]) -> str:
    """The .env content for the running stack (pure). Never a secret: only names listed here are written."""
    lines = [DOTENV_MARK, "# (no secrets here; `make down` removes it, the next `make up` writes it again)",
             f"COMPOSE_FILE={':'.join(plan.files)}", f"COMPOSE_PROJECT_NAME={project}"]
    for name in ("HERMES_ATROPOS_PORT", "HERMES_INFERENCE_PORT", "HERMES_SERVED_MODEL_NAME"):
        if env.get(name):
            lines.append(f"{name}={env[name]}")
    for name in DOTENV_PASSTHROUGH:
        if os.environ.get(name):
            lines.append(f"{name}={os.environ[name]}")
    return "\n".join(lines) + "\n"


def write_dotenv(root: Path, plan: Plan, project: str, env: dict[str, str]) -> bool:
    """Write .env unless the user has one of their own (then nothing is touched). True when written."""
    path = root / DOTENV
    if path.exists() and not path.read_text(errors="replace").startswith(DOTENV_MARK):
        return False
    tmp = path.with_name(".env.hermes-tmp")
    tmp.write_text(dotenv_text(plan, project, env))
    os.replace(tmp, path)
    return True


def _compose(plan: Plan, env: dict[str, str] | None = None, echo: bool = True):
    from hermes_stack.compose import Compose, stack_params

    params = stack_params(plan.algo, plan.device, _root(), env=env, files=plan.files, project_name=plan.project)
    return Compose(params, echo=(lambda cmd: console.info(f"$ {cmd}")) if echo else None)


# ---- stages -----------------------------------------------------------------------------------------------------------

def _stage(n: int, total: int, text: str) -> float:
    console.out.print(f"[bold cyan][{n}/{total}][/] {text}", highlight=False)
    return time.monotonic()


def _done(started: float, text: str = "done") -> None:
    console.out.print(f"      [green]✓[/] {text} ({time.monotonic() - started:.1f} s)", highlight=False)


def _script(name: str, *args: str) -> str:
    """Run one of our provisioning scripts (argv, no shell string); return its last stdout line."""
    path = _root() / "scripts" / name
    try:  # they call docker (load, import): bounded like every compose call
        done = subprocess.run(["bash", str(path), *args], capture_output=True, text=True, check=False,
                              timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise StackError(f"`bash scripts/{name}` did not finish within {SCRIPT_TIMEOUT_S} s and was stopped. "
                         "Hint: is the Docker daemon answering? `docker info`") from None
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise StackError(f"scripts/{name} failed (exit {done.returncode}): {tail}")
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def compose_env(stack, key: str, base_image: str | None, unlock: bool = False) -> dict[str, str]:
    """Compose's process environment: the key file's variables for the services that need them (secrets become
    Compose secrets), the service environment `up` hands every service (hermes_stack.service_env: the inference key,
    HERMES_UNLOCK, the GPU memory split, names, the user's tuning knobs), and the controller's own selectors."""
    from hermes_stack.service_env import ServiceEnv, compose_environment

    keyfile = getattr(stack, "keyfile", None)
    values = {} if keyfile is None or keyfile.offline else dict(keyfile.values)
    if keyfile is not None and keyfile.tinker_key_defaulted:
        values.pop("TINKER_API_KEY", None)  # the default is a validation aid; the gateway key stays out of the trainer
    env = compose_environment(values, ServiceEnv.for_stack(stack, key, unlock))
    if stack is not None:
        env["HERMES_ATROPOS_PORT"] = str(stack.config.atropos.api_port)  # compose.base.yml's ports and run-api
    if base_image:
        env["HERMES_BASE_IMAGE"] = base_image
    return env


def _validate(algo: str, device: str, unlock: bool, keyfile: Path | None = None, model: str | None = None):
    from hermes_stack.commands.validate import validated_stack

    return validated_stack(algo, Path("configs"), keyfile, unlock=unlock, device=device, model=model)


def _key_from(stack) -> str | None:
    """The inference key the user set explicitly: the key-file line named by inference.api_key_env (by default
    HERMES_INFERENCE_KEY, usually absent: then `inference_key` generates one)."""
    keyfile = getattr(stack, "keyfile", None)
    if keyfile is None or keyfile.offline:
        return None
    return keyfile.get(stack.settings.inference.api_key_env)


def _validated_with_key(algo: str, device: str, unlock: bool, keyfile: Path | None = None,
                        model: str | None = None):
    """The validated stack and the inference key `up` gives the services (registered for redaction)."""
    from hermes_stack.keyfile import register_secrets

    stack = _validate(algo, device, unlock, keyfile, model)
    key = inference_key(_root() / STATE_DIR, _key_from(stack))
    register_secrets({"HERMES_INFERENCE_KEY": key})
    return stack, key


def _stream(compose, argv: list[str], prefix: str = "      ") -> None:
    for line in compose.stream(argv):
        console.info(prefix + line)


def _up(compose, services, wait_timeout: int, on_failure=None) -> None:
    """`compose up --wait`; on failure, run `on_failure` (then `ps` no longer lists what it removed), then raise
    what explain_up_failure makes of it (which services are not ready)."""
    from hermes_stack.compose import CommandFailed
    from hermes_stack.status import explain_up_failure

    try:
        compose.up(services, wait_timeout=wait_timeout)
    except CommandFailed as exc:
        if on_failure:
            on_failure()
        raise explain_up_failure(compose, exc) from None
    except BaseException:  # Ctrl-C: nothing to explain, but clean up
        if on_failure:
            on_failure()
        raise


class DryRunAlongside:
    """The trainer's --dry-run as a one-off container, started together with `up --wait` so its model load overlaps
    the services' start; the dry-run itself waits (bounded by --wait) for inference and Atropos. Its output is kept
    and shown once `up --wait` succeeded; if `up --wait` fails, cancel() removes the container."""

    NETWORK_WAIT_S = 60.0

    def __init__(self, compose, project: str, wait_s: int):
        from hermes_stack.compose import default_network, run_argv

        self._compose, self.network = compose, default_network(project)
        self.name = f"{project}-dry-run-{os.getpid()}"
        self.argv = run_argv(compose.params, "trainer", [*DRY_RUN, "--wait", str(wait_s)], name=self.name)
        self.lines: list[str] = []
        self.failure: Exception | None = None
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dry-run", daemon=True)

    def start(self) -> DryRunAlongside:
        self._thread.start()
        return self

    def _run(self) -> None:
        # `up --wait` creates the project network. Two compose commands creating it at once make two networks of
        # one name (Engine 20.10), and every later command fails as "ambiguous": start once it exists.
        deadline = time.monotonic() + self.NETWORK_WAIT_S
        while not self._compose.network_exists(self.network):
            if self._cancelled.wait(0.1):
                return
            if time.monotonic() > deadline:
                self.failure = StackError(f"network {self.network} did not appear within "
                                          f"{self.NETWORK_WAIT_S:.0f} s of `up`; the dry-run did not start")
                return
        try:
            for line in self._compose.stream(self.argv):
                self.lines.append(line)
        except Exception as exc:  # noqa: BLE001 - handed to the main thread by finish()
            self.failure = exc

    def finish(self, timeout_s: float) -> list[str]:
        """Wait for the dry-run to end; its output lines. `failure` says whether it passed."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.cancel()
            raise StackError(f"dry-run did not end within {timeout_s:.0f} s after the services were healthy; "
                             "its container was removed. Output so far: " + " | ".join(self.lines[-5:]))
        return list(self.lines)

    def cancel(self, within_s: float = 60.0) -> None:
        """Remove the one-off container until its `compose run` has ended (it may not have created it yet)."""
        from hermes_stack.compose import CommandFailed

        self._cancelled.set()
        deadline = time.monotonic() + within_s
        while self._thread.is_alive() and time.monotonic() < deadline:
            try:
                self._compose.docker(["rm", "--force", self.name])
            except CommandFailed:
                pass  # not created yet: try again until `compose run` gives up
            self._thread.join(0.5)


def bring_up(algo: str, device: str, wait_timeout: int, unlock: bool, extra_files: list[str] | None,
             stop_after_dry_run: bool, build: bool = True, keyfile: Path | None = None,
             model: str | None = None) -> Plan:
    from hermes_stack.compose import build_argv, printable, run_argv, stack_files
    from hermes_stack.preflight import SystemProbe, preflight, resolve_device

    _check_algo(algo)
    _check_device(device)
    total = 5 if stop_after_dry_run else 6
    probe = SystemProbe()
    resolved = resolve_device(device, probe)

    t = _stage(1, total, f"validate {algo} configs and key file (device {resolved})")
    stack, key = _validated_with_key(algo, resolved, unlock, keyfile, model)
    _done(t, f"profile {getattr(stack, 'profile', '?')}"
             + (f", model {stack.model}" if getattr(stack, "model", None) else ""))

    t = _stage(2, total, "preflight: Docker engine, Compose v2" + (", NVIDIA toolkit" if resolved == "gpu" else ""))
    findings = preflight(resolved, probe)
    _done(t, ", ".join(f"{f.what} {f.detail}" for f in findings))

    plan = Plan(algo, resolved, stack_files(algo, resolved, extra_files or ()),
                os.environ.get("HERMES_PROJECT_NAME") or None)
    # Before the build: compose reads .env for interpolation too, so a stale one must not pick this build's images.
    dotenv = write_dotenv(_root(), plan, plan.project or f"hermes-{algo}", compose_env(stack, "", None))

    t = _stage(3, total, "build images" if build else "images: using what is built")
    base_image = None
    if build:
        base_image = _script("base-image.sh")
        _script("wheelhouse.sh")
    compose = _compose(plan, compose_env(stack, key, base_image, unlock))
    if build:
        _stream(compose, build_argv(compose.params))
    _done(t)
    save_plan(_root() / STATE_DIR, plan)

    # On CPU the dry-run loads its model while the services start. Not on GPU: SGLang sizes its KV cache from the GPU
    # memory free when it starts, so the trainer's model must not be loaded before it (as in the steady state).
    alongside = resolved == "cpu"
    t = _stage(4, total, f"up --wait (gateway-check, {', '.join(SERVING)}), at most {wait_timeout} s"
                         + (", with the dry-run alongside" if alongside else ""))
    project = compose.params.project_name or f"hermes-{algo}"  # the `name:` in compose.<algo>.yml
    dry = DryRunAlongside(compose, project, wait_timeout)
    if alongside:
        dry.start()
    _up(compose, SERVING, wait_timeout, on_failure=dry.cancel)
    _done(t, "atropos and inference healthy")
    if not alongside:
        dry.start()

    t = _stage(5, total, "dry-run: model loaded, inference generates, Atropos reachable, no optimisation step")
    try:
        lines = dry.finish(wait_timeout + 120)  # its own --wait bounds it; the margin covers the model load
    except BaseException:
        dry.cancel()
        raise
    for line in lines:
        console.info("      " + line)
    if dry.failure is not None:
        code = getattr(dry.failure, "returncode", "?")
        raise StackError(f"dry-run failed (exit {code}); the trainer's output is above. "
                         f"Re-run it alone: {printable(run_argv(compose.params, 'trainer', DRY_RUN))}")
    _done(t, "dry-run passed")

    if not stop_after_dry_run:
        t = _stage(6, total, f"start training: up --wait ({', '.join(TRAINING)})")
        _up(compose, TRAINING, wait_timeout)
        _done(t, "trainer and environment healthy; training runs")

    console.info("")
    console.info("Where to look (in this directory):")
    for line in where_to_look(algo, compose.params, dotenv):
        console.info("  " + line)
    return plan


def where_to_look(algo: str, params, dotenv: bool) -> list[str]:
    """Commands that work as typed after `make up` (pure): make targets, which need no PATH entry, and plain
    `docker compose` when .env names the stack (else the -f form)."""
    from hermes_stack.compose import logs_argv, printable

    logs = "docker compose logs --follow trainer" if dotenv else printable(
        logs_argv(params, "trainer", follow=True, user=True))
    stop = (f"stop:               make down ALGO={algo}   (checkpoints kept; the next `make up` resumes; "
            "VOLUMES=1 deletes them)")
    return [f"trainer step lines: {logs}", f"health and reward:  make status ALGO={algo}", stop]


@app.command()
def up(algo: str = ALGO_OPT, device: str = DEVICE_OPT, wait_timeout: int = TIMEOUT_OPT,
       unlock: bool = UNLOCK_OPT, file: list[str] = FILE_OPT, keyfile: Path = KEYFILE_OPT, model: str = MODEL_OPT,
       no_build: bool = typer.Option(False, "--no-build", help="Use the images already built")) -> None:
    """Validate, preflight, build, start the stack, run the dry-run stage, then start training."""
    bring_up(algo, device, wait_timeout, unlock, file, stop_after_dry_run=False, build=not no_build, keyfile=keyfile,
             model=model)


@app.command("dry-run")
def dry_run(algo: str = ALGO_OPT, device: str = DEVICE_OPT, wait_timeout: int = TIMEOUT_OPT,
            unlock: bool = UNLOCK_OPT, file: list[str] = FILE_OPT, keyfile: Path = KEYFILE_OPT, model: str = MODEL_OPT,
            no_build: bool = typer.Option(False, "--no-build", help="Use the images already built")) -> None:
    """Everything `up` does up to and including the dry-run stage; no training starts."""
    bring_up(algo, device, wait_timeout, unlock, file, stop_after_dry_run=True, build=not no_build, keyfile=keyfile,
             model=model)


@app.command()
def build(algo: str = ALGO_OPT, device: str = DEVICE_OPT) -> None:
    """Build the images (base image and wheelhouse first when missing)."""
    from hermes_stack.compose import build_argv, stack_files
    from hermes_stack.preflight import SystemProbe, preflight, resolve_device

    _check_algo(algo)
    _check_device(device)
    resolved = resolve_device(device, SystemProbe())
    preflight(resolved)
    plan = Plan(algo, resolved, stack_files(algo, resolved))
    base_image = _script("base-image.sh")
    _script("wheelhouse.sh")
    compose = _compose(plan, {"HERMES_BASE_IMAGE": base_image})
    _stream(compose, build_argv(compose.params))


def _read_metrics(compose) -> str:
    """metrics.jsonl from the data volume: exec in the trainer, else `compose cp` (works on a stopped one)."""
    from hermes_stack.compose import CommandFailed

    try:
        return compose.exec("trainer", ["tail", "-n", "500", "/data/metrics.jsonl"])
    except CommandFailed:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "metrics.jsonl"
        try:
            compose.run([*compose.params.base_argv(), "cp", "trainer:/data/metrics.jsonl", str(target)])
        except CommandFailed:
            return ""
        return target.read_text() if target.is_file() else ""


@app.command()
def status(algo: str = ALGO_OPT) -> None:
    """Each service's health, the training step, reward mean with a small trend, the last checkpoint."""
    from hermes_stack.status import event_lines, parse_events, parse_metrics, service_states, summarize

    _check_algo(algo)
    plan = load_plan(_root() / STATE_DIR, algo)
    compose = _compose(plan, echo=False)
    states = service_states(compose.ps())
    if not states:
        console.info(f"hermes-{algo}: no containers (start with: make up ALGO={algo})")
        return
    console.info(f"hermes-{algo} ({plan.device}; {' '.join('-f ' + f for f in plan.files)})")
    for s in states:
        mark = "ok " if s.ok else "!! "
        console.info(f"  {mark}{s.service:<14} {s.describe()}")
    text = _read_metrics(compose)
    for line in summarize(parse_metrics(text)).lines():
        console.info(line)
    for line in event_lines(parse_events(text)):  # e.g. an environment that departed and what the trainer did
        console.info(line)


@app.command()
def logs(service: str = typer.Argument(None, help="atropos, inference, trainer, environment or gateway-check"),
         algo: str = ALGO_OPT, follow: bool = typer.Option(False, "--follow", "-f"),
         tail: int = typer.Option(None, "--tail", help="Only the last N lines per service")) -> None:
    """Service logs (secrets redacted)."""
    from hermes_stack.compose import logs_argv

    _check_algo(algo)
    compose = _compose(load_plan(_root() / STATE_DIR, algo), echo=False)
    for line in compose.stream(logs_argv(compose.params, service, follow, tail)):
        console.info(line)


@app.command()
def down(algo: str = ALGO_OPT,
         volumes: bool = typer.Option(False, "--volumes", help="Also delete the data volume (checkpoints)")) -> None:
    """Stop and remove the stack's containers; the data volume stays unless --volumes."""
    _check_algo(algo)
    plan = load_plan(_root() / STATE_DIR, algo)
    compose = _compose(plan)
    compose.down(volumes=volumes)
    remove_dotenv(_root(), compose.params.project_name or f"hermes-{algo}")
    console.info(f"hermes-{algo} stopped" + ("; volumes removed" if volumes else "; volumes kept"))


def redact_config(text: str) -> str:
    """`compose config` inlines env_file values: hide every value whose name looks secret, plus known secrets."""
    import re

    from hermes_stack.keyfile import is_secret_name, redact, redact_known_secrets

    def hide(match: re.Match) -> str:
        name, value = match.group(2), match.group(3)
        if not is_secret_name(name) or not value.strip('"\' '):
            return match.group(0)
        return f"{match.group(1)}{name}: {redact(value.strip(chr(34) + chr(39)))}"

    text = re.sub(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*): (.+)$", hide, text, flags=re.MULTILINE)
    return redact_known_secrets(text)


@app.command()
def render(algo: str = ALGO_OPT, device: str = DEVICE_OPT, file: list[str] = FILE_OPT,
           unlock: bool = UNLOCK_OPT, keyfile: Path = KEYFILE_OPT, model: str = MODEL_OPT) -> None:
    """Print the exact compose command `up` runs and the merged configuration, secrets redacted."""
    from hermes_stack.compose import printable, stack_files, up_argv
    from hermes_stack.preflight import SystemProbe, resolve_device

    _check_algo(algo)
    _check_device(device)
    resolved = resolve_device(device, SystemProbe())
    # The same validation, key and compose environment as `up`, so what is printed is what `up` runs.
    stack, key = _validated_with_key(algo, resolved, unlock, keyfile, model)
    plan = Plan(algo, resolved, stack_files(algo, resolved, file or ()))
    compose = _compose(plan, compose_env(stack, key, None, unlock), echo=False)
    console.info("# " + printable(up_argv(compose.params, SERVING)))
    console.info("# " + printable(up_argv(compose.params, TRAINING)))
    console.info(redact_config(compose.config()))

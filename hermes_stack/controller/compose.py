"""THE choke point for docker and docker compose calls (and for our provisioning scripts, which call docker).

Typed parameters build the argv (pure, unit-tested); one runner executes it (a list argv, never a shell string)
with a timeout per kind of command (command_timeout, pure) and turns a failure into a StackError carrying the
command, exit code and the tail of stderr, or a timeout into CommandTimedOut naming the command. Secrets travel in
the compose process environment (`ComposeParams.env`), never on the argv, so the printed command is safe to copy.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hermes_stack.algos import ALGOS
from hermes_stack.errors import Problem, StackError

DEVICES = ("cpu", "gpu")  # resolved: `auto` is settled before compose (controller.device)
CPU_OVERRIDE = "compose.cpu.yml"


@dataclass(frozen=True)
class ComposeParams:
    """Everything that selects *which* stack a compose command talks to."""

    files: tuple[str, ...]
    project_directory: Path = Path(".")
    project_name: str | None = None  # None: the `name:` in the first compose file
    profiles: tuple[str, ...] = ()
    # Variables for compose's own process (interpolation of ${...}); may hold secrets, so never on the argv.
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def base_argv(self) -> list[str]:
        # The project is always named: compose ranks COMPOSE_PROJECT_NAME (from the .env the last `up` wrote, for
        # the typed `docker compose`) above the file's `name:`, so `down ALGO=ppo` after `up ALGO=grpo` took the
        # grpo stack down, and with --volumes deleted its checkpoints.
        argv = ["docker", "compose", "--project-name", project_of(self)]
        argv += ["--project-directory", str(self.project_directory)]
        for f in self.files:  # compose resolves -f against the cwd, not --project-directory
            argv += ["-f", str(self.project_directory / f)]
        for p in self.profiles:
            argv += ["--profile", p]
        return argv

    def user_argv(self) -> list[str]:
        """The shorter form for humans: run from the project directory, files relative (named project: as above)."""
        argv = ["docker", "compose", "--project-name", project_of(self)]
        for f in self.files:
            argv += ["-f", f]
        return argv

    def with_env(self, **extra: str) -> ComposeParams:
        merged = dict(self.env) | extra
        return ComposeParams(self.files, self.project_directory, self.project_name, self.profiles,
                             tuple(sorted(merged.items())))


def stack_files(algo: str, device: str, extra_files: Sequence[str] = ()) -> tuple[str, ...]:
    """compose.<algo>.yml, plus the CPU override when there is no GPU, plus any user overrides (last wins)."""
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    return (f"compose.{algo}.yml", *([CPU_OVERRIDE] if device == "cpu" else []), *extra_files)


def stack_params(algo: str, device: str, root: Path, extra_files: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, files: Sequence[str] | None = None,
                 project_name: str | None = None) -> ComposeParams:
    """The stack's compose parameters. HERMES_PROJECT_NAME runs a second, separate stack (the tests use it so
    they never touch a user's running hermes-<algo> stack); else `project_name`, the one the last `up` used."""
    return ComposeParams(files=tuple(files) if files else stack_files(algo, device, extra_files),
                         project_directory=root,
                         project_name=os.environ.get("HERMES_PROJECT_NAME") or project_name or None,
                         env=tuple(sorted((env or {}).items())))


# The longest `--wait-timeout` taken: a day (a first GPU start downloads a model for minutes, not days). Beyond it
# compose refuses the number only after the build, and thread.join's timeout overflows.
MAX_WAIT_TIMEOUT = 86_400


def wait_timeout_problem(seconds: int) -> Problem | None:
    """`--wait-timeout` below 1: compose reads 0 or less as no wait at all, so `up` would go on to training with
    nothing healthy; above MAX_WAIT_TIMEOUT: refused too (a long number shown by its digits, as --replicas)."""
    if 1 <= seconds <= MAX_WAIT_TIMEOUT:
        return None
    shown = str(seconds) if len(str(seconds)) <= 12 else f"a number of {len(str(seconds))} digits"
    return Problem("command line", "--wait-timeout", shown,
                   f"seconds from 1 to {MAX_WAIT_TIMEOUT} (a day; default 900)",
                   "it bounds how long `up --wait` waits for the services to be healthy")


@functools.cache
def _compose_loader():
    """A SafeLoader that reads compose's own tags (!reset, !override) as null; made once, on first use (yaml stays
    out of the commands that never read a compose file)."""
    import yaml

    class ComposeLoader(yaml.SafeLoader):
        pass

    ComposeLoader.add_multi_constructor("!", lambda loader, tag, node: None)
    return ComposeLoader


def read_compose_yaml(path: Path) -> list:
    """A compose file's documents as data (compose takes several, `---` apart). Raises OSError, UnicodeDecodeError
    or yaml.YAMLError."""
    import yaml

    return list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=_compose_loader()))


MAX_YAML_VALUES = 100_000  # a compose file has hundreds; aliases nested ten deep ("billion laughs") reach 10**10


def yaml_shape_problem(text: str) -> str | None:
    """What compose would refuse or choke on that PyYAML lets through, or None: a mapping key given twice (compose:
    "mapping key ... already defined"; PyYAML keeps the last), and aliases that expand past MAX_YAML_VALUES (compose
    expands them, and its process ran at 100 % CPU past our timeout). Counted on the node graph, so an alias costs
    its size without being expanded. Raises yaml.YAMLError for text that is not YAML."""
    import yaml

    sizes: dict[int, int] = {}

    def size(node) -> int:
        if id(node) not in sizes:
            sizes[id(node)] = 0  # a recursive alias counts once
            if isinstance(node, yaml.MappingNode):
                total = 1 + sum(size(k) + size(v) for k, v in node.value)
            elif isinstance(node, yaml.SequenceNode):
                total = 1 + sum(size(v) for v in node.value)
            else:
                total = 1
            sizes[id(node)] = total
        return sizes[id(node)]

    def duplicate(node, seen: set[int]) -> str | None:
        if id(node) in seen or not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            return None
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            lines: dict[str, int] = {}
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value != "<<":  # merge keys may repeat
                    if key.value in lines:
                        return (f"mapping key {key.value!r} given twice: lines {lines[key.value]} and "
                                f"{key.start_mark.line + 1}")
                    lines[key.value] = key.start_mark.line + 1
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
        return next((found for child in children if (found := duplicate(child, seen))), None)

    try:
        for document in yaml.compose_all(text, Loader=_compose_loader()):
            if document is None:
                continue
            if size(document) > MAX_YAML_VALUES:
                return f"YAML aliases that expand to more than {MAX_YAML_VALUES} values"
            if found := duplicate(document, set()):
                return found
    except RecursionError:
        return "YAML nested too deeply to read"
    return None


def compose_services(root: Path, files: Sequence[str]) -> list[str]:
    """The service names the stack's compose files (and the user's -f overrides) declare, in order, once each."""
    import yaml

    names: dict[str, None] = {}
    for name in files:
        try:
            documents = read_compose_yaml(root / name)
        except (OSError, ValueError, yaml.YAMLError):  # compose reports a broken file itself
            continue
        for data in documents:
            services = data.get("services") if isinstance(data, dict) else None
            if isinstance(services, dict):
                names.update(dict.fromkeys(str(s) for s in services))
    return list(names)


def override_file_problem(root: Path, name: str) -> Problem | None:
    """What is wrong with a user's `-f` override (resolved as base_argv resolves it: against the project directory),
    if anything: missing, not a file, not YAML, or not a mapping at its top (compose's own requirement)."""
    import yaml

    path = root / name
    hint = "-f names a compose file layered over the stack's, e.g. -f compose.override.yml (paths from the checkout)"
    if not name.strip():  # `-f ''` (an unset shell variable): the project folder itself, "found  (not a file)"
        return Problem("command line", "-f", f"{name!r} (an empty name)", "a compose override file", hint)
    from hermes_stack.textfile import path_unusable

    unusable = path_unusable(path)  # a name over 255 characters: exists() raises instead of answering
    if unusable is not None:
        return Problem("command line", "-f", f"{unusable}: {name}", "a compose override file", hint)
    if not path.exists():
        return Problem("command line", "-f", f"{name} (no such file: {path})", "a compose override file", hint)
    if not path.is_file():
        return Problem("command line", "-f", f"{name} (not a file)", "a compose override file", hint)
    try:
        if (shape := yaml_shape_problem(path.read_text(encoding="utf-8"))) is not None:
            return Problem("command line", "-f", f"{name} ({shape})", "a compose override file", hint)
        data = read_compose_yaml(path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else type(exc).__name__
        return Problem("command line", "-f", f"{name} (not readable YAML: {reason})", "a compose override file", hint)
    if not data or not all(isinstance(d, dict) for d in data):
        return Problem("command line", "-f", f"{name} (YAML whose top is not a mapping)", "a compose override file "
                       "(services:, volumes:, … at its top)", hint)
    return _unknown_service_problem(root, name, data)


def _unknown_service_problem(root: Path, name: str, documents: list[dict]) -> Problem | None:
    """An override's service that is none of the stack's and could not run on its own (no image, no build, no
    extends): a misspelt name, which compose refuses with exit 1 and no names ("has neither an image nor a build
    context")."""
    from hermes_stack.errors import near_miss

    known = compose_services(root, ("compose.base.yml",))
    for data in documents:
        services = data.get("services")
        for service, body in (services.items() if isinstance(services, dict) else ()):
            service = str(service)
            if service in known or re.fullmatch(r"inference-\d+|router", service):  # (replicas' own services)
                continue
            if isinstance(body, dict) and {"image", "build", "extends"} & set(body):
                continue  # a service of the user's own, as the fake gateway of the tests
            near = near_miss(service, known)
            return Problem("command line", "-f", f"{name} (service {service!r}: none of the stack's, and no image "
                           "or build)", f"one of the stack's services ({', '.join(known)}), or a new one with an "
                           "image", f"did you mean {near}?" if near else "give it an image, or name a service above")
    return None


# ---- argv builders (pure) -----------------------------------------------------------------------------------------

def build_argv(p: ComposeParams, services: Sequence[str] = ()) -> list[str]:
    return [*p.base_argv(), "build", *services]


def up_argv(p: ComposeParams, services: Sequence[str] = (), wait_timeout: int = 600, build: bool = False,
            keep: bool = False) -> list[str]:
    """`keep`: start `services` as their containers are, nothing else (--no-recreate --no-deps): beside a training
    run, whose trainer must keep its container and the secrets it started with. Otherwise --remove-orphans: an
    `inference-3` or a router left by an `up` with more replicas kept running (and holding its GPU) outside the
    router. A one-off container that runs (the dry-run beside the first `up`) is no orphan to compose."""
    argv = [*p.base_argv(), "up", "--detach", "--wait", "--wait-timeout", str(wait_timeout)]
    argv.append("--build" if build else "--no-build")
    argv += ["--no-recreate", "--no-deps"] if keep else ["--remove-orphans"]
    return [*argv, *services]


def run_argv(p: ComposeParams, service: str, command: Sequence[str], no_deps: bool = True,
             name: str | None = None) -> list[str]:
    argv = [*p.base_argv(), "run", "--rm", "--no-TTY"]
    if no_deps:
        argv.append("--no-deps")
    if name:  # a known name, so the controller can remove a one-off it no longer needs
        argv += ["--name", name]
    return [*argv, service, *command]


def exec_argv(p: ComposeParams, service: str, command: Sequence[str]) -> list[str]:
    return [*p.base_argv(), "exec", "--no-TTY", service, *command]


def ps_argv(p: ComposeParams) -> list[str]:
    return [*p.base_argv(), "ps", "--all", "--format", "json"]


def logs_argv(p: ComposeParams, service: str | None = None, follow: bool = False, tail: int | None = None,
              user: bool = False) -> list[str]:
    argv = [*(p.user_argv() if user else p.base_argv()), "logs"]
    if follow:
        argv.append("--follow")
    if tail is not None:
        argv += ["--tail", str(tail)]
    return argv + ([service] if service else [])


def cp_argv(p: ComposeParams, source: str, target: str) -> list[str]:
    return [*p.base_argv(), "cp", source, target]


def project_of(p: ComposeParams) -> str:
    """The project compose runs: --project-name, else the `name:` of compose.<algo>.yml, hermes-<algo>."""
    if p.project_name:
        return p.project_name
    return "hermes-" + Path(p.files[0]).name.removeprefix("compose.").removesuffix(".yml")


def data_volume(p: ComposeParams) -> str:
    """The stack's data volume as Docker names it (compose prefixes the project)."""
    return f"{project_of(p)}_hermes-data"


def volume_read_argv(p: ComposeParams, command: Sequence[str]) -> list[str]:
    """`command` in a throwaway container of the stack's Atropos image with the data volume mounted read-only at
    /data: no network, never a pull (the image is the one `up` built). The caller checks that the volume exists
    first: `docker run -v` would create an empty one."""
    repo = os.environ.get("HERMES_IMAGE_REPO") or "hermes-stack"
    return docker_argv("run", "--rm", "--pull", "never", "--network", "none", "-v", f"{data_volume(p)}:/data:ro",
                       "--entrypoint", command[0], f"{repo}/atropos:latest", *command[1:])


def stop_argv(p: ComposeParams, services: Sequence[str] = ()) -> list[str]:
    """`compose stop`: SIGTERM, then compose's stop_grace_period (the trainer's 60 s: it checkpoints first)."""
    return [*p.base_argv(), "stop", *services]


def down_argv(p: ComposeParams, volumes: bool = False) -> list[str]:
    return [*p.base_argv(), "down", "--remove-orphans", *(["--volumes"] if volumes else [])]


def config_argv(p: ComposeParams, fmt: str = "yaml") -> list[str]:
    return [*p.base_argv(), "config", "--format", fmt]


def printable(argv: Sequence[str]) -> str:
    return shlex.join(argv)


# ---- the runner -----------------------------------------------------------------------------------------------------

# (argv, env, capture) -> stdout. Tests inject a fake; the real one runs the argv (a list, never a shell) with the
# timeout command_timeout() gives it.
Runner = Callable[[list[str], dict[str, str], bool], str]

# Seconds a command may take before it is killed and reported (a hung daemon must not hang the controller).
QUICK_S = 60          # ps, config, inspect, network, rm
PROBE_S = 20          # version, info: preflight's probes (a hung daemon must not hang the preflight)
EXEC_S = 120          # exec / cp in a running container (tail of metrics.jsonl, a kill); image prune
DOWN_S = 240          # down: every container gets its stop_grace_period (the trainer's checkpoint) first
BUILD_S = 3600        # image builds from nothing on 2 cores take minutes
RUN_S = 3600          # one-off containers (the dry-run is bounded by its own --wait as well)
UP_MARGIN_S = 120     # up --wait: compose's own --wait-timeout plus creating the containers
SCRIPT_S = 1800       # `bash scripts/<name>`: base image from nothing (mmdebstrap) ~2 min, wheelhouse ~30 s on 2 cores


def command_timeout(argv: Sequence[str]) -> float | None:
    """The timeout of one docker/compose argv (pure). None only for `logs --follow`, which a person ends."""
    args = list(argv)
    if args[:1] == ["bash"]:  # one of our provisioning scripts (they docker load/import/save)
        return SCRIPT_S
    verb = next((a for a in args[2 if args[1:2] == ["compose"] else 1:] if a in _VERBS), None)
    if verb == "logs":
        return None if ("--follow" in args or "-f" in args[args.index("logs"):]) else QUICK_S
    if verb == "up":
        wait = args[args.index("--wait-timeout") + 1] if "--wait-timeout" in args else "600"
        return float(wait) + UP_MARGIN_S
    return {"build": BUILD_S, "run": RUN_S, "down": DOWN_S, "exec": EXEC_S, "cp": EXEC_S, "version": PROBE_S,
            "info": PROBE_S, "load": BUILD_S, "import": BUILD_S, "save": BUILD_S, "image": EXEC_S}.get(verb or "", QUICK_S)


_VERBS = {"logs", "up", "build", "run", "down", "exec", "cp", "ps", "config", "inspect", "network", "rm", "info",
          "version", "load", "import", "save", "kill", "stop", "start", "image", "volume"}


class CommandTimedOut(StackError):
    """A docker/compose command ran past its timeout and was killed."""

    def __init__(self, argv: Sequence[str], timeout_s: float):
        self.argv, self.timeout_s, self.returncode = list(argv), timeout_s, 124
        super().__init__(f"`{printable(argv)}` did not finish within {timeout_s:g} s and was stopped. Hint: is the "
                         "Docker daemon answering? `docker info`")


def _subprocess_env(env: Mapping[str, str]) -> dict[str, str]:
    return {**os.environ, **env}  # layered over the controller's environment, for the child only


def _descendants(pid: int) -> list[int]:
    """The processes below `pid`, children first, from /proc (Linux; [] elsewhere)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # gone meanwhile
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_tree(proc) -> None:
    """Kill a command that ran past its timeout and what it started: `docker compose` runs the compose plugin as a
    child of the docker CLI, and killing the CLI alone left the plugin running (a YAML alias bomb kept it at 100 %
    CPU). Not for Ctrl-C: the terminal's SIGINT reaches the plugin itself, and compose then winds down its way."""
    import signal

    for pid in [*_descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _run(argv: list[str], env: dict[str, str], capture: bool) -> str:
    import subprocess

    timeout = command_timeout(argv)
    out = subprocess.PIPE if capture else None
    try:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, env=_subprocess_env(env))
    except FileNotFoundError:
        raise CommandFailed(argv, 127, f"{argv[0]}: command not found", "") from None
    try:
        stdout_b, stderr_b = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        proc.communicate()
        raise CommandTimedOut(argv, timeout or 0) from None
    except BaseException:  # Ctrl-C: the terminal's SIGINT reached the command's own children (compose winds down)
        proc.kill()
        proc.wait()
        raise
    stdout = (stdout_b or b"").decode(errors="replace")
    if proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, (stderr_b or b"").decode(errors="replace"), stdout)
    return stdout


def _stream(argv: list[str], env: dict[str, str]) -> Iterator[str]:
    """stdout and stderr lines as they come; the process is killed when it runs past its timeout."""
    import subprocess
    import threading

    timeout = command_timeout(argv)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_subprocess_env(env))
    except FileNotFoundError:
        raise CommandFailed(argv, 127, f"{argv[0]}: command not found", "") from None
    expired = threading.Event()

    def watchdog() -> None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            expired.set()
            _kill_tree(proc)

    if timeout is not None:
        threading.Thread(target=watchdog, daemon=True).start()
    tail: list[str] = []
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.decode(errors="replace").rstrip("\n")
            tail = [*tail[-19:], text]
            yield text
        code = proc.wait()
    finally:
        if proc.poll() is None:  # the caller stopped reading (Ctrl-C): do not leave the command behind
            proc.kill()
            proc.wait()
    if expired.is_set():
        raise CommandTimedOut(argv, timeout or 0)
    if code != 0:
        raise CommandFailed(argv, code, "\n".join(tail))


# (argv, env) -> lines of stdout and stderr as they come.
Streamer = Callable[[list[str], dict[str, str]], Iterator[str]]


class CommandFailed(StackError):
    """A docker/compose command exited non-zero. Carries the command, exit code and output."""

    def __init__(self, argv: Sequence[str], exit_code: int, stderr: str, stdout: str = ""):
        self.argv, self.returncode, self.stderr, self.stdout = list(argv), exit_code, stderr, stdout
        tail = " | ".join(line.strip() for line in stderr.strip().splitlines()[-3:] if line.strip())
        super().__init__(f"`{printable(argv)}` exited {exit_code}" + (f": {tail}" if tail else ""))


class Compose:
    """Runs compose argv for one stack. `echo` sees every command before it runs (the controller logs them)."""

    def __init__(self, params: ComposeParams, runner: Runner = _run,
                 echo: Callable[[str], None] | None = None, streamer: Streamer = _stream):
        self.params, self._runner, self._echo, self._streamer = params, runner, echo, streamer

    def stream(self, argv: list[str]) -> Iterator[str]:
        """Lines as they come (build progress, dry-run, logs -f), so the caller can redact and show them."""
        if self._echo:
            self._echo(printable(argv))
        return self._streamer(argv, dict(self.params.env))

    def run(self, argv: list[str], capture: bool = True) -> str:
        if self._echo:
            self._echo(printable(argv))
        # Layered over os.environ for the child process only.
        return self._runner(argv, dict(self.params.env), capture)

    def build(self, services: Sequence[str] = (), capture: bool = False) -> str:
        return self.run(build_argv(self.params, services), capture=capture)

    def up(self, services: Sequence[str] = (), wait_timeout: int = 600, capture: bool = True,
           keep: bool = False) -> str:
        return self.run(up_argv(self.params, services, wait_timeout, keep=keep), capture=capture)

    def exec(self, service: str, command: Sequence[str]) -> str:
        return self.run(exec_argv(self.params, service, command))

    def ps(self) -> list[dict]:
        return parse_ps(self.run(ps_argv(self.params)))

    def stop(self, services: Sequence[str] = ()) -> str:
        return self.run(stop_argv(self.params, services))

    def down(self, volumes: bool = False) -> str:
        return self.run(down_argv(self.params, volumes))

    def network_exists(self, name: str) -> bool:
        """Polled, so not echoed."""
        try:
            self._runner(docker_argv("network", "inspect", "--format", "{{.Id}}", name), dict(self.params.env), True)
        except CommandFailed:
            return False
        return True

    def docker(self, args: Sequence[str]) -> str:
        """A plain docker call (inspect, rm) through the same runner."""
        return self.run(docker_argv(*args))

    def has_data_volume(self) -> bool:
        """The project's data volume exists (a run's checkpoints and metrics, kept by `down`)."""
        try:
            self.docker(["volume", "inspect", "--format", "{{.Name}}", data_volume(self.params)])
        except CommandFailed:
            return False
        return True

    def config(self, fmt: str = "yaml") -> str:
        return self.run(config_argv(self.params, fmt))


def parse_ps(text: str) -> list[dict]:
    """`compose ps --format json` prints one JSON object per line (v2.21+) or one JSON array (older v2)."""
    import json

    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


BUILD_LABEL = "hermes-stack.image"  # set on every image the compose files build (compose.base.yml, x-build-labels)


def prune_built_images_argv() -> list[str]:
    """Untagged images left by our own rebuilds (the label), never anyone else's; images in use are kept by Docker."""
    return docker_argv("image", "prune", "--force", "--filter", f"label={BUILD_LABEL}")


def default_network(project: str) -> str:
    """The network compose makes for a project whose files declare none: `<project>_default`."""
    return f"{project}_default"


def docker_argv(*args: str) -> list[str]:
    """Plain docker (not compose) calls, e.g. `docker network inspect`."""
    return ["docker", *args]


def probe(argv: Sequence[str]) -> tuple[int, str, str]:
    """A read-only check of the host's Docker (preflight: `docker version`, `docker info`): exit code, stdout and
    stderr, stripped. Never raises: a missing CLI is 127, a hung daemon 124 after PROBE_S."""
    try:
        return 0, _run(list(argv), {}, True).strip(), ""
    except CommandFailed as exc:
        return exc.returncode, exc.stdout.strip(), exc.stderr.strip()
    except CommandTimedOut as exc:
        return exc.returncode, "", str(exc)


def run_script(root: Path, name: str, *args: str) -> str:
    """Run one of our provisioning scripts, scripts/<name> (argv, no shell string; they call docker): bounded like
    every docker call. Its last stdout line."""
    try:
        out = _run(["bash", str(root / "scripts" / name), *args], {}, True)
    except CommandTimedOut:
        raise StackError(f"`bash scripts/{name}` did not finish within {SCRIPT_S} s and was stopped. "
                         "Hint: is the Docker daemon answering? `docker info`") from None
    except CommandFailed as exc:
        tail = " | ".join(exc.stderr.strip().splitlines()[-3:])
        raise StackError(f"scripts/{name} failed (exit {exc.returncode}): {tail}") from None
    lines = out.strip().splitlines()
    return lines[-1] if lines else ""

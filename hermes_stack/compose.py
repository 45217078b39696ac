"""THE choke point for docker and docker compose calls.

Typed parameters build the argv (pure, unit-tested); one runner executes it through python-on-whales' `run`
(a list argv, never a shell string) and turns a failure into a StackError carrying the command, exit code and the
tail of stderr. Secrets travel in the compose process environment (`ComposeParams.env`), never on the argv, so the
printed command is safe to copy.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hermes_stack.errors import StackError

ALGOS = ("ppo", "grpo")
DEVICES = ("cpu", "gpu")
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
        argv = ["docker", "compose"]
        if self.project_name:
            argv += ["--project-name", self.project_name]
        argv += ["--project-directory", str(self.project_directory)]
        for f in self.files:  # compose resolves -f against the cwd, not --project-directory
            argv += ["-f", str(self.project_directory / f)]
        for p in self.profiles:
            argv += ["--profile", p]
        return argv

    def user_argv(self) -> list[str]:
        """The shorter form for humans: run from the project directory, files relative."""
        argv = ["docker", "compose"]
        if self.project_name:
            argv += ["--project-name", self.project_name]
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
                 env: Mapping[str, str] | None = None, files: Sequence[str] | None = None) -> ComposeParams:
    """The stack's compose parameters. HERMES_PROJECT_NAME runs a second, separate stack (the tests use it so
    they never touch a user's running hermes-<algo> stack)."""
    return ComposeParams(files=tuple(files) if files else stack_files(algo, device, extra_files),
                         project_directory=root, project_name=os.environ.get("HERMES_PROJECT_NAME") or None,
                         env=tuple(sorted((env or {}).items())))


# ---- argv builders (pure) -----------------------------------------------------------------------------------------

def build_argv(p: ComposeParams, services: Sequence[str] = ()) -> list[str]:
    return [*p.base_argv(), "build", *services]


def up_argv(p: ComposeParams, services: Sequence[str] = (), wait_timeout: int = 600, build: bool = False) -> list[str]:
    argv = [*p.base_argv(), "up", "--detach", "--wait", "--wait-timeout", str(wait_timeout)]
    argv.append("--build" if build else "--no-build")
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


def down_argv(p: ComposeParams, volumes: bool = False) -> list[str]:
    return [*p.base_argv(), "down", "--remove-orphans", *(["--volumes"] if volumes else [])]


def config_argv(p: ComposeParams, fmt: str = "yaml") -> list[str]:
    return [*p.base_argv(), "config", "--format", fmt]


def printable(argv: Sequence[str]) -> str:
    return shlex.join(argv)


# ---- the runner -----------------------------------------------------------------------------------------------------

# (argv, env, capture) -> stdout. Tests inject a fake; the real one is python-on-whales' run.
Runner = Callable[[list[str], dict[str, str], bool], str]


def _whales_run(argv: list[str], env: dict[str, str], capture: bool) -> str:
    from python_on_whales.exceptions import DockerException
    from python_on_whales.utils import run

    try:
        out = run(argv, capture_stdout=capture, capture_stderr=capture, env=env)
    except DockerException as exc:
        raise CommandFailed(argv, exc.return_code, exc.stderr or "", exc.stdout or "") from None
    except FileNotFoundError:
        raise CommandFailed(argv, 127, f"{argv[0]}: command not found", "") from None
    return out or ""


def _whales_stream(argv: list[str], env: dict[str, str]) -> Iterator[str]:
    from python_on_whales.exceptions import DockerException
    from python_on_whales.utils import stream_stdout_and_stderr

    stderr: list[str] = []
    try:
        for source, line in stream_stdout_and_stderr(argv, env=env):
            text = line.decode(errors="replace").rstrip("\n")
            if source == "stderr":
                stderr.append(text)
            yield text
    except DockerException as exc:
        raise CommandFailed(argv, exc.return_code, "\n".join(stderr[-20:])) from None


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

    def __init__(self, params: ComposeParams, runner: Runner = _whales_run,
                 echo: Callable[[str], None] | None = None, streamer: Streamer = _whales_stream):
        self.params, self._runner, self._echo, self._streamer = params, runner, echo, streamer

    def stream(self, argv: list[str]) -> Iterator[str]:
        """Lines as they come (build progress, dry-run, logs -f), so the caller can redact and show them."""
        if self._echo:
            self._echo(printable(argv))
        return self._streamer(argv, dict(self.params.env))

    def run(self, argv: list[str], capture: bool = True) -> str:
        if self._echo:
            self._echo(printable(argv))
        # python-on-whales layers these over os.environ for the child process only.
        return self._runner(argv, dict(self.params.env), capture)

    def build(self, services: Sequence[str] = (), capture: bool = False) -> str:
        return self.run(build_argv(self.params, services), capture=capture)

    def up(self, services: Sequence[str] = (), wait_timeout: int = 600, capture: bool = True) -> str:
        return self.run(up_argv(self.params, services, wait_timeout), capture=capture)

    def run_once(self, service: str, command: Sequence[str], capture: bool = True) -> str:
        return self.run(run_argv(self.params, service, command), capture=capture)

    def exec(self, service: str, command: Sequence[str]) -> str:
        return self.run(exec_argv(self.params, service, command))

    def ps(self) -> list[dict]:
        return parse_ps(self.run(ps_argv(self.params)))

    def logs(self, service: str | None = None, follow: bool = False, tail: int | None = None,
             capture: bool = True) -> str:
        return self.run(logs_argv(self.params, service, follow, tail), capture=capture)

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
        """A plain docker call (inspect, cp) through the same runner."""
        return self.run(docker_argv(*args))

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


def default_network(project: str) -> str:
    """The network compose makes for a project whose files declare none: `<project>_default`."""
    return f"{project}_default"


def docker_argv(*args: str) -> list[str]:
    """Plain docker (not compose) calls, e.g. `docker info`, for preflight."""
    return ["docker", *args]


def run_docker(args: Sequence[str], runner: Runner = _whales_run, env: Mapping[str, str] | None = None) -> str:
    return runner(docker_argv(*args), dict(env or {}), True)

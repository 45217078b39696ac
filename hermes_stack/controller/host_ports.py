"""Preflight of the host ports a stack publishes (compose.base.yml: Atropos and inference on 127.0.0.1): a port
another stack holds is named with that stack, the directory it was started from and the command that stops it,
before anything is created (exit 2). Without this, `up` of a second algorithm failed after ~10 s with the daemon's
"Bind for 127.0.0.1:8000 failed: port is already allocated" and left containers behind in the "Created" state.

The decision (`taken_ports`) is a pure function of what `docker ps` reports; probing is at the edges.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from hermes_stack.errors import HermesError, Problem

# One line per running container: its compose project, the directory compose ran in, its published ports.
PS_FORMAT = ('{{.Label "com.docker.compose.project"}}\t{{.Label "com.docker.compose.project.working_dir"}}\t'
             "{{.Ports}}")
_PUBLISHED = re.compile(r"(?:[\d.]+|\[?[0-9a-f:]*\]?):(\d+)(?:-(\d+))?->")


@dataclass(frozen=True)
class Holder:
    project: str  # "" for a container outside compose
    directory: str
    port: int


class PortsTaken(HermesError):
    """Bad input in the sense of the house rules: nothing was started, the user decides which stack runs."""

    exit_code = 2

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(p.line() for p in problems))

    def lines(self) -> list[str]:
        return [p.line() for p in self.problems]


def parse_ps(text: str) -> list[Holder]:
    """`docker ps --format PS_FORMAT` -> every published host port with the project holding it."""
    out = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        project, directory, ports = parts
        for m in _PUBLISHED.finditer(ports):
            first, last = int(m.group(1)), int(m.group(2) or m.group(1))
            out += [Holder(project, directory, p) for p in range(first, last + 1)]
    return out


def _stop_command(holder: Holder) -> str:
    if not holder.project:
        return "stop that container (`docker ps` lists it)"
    algo = holder.project.removeprefix("hermes-") if holder.project in ("hermes-ppo", "hermes-grpo") else None
    if algo:
        return f"stop it with `make down ALGO={algo}` in {holder.directory or 'its checkout'}" \
               f" (or `docker compose -p {holder.project} down` anywhere)"
    return f"stop it with `docker compose -p {holder.project} down`"


def taken_ports(needed: dict[str, int], holders: Iterable[Holder], own_project: str,
                bound: Callable[[int], bool] = lambda _port: False) -> list[Problem]:
    """One Problem per needed port that another stack (or program) holds. The stack's own project may hold them: a
    second `up` of a running stack restarts it in place."""
    by_port: dict[int, Holder] = {}
    for h in holders:
        by_port.setdefault(h.port, h)
    problems = []
    stacks: dict[tuple[str, str], list[tuple[str, int]]] = {}  # a stack's ports: one line for the one stack
    for key, port in needed.items():
        holder = by_port.get(port)
        if holder is not None and holder.project == own_project:
            continue
        if holder is not None and holder.project:
            stacks.setdefault((holder.project, holder.directory), []).append((key, port))
        elif holder is not None:
            problems.append(Problem(f"host port {port}", key, "a container holding it", "a free port for " +
                                    own_project, _stop_command(holder)))
        elif bound(port):
            problems.append(Problem(f"host port {port}", key, "a program outside Docker listening on it",
                                    "a free port for " + own_project,
                                    f"stop that program (`ss -ltnp 'sport = :{port}'` names it), or change {key}"))
    for (project, directory), taken in stacks.items():
        ports = " and ".join(str(port) for _, port in taken)
        who = f"the running stack {project}" + (f" (started in {directory})" if directory else "")
        problems.insert(0, Problem(f"host port{'s' if len(taken) > 1 else ''} {ports}", ", ".join(k for k, _ in taken),
                                   f"{who} holding {'them' if len(taken) > 1 else 'it'}",
                                   f"{'free ports' if len(taken) > 1 else 'a free port'} for {own_project}",
                                   _stop_command(Holder(project, directory, taken[0][1]))))
    return problems


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing can bind `host:port` now (another program listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def check_host_ports(needed: dict[str, int], own_project: str,
                     run: Callable[[Sequence[str]], tuple[int, str, str]] | None = None,
                     bound: Callable[[int], bool] | None = None) -> None:
    """Raise PortsTaken naming every needed port another stack or program holds. `run` is the preflight's docker
    probe (hermes_stack.controller.compose.probe by default)."""
    if run is None:
        from hermes_stack.controller.compose import probe as run
    bound = bound or port_in_use
    rc, out, _ = run(["docker", "ps", "--format", PS_FORMAT])
    holders = parse_ps(out) if rc == 0 else []
    own = {h.port for h in holders if h.project == own_project}
    problems = taken_ports(needed, holders, own_project, lambda p: p not in own and bound(p))
    if problems:
        raise PortsTaken(problems)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m hermes_stack.controller.host_ports --for-tests` (scripts/run-tests.sh, before the Docker tier): the
    shipped configs' host ports must be free of every stack but the tests' own (hermes-test-*, which the tests take
    down themselves); else one line per port naming what holds it and how to stop it, and exit 2."""
    import sys

    from hermes_stack.config.loader import load_stack
    from hermes_stack.controller.compose import probe
    from hermes_stack.controller.stack_state import project_root

    if list(argv if argv is not None else sys.argv[1:]) != ["--for-tests"]:
        print("usage: python -m hermes_stack.controller.host_ports --for-tests", file=sys.stderr)
        return 2
    stack = load_stack("grpo", project_root() / "configs", profile="embedded")
    needed = {"[atropos] api_port": stack.config.atropos.api_port, "inference.port": stack.settings.inference.port}
    rc, out, _ = probe(["docker", "ps", "--format", PS_FORMAT])
    holders = parse_ps(out) if rc == 0 else []
    tests = {h.port for h in holders if h.project.startswith("hermes-test")}
    others = [h for h in holders if not h.project.startswith("hermes-test")]
    problems = taken_ports(needed, others, "hermes-test", lambda p: p not in tests and port_in_use(p))
    for p in problems:
        print(f"error: the Docker tests need this port: {p.line()}", file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())

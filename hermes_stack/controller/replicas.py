"""`make up REPLICAS=N` (settings inference.replicas): the compose override that puts N inference replicas behind
SGLang's router, written by `up` to .hermes/replicas-<algo>.yml and layered after compose.<algo>.yml (and
compose.cpu.yml). With one replica nothing is written and the stack is exactly the one of compose.<algo>.yml.

Generated services, not `deploy.replicas`: replica i must be pinned to GPU i (compose device ids, one per service)
and the router needs each replica's own address for its static `--worker-urls` (dynamically registered workers
vanish when the router's container restarts). Replica 1 keeps the service name `inference`; the others are
`inference-<i>`, each extending it. The router (hermes_stack/router) takes the inference port on the host; the
replicas publish none. The trainer and the environment generate through the router; the trainer pushes weights to
each replica directly (HERMES_INFERENCE_REPLICA_URLS, hermes_stack/trainer/weights_sync.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from hermes_stack.service_env import replica_service

PORT = "${HERMES_INFERENCE_PORT:-8001}"
# What compose.cpu.yml does to `inference`, again for each extra replica: an override file changes only the services
# it names, and `extends` reads the service as compose.<algo>.yml defines it (the GPU one).
CPU_REPLICA = """\
    build: !reset null               # the image `inference` builds (one build, not one per replica)
    image: ${HERMES_IMAGE_REPO:-hermes-stack}/trainer:cpu
    deploy: !reset {}
    ipc: !reset null
    ulimits: !reset {}
    environment: {HERMES_PROFILE: embedded}
    healthcheck: {start_period: 120s}
"""
GPU_REPLICA = """\
    build: !reset null
"""


STATE = ".hermes"  # hermes_stack.controller.stack_state.STATE_DIR, relative to the project directory


def override_name(algo: str) -> str:
    return f"{STATE}/replicas-{algo}.yml"


def up_command(algo: str, replicas: int, project: str | None = None, configured: int = 1) -> str:
    """The `make up` that starts (or resumes) a stack of `replicas` inference replicas (pure): every hint that sends
    a user back to `up` names the count, or the stack it starts is another one. `configured`: what a `make up`
    without REPLICAS= starts (settings inference.replicas); the count is named wherever it differs. `project`:
    named when it is not the algorithm's default (run_identity.make_for)."""
    from hermes_stack.run_identity import make_for

    named = replicas > 1 or (replicas == 1 and configured != 1)  # 0: no replica known (none in `ps`)
    return make_for(project or f"hermes-{algo}", algo, "up") + (f" REPLICAS={replicas}" if named else "")


def render_override_name(algo: str) -> str:
    """Where `render` writes its override: up's own file belongs to the stack `up` started, and a `render REPLICAS=1`
    that removed it left `status`, `logs` and `down` naming a file that was gone."""
    return f"{STATE}/render/replicas-{algo}.yml"


_HEADER = re.compile(r"^# Written by `hermes-stack up` for (\d+) inference replicas")


def replicas_in(root: Path, files: list[str] | tuple[str, ...], algo: str) -> int:
    """The replica count of the stack whose compose files are `files` (the last `up`'s plan): 1 unless up's
    override is among them and still says its count in its first line."""
    if override_name(algo) not in files:
        return 1
    try:
        with (root / override_name(algo)).open() as f:
            found = _HEADER.match(f.readline())
    except OSError:
        return 1
    return int(found.group(1)) if found else 1


def gpu_pin(i: int) -> str:
    """Replica i (1-based) on GPU i-1: SGLang's own compose reservation with a device id."""
    return ("    deploy:\n      resources:\n        reservations:\n          devices: !override\n"
            f"            - {{driver: nvidia, device_ids: [\"{i - 1}\"], capabilities: [gpu]}}\n")


def override_text(algo: str, device: str, replicas: int, entry: str) -> str:
    """The override for `replicas` > 1 (pure). `entry`: compose.<algo>.yml (compose resolves an override's `extends` file against the project
    directory, not the override's own folder)."""
    assert replicas > 1, replicas
    out = [f"# Written by `hermes-stack up` for {replicas} inference replicas behind SGLang's router",
           "# (hermes_stack/controller/replicas.py); `up` writes it again each time. Layered after " + entry + ".",
           "services:",
           "  inference:",
           "    ports: !reset []                 # the router takes the inference port on the host"]
    if device == "gpu":
        out.append(gpu_pin(1).rstrip("\n"))
    for i in range(2, replicas + 1):
        out += [f"  {replica_service(i)}:", f"    extends: {{file: {entry}, service: inference}}",
                "    ports: !reset []"]
        out.append((CPU_REPLICA if device == "cpu" else GPU_REPLICA + gpu_pin(i)).rstrip("\n"))
    replica_deps = "".join(f"      {replica_service(i)}: {{condition: service_started}}\n"
                           for i in range(1, replicas + 1))
    out.append(f"""\
  router:                            # SGLang's router (sglang-router, docs/scaling.md) on the atropos image
    extends: {{file: {entry}, service: atropos}}
    build: !reset null
    command: ["python", "-m", "hermes_stack.router"]
    ports: !override ["127.0.0.1:{PORT}:{PORT}"]
    secrets: [{{source: hermes_inference_key, mode: 0444}}]
    healthcheck:
      test: ["CMD", "python", "-m", "hermes_stack.health", "router", "--wait", "5", "--hold", "20"]
      start_period: 900s             # healthy once one replica is: a GPU replica loads for minutes
    depends_on:
{replica_deps.rstrip(chr(10))}
  trainer:
    environment: &via-router {{HERMES_INFERENCE_URL: "http://router:{PORT}/v1"}}
    depends_on: {{router: {{condition: service_healthy}}}}
  environment:
    environment: *via-router
    depends_on: {{router: {{condition: service_healthy}}}}""")
    return "\n".join(out) + "\n"


def serving_services(replicas: int) -> list[str]:
    """The inference services `up --wait` starts first: the replicas and, with more than one, the router."""
    return [replica_service(i) for i in range(1, replicas + 1)] + (["router"] if replicas > 1 else [])


def write_override(root: Path, algo: str, device: str, replicas: int, name: str | None = None) -> str | None:
    """Write (replicas > 1) or remove (1) the override at `name` (up's own by default); its path relative to the
    project directory, or None."""
    name = name or override_name(algo)
    path = root / name
    if replicas <= 1:
        path.unlink(missing_ok=True)
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(override_text(algo, device, replicas, f"compose.{algo}.yml"))
    return name

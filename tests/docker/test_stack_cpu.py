"""The real CPU stack (embedded profile) for PPO and GRPO, driven through the controller's own CLI:
all healthchecks pass, the dry-run stage passes, training steps change the model, and `down -v` leaves nothing.
A broken inference healthcheck must fail `up` naming the service, within the timeout.

Secrets ride on the same two stacks (no stack of their own): PPO runs offline (no key file, a generated inference
key); GRPO runs online from a copy of the project with a key file ($HERMES_KEYFILE) whose gateway is the fake
gateway in a container of the project, and with a locked field changed under `up --unlock`, which every container
must accept. For both, nothing that validate, render, up, status and logs print (raw `docker compose logs` and
`docker inspect` included) holds any secret value or any 8-character piece of one."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hermes_stack.controller.compose import parse_ps

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
WAIT = "600"
# A project of its own, so the tests never touch a user's running hermes-<algo> stack.
PROJECT = "hermes-test-{algo}"

# Runs inside the trainer container: largest parameter change between the baked-in model and the newest weights.
WEIGHT_DELTA = r"""
import glob, os
from safetensors.torch import load_file
base = {}
for f in glob.glob(os.environ["HERMES_EMBEDDED_MODEL"] + "/*.safetensors"):
    base.update(load_file(f))
steps = sorted(glob.glob("/data/weights/step-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
new = {}
for f in glob.glob(steps[-1] + "/*.safetensors"):
    new.update(load_file(f))
common = [k for k in new if k in base and new[k].shape == base[k].shape]
print(len(steps), len(common), max(float((new[k].float() - base[k].float()).abs().max()) for k in common))
"""


@dataclass
class Where:
    """Where the controller runs: the project directory (the repository, or a copy with changed configs), the key
    file it is given, and the compose override files of that run."""

    root: Path = ROOT
    env: dict[str, str] = field(default_factory=dict)
    extra_files: tuple[str, ...] = ()


HERE: dict[str, Where] = {}  # algo -> where its stack runs (set by the test)


def hs(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    algo = args[args.index("--algo") + 1]
    where = HERE.get(algo, Where())
    env = {**os.environ, "HERMES_ROOT": str(where.root), "HERMES_PROJECT_NAME": PROJECT.format(algo=algo),
           **where.env}
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=where.root, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def compose(algo: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Plain `docker compose`, as a user would type it: no key file, no secrets' variables (unless `env` has some)."""
    from hermes_stack.service_env import RECEIVERS

    where = HERE.get(algo, Where())
    files = [f"compose.{algo}.yml", "compose.cpu.yml", *where.extra_files]
    plain = {k: v for k, v in os.environ.items() if k not in RECEIVERS}
    return subprocess.run(["docker", "compose", "--project-name", PROJECT.format(algo=algo),
                           "--project-directory", str(where.root),
                           *[a for f in files for a in ("-f", str(where.root / f))], *args],
                          capture_output=True, text=True, check=False, timeout=300, env={**plain, **(env or {})})


def containers(project: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def metrics(algo: str) -> list[dict]:
    done = compose(algo, "exec", "-T", "trainer", "cat", "/data/metrics.jsonl")
    records = []
    for line in done.stdout.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    return records


# The online case's key file: every secret a random value, so no 8-character piece of one occurs by chance.
def key_file_lines() -> dict[str, str]:
    return {"TAOTOKEN_API_KEY": "sk-" + secrets.token_hex(20), "TAOTOKEN_BASE_URL": "http://fake-gateway:9000",
            "TAOTOKEN_MODEL": "fake-gpt", "TINKER_API_KEY": "tml-" + secrets.token_hex(20),
            "HF_TOKEN": "hf_" + secrets.token_hex(16)}  # a line no service needs


def online_copy(tmp: Path) -> Where:
    """A copy of the project's compose files and configs with `tinker.max_token_trainer_length` changed (locked),
    the fake gateway's files, and a key file; images are the repository's (built by the controller beforehand)."""
    for name in ("compose.base.yml", "compose.grpo.yml", "compose.ppo.yml", "compose.cpu.yml"):
        shutil.copy(ROOT / name, tmp / name)
    shutil.copytree(ROOT / "configs", tmp / "configs")
    shutil.copytree(ROOT / "tests" / "fakes", tmp / "tests" / "fakes", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "tests/docker/fixtures/fake-gateway.yml", tmp / "fake-gateway.yml")
    settings = tmp / "configs" / "settings_grpo.json"
    changed = settings.read_text().replace('"max_token_trainer_length": 9000', '"max_token_trainer_length": 8000')
    assert changed != settings.read_text()
    settings.write_text(changed)
    keys = tmp / "keys.env"
    keys.write_text("".join(f"{k}={v}\n" for k, v in key_file_lines().items()))
    keys.chmod(0o600)
    return Where(tmp, {"HERMES_KEYFILE": str(keys)}, ("fake-gateway.yml",))


def secret_values(where: Where) -> list[str]:
    """Every secret this run holds: the key file's secret values and the inference key the controller used."""
    from hermes_stack.keyfile import load_keyfile
    from hermes_stack.redaction import is_secret_name

    values = [(where.root / ".hermes" / "inference.key").read_text().strip()]
    if "HERMES_KEYFILE" in where.env:
        keyfile = load_keyfile(where.env["HERMES_KEYFILE"], register=False)
        values += [v for k, v in keyfile.values.items() if is_secret_name(k)]
    return values


def leaks(secret_list: list[str], outputs: list[str]) -> list[str]:
    """Each secret, and each 8-character piece of one, found in any output."""
    text = "\n".join(outputs)
    return [piece for value in secret_list for piece in {value, *(value[i:i + 8] for i in range(len(value) - 7))}
            if piece in text]


def assert_running_stack_is_locked_down(algo: str, *more_output: str) -> None:
    """Issue 3's and issue 13's invariants, on the real running containers: published ports on loopback only, no
    container as root, no secret in `docker inspect`, and no secret nor any 8-character piece of one in any output
    (raw `docker compose logs` included, which bypasses our redactor)."""
    rows = parse_ps(compose(algo, "ps", "--format", "json").stdout)
    published = [p for row in rows for p in row.get("Publishers") or [] if p.get("PublishedPort")]
    assert published, rows
    assert {p["URL"] for p in published} == {"127.0.0.1"}, published
    for row in rows:
        uid = compose(algo, "exec", "-T", row["Service"], "id", "-u")
        assert uid.returncode == 0 and uid.stdout.strip() != "0", (row["Service"], uid.stdout, uid.stderr)
    where = HERE.get(algo, Where())
    keys = secret_values(where)
    outputs = [compose(algo, "logs").stdout, compose(algo, "logs").stderr, *more_output]
    for command in (("logs", "--algo", algo), ("render", "--algo", algo, "--device", "cpu", "--unlock"),
                    ("validate", "--algo", algo, "--device", "cpu", "--unlock")):
        done = hs(*command)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        outputs += [done.stdout, done.stderr]
    assert keys and all(len(k) > 16 for k in keys)
    assert leaks(keys, outputs) == [], "a secret (or a piece of one) was printed"
    assert any("HERMES_INFERENCE_KEY" in out for out in outputs), "render no longer shows the inference key's name"
    ids = [row["ID"] for row in rows]
    inspect = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, check=True).stdout
    assert leaks(keys, [inspect]) == [], "a secret is visible in docker inspect"
    # ... yet each service holds the secrets it needs, and only those (read inside, never printed here).
    have = {}
    for row in rows:
        listed = compose(algo, "exec", "-T", row["Service"], "sh", "-c", "ls /run/secrets 2>/dev/null || true")
        have[row["Service"]] = set(listed.stdout.split())
    online = "HERMES_KEYFILE" in where.env
    assert have["atropos"] == set() and have["inference"] == {"hermes_inference_key"}, have
    assert have["trainer"] == {"hermes_inference_key", *(["tinker_api_key"] if online else [])}, have
    assert have["environment"] == {"hermes_inference_key", *(["taotoken_api_key"] if online else [])}, have


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
def test_cpu_stack_is_healthy_passes_dry_run_trains_and_tears_down(algo, tmp_path):
    project = PROJECT.format(algo=algo)
    hs("down", "--algo", algo, "--volumes")
    up_args = []
    if algo == "grpo":  # online, from a copy with a changed locked field: the images come from the repository
        built = hs("build", "--algo", algo, "--device", "cpu")
        assert built.returncode == 0, built.stderr[-3000:]
        HERE[algo] = online_copy(tmp_path)
        refused = hs("validate", "--algo", algo, "--device", "cpu")
        assert refused.returncode == 2 and "max_token_trainer_length" in refused.stderr, refused.stderr
        up_args = ["--unlock", "--no-build", "-f", "fake-gateway.yml"]
    try:
        up = hs("up", "--algo", algo, "--device", "cpu", "--wait-timeout", WAIT, *up_args)
        assert up.returncode == 0, f"up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        assert "dry-run passed" in up.stdout
        # The dry-run's proof of the loop, each check one line with its figure (trainer/prompt_check.py,
        # memory_check.py, policy_checks.py), before the training stage starts.
        checks = [line.strip() for line in up.stdout.splitlines() if line.strip().startswith("dry-run check ")]
        assert [c.split(":")[0] for c in checks] == ["dry-run check prompts", "dry-run check memory",
                                                    "dry-run check weight sync", "dry-run check log-probs"], \
            up.stdout[-3000:]
        assert "455 train prompts of 5-6 tokens; rollout.max_token_length 16 leaves the longest 9 " in checks[0]
        assert "one forward and backward measured on cpu: peak " in checks[1]
        assert "POST /update_weights_from_disk moved the served log-probs" in checks[2]
        assert "first-pass ratio 1" in checks[3] and "top_p 0.95" in checks[3]
        assert up.stdout.index("dry-run check log-probs") < up.stdout.index("start training")
        assert "logs --follow trainer" in up.stdout and "compose.cpu.yml" in up.stdout

        health = {row["Service"]: row["Health"] for row in parse_ps(compose(algo, "ps", "--format", "json").stdout)}
        services = ("atropos", "inference", "trainer", "environment", *(["fake-gateway"] if up_args else []))
        assert health == {s: "healthy" for s in services}, health
        if up_args:  # the layer-1 check went to the fake gateway with the key, and passed
            check = compose(algo, "logs", "gateway-check").stdout
            assert "gateway OK: http://fake-gateway:9000 answered a 1-token completion with fake-gpt" in check, check

        deadline = time.monotonic() + 600  # bounded: a few optimisation steps on 2 CPU cores
        while time.monotonic() < deadline and len(metrics(algo)) < 2:
            time.sleep(5)
        records = metrics(algo)
        assert len(records) >= 2, compose(algo, "logs", "--tail", "40", "trainer").stdout
        delta = compose(algo, "exec", "-T", "trainer", "python", "-c", WEIGHT_DELTA)
        assert delta.returncode == 0, delta.stderr
        n_steps, n_tensors, max_change = delta.stdout.split()
        assert int(n_steps) >= 1 and int(n_tensors) > 0
        assert float(max_change) > 0.0, "training steps did not change the model"
        for service in ("inference", "environment", "trainer"):  # each froze its start-up heap (service_heap.py)
            logged = compose(algo, "logs", service).stdout
            assert re.search(rf"{service}: \d+ start-up objects frozen", logged), logged[-2000:]

        status = hs("status", "--algo", algo)
        assert status.returncode == 0 and "training step:" in status.stdout, status.stdout + status.stderr

        assert_running_stack_is_locked_down(algo, up.stdout, up.stderr, status.stdout, status.stderr)
    finally:
        down = hs("down", "--algo", algo, "--volumes")
        HERE.pop(algo, None)
    assert down.returncode == 0, down.stderr
    assert containers(project) == []
    volumes = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"name={project}_hermes-data"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert volumes == []


def test_broken_inference_healthcheck_fails_up_naming_the_service_within_the_timeout():
    hs("down", "--algo", "grpo", "--volumes")
    try:
        up = hs("up", "--algo", "grpo", "--device", "cpu", "--wait-timeout", "180",
                "-f", "tests/docker/fixtures/broken-inference.yml", timeout=600)
        assert up.returncode == 1, up.stdout[-2000:]
        assert "service inference is unhealthy" in up.stderr, up.stderr
        assert "127.0.0.1:9" in up.stderr  # the healthcheck's own reason
        assert "dry-run passed" not in up.stdout
    finally:
        hs("down", "--algo", "grpo", "--volumes")
    assert containers(PROJECT.format(algo="grpo")) == []


def test_plain_compose_up_without_the_controller_leaves_no_inference_service_open():
    """Without the controller the secrets' variables are unset: compose refuses to start anything. With an empty
    key (a secret that is set but empty gives no file) the inference service itself refuses, exit 2, one line."""
    project = PROJECT.format(algo="ppo")
    hs("down", "--algo", "ppo", "--volumes")
    try:
        unset = compose("ppo", "up", "--detach", "--no-build", "--no-deps", "inference")
        assert unset.returncode != 0
        assert 'environment variable "HERMES_INFERENCE_KEY" required by secret' in unset.stderr, unset.stderr
        running = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}"],
                                 capture_output=True, text=True, check=True).stdout.split()
        assert running == []
        empty = {"HERMES_INFERENCE_KEY": "", "TAOTOKEN_API_KEY": "", "TINKER_API_KEY": "", "WANDB_API_KEY": ""}
        up = compose("ppo", "up", "--detach", "--no-build", "--no-deps", "--wait", "--wait-timeout", "120",
                     "inference", env=empty)
        assert up.returncode != 0, up.stdout + up.stderr
        # (restart: on-failure starts it again, and it refuses again: its exit code is read from the logs' side)
        logs = compose("ppo", "logs", "--no-log-prefix", "inference")
        assert ("inference: (environment): HERMES_INFERENCE_KEY: found no value, expected the key that protects the "
                "inference service.") in logs.stdout + logs.stderr, logs
        assert "inference ready" not in logs.stdout + logs.stderr
    finally:
        compose("ppo", "down", "--volumes", "--remove-orphans")
    assert containers(project) == []

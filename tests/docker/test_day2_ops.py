"""Day-2 operations on ONE running CPU GRPO stack (issue 12), driven as a user would after `make up`:

1. the commands users type in the project directory work: `docker compose logs trainer` prints step lines,
   `docker compose ps` lists the running stack, offline `hermes-stack test-inference --algo grpo --steps 1` finds
   the generated internal key and prints accuracy and format rate;
2. a crash (`kill -9` of the main process inside the container; `docker kill` would be a manual stop) of atropos,
   inference, environment and then the trainer: after each, two more training steps within 120 s; the step never
   goes back (atropos, inference, environment) or resumes from the newest checkpoint (trainer);
3. `down` then `up` resumes at exactly the step where it stopped (SIGTERM is a checkpoint).

The tests share the stack and run in file order. The measured recovery times are printed (`pytest -s`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_stack.controller.compose import parse_ps

SECRETS_LABEL = "io.hermes-stack.secrets"  # compose.base.yml, x-service

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
ALGO = "grpo"
PROJECT = "hermes-test-day2"
RECOVERY_S = 120  # the bound: two more steps within 120 s of a crash
STEP_LINE = re.compile(r"step \d+/\d+ reward_mean=")
CHECKPOINTS = "/data/checkpoints/temp"  # tinker.checkpoint_dir "./temp/" on the data volume

# Runs inside a service's container: SIGKILL the service's main process, the child of `init` (tini, PID 1). The
# healthcheck probes and this script itself are exec'd from outside the container (their parent is PID 0).
KILL_MAIN = r"""
import os, signal
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        status = open(f"/proc/{pid}/status").read()
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()
    except OSError:
        continue
    ppid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
    if ppid == 1 and "python" in cmd:
        print(pid, cmd, flush=True)
        os.kill(int(pid), signal.SIGKILL)
"""


def user_env() -> dict[str, str]:
    """A user's shell in the project directory: no compose or hermes variables set by hand."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("COMPOSE_", "HERMES_PROJECT_NAME", "HERMES_INFERENCE_KEY", "HERMES_ROOT"))}


def hs(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "HERMES_ROOT": str(ROOT), "HERMES_PROJECT_NAME": PROJECT}
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def compose(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    files = ["-f", str(ROOT / f"compose.{ALGO}.yml"), "-f", str(ROOT / "compose.cpu.yml")]
    return subprocess.run(["docker", "compose", "--project-name", PROJECT, "--project-directory", str(ROOT), *files,
                           *args], capture_output=True, text=True, check=False, timeout=timeout)


def metrics() -> list[dict]:
    """Step records of metrics.jsonl, read through whichever service is up (they share the data volume)."""
    for service in ("trainer", "atropos", "environment", "inference"):
        done = compose("exec", "-T", service, "cat", "/data/metrics.jsonl", timeout=60)
        if done.returncode == 0:
            records = []
            for line in done.stdout.splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if "step" in record:
                    records.append(record)
            return records
    return []


def newest_checkpoint() -> int:
    for service in ("trainer", "atropos"):
        done = compose("exec", "-T", service, "ls", CHECKPOINTS, timeout=60)
        if done.returncode == 0:
            steps = [int(m.group(1)) for m in re.finditer(r"^step-(\d+)$", done.stdout, re.MULTILINE)]
            return max(steps, default=0)
    return 0


def wait_until(predicate, bound_s: float, what: str, poll_s: float = 1.0):
    deadline = time.monotonic() + bound_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            logs = compose("logs", "--tail", "30", "trainer").stdout
            raise AssertionError(f"{what}: not within {bound_s:.0f} s. Trainer log tail:\n{logs}")
        time.sleep(poll_s)


@pytest.fixture(scope="module")
def stack():
    hs("down", "--algo", ALGO, "--volumes")
    # The checkout's own internal key: a test below writes a new one; it is put back after the stack is down, so a
    # stack of the user's beside the tests keeps the key its containers hold.
    key_path = ROOT / ".hermes" / "inference.key"
    saved_key = key_path.read_bytes() if key_path.is_file() else None
    try:
        up = hs("up", "--algo", ALGO, "--device", "cpu", "--wait-timeout", "600")
        assert up.returncode == 0, f"up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        yield up
    finally:
        down = hs("down", "--algo", ALGO, "--volumes")
        if saved_key is not None:
            key_path.write_bytes(saved_key)
        assert down.returncode == 0, down.stderr
        leftover = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                                  capture_output=True, text=True, check=True).stdout.split()
        assert leftover == []


def test_the_commands_up_prints_and_users_type_work_as_typed(stack):
    where = stack.stdout[stack.stdout.index("Where to look"):]
    assert "docker compose logs --follow trainer" in where and f"make status ALGO={ALGO}" in where
    assert "hermes-stack status" not in where  # not on PATH after `make up`
    dotenv = (ROOT / ".env").read_text()
    key = (ROOT / ".hermes" / "inference.key").read_text().strip()
    assert f"COMPOSE_PROJECT_NAME={PROJECT}" in dotenv and key not in dotenv

    wait_until(lambda: len(metrics()) >= 1, 300, "a first training step")
    logs = subprocess.run(["docker", "compose", "logs", "trainer"], cwd=ROOT, env=user_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert logs.returncode == 0, logs.stderr
    assert STEP_LINE.search(logs.stdout), logs.stdout[-2000:]
    assert key not in logs.stdout

    ps = subprocess.run(["docker", "compose", "ps", "--format", "json"], cwd=ROOT, env=user_env(),
                        capture_output=True, text=True, timeout=60, check=False)
    assert ps.returncode == 0, ps.stderr
    assert {row["Service"] for row in parse_ps(ps.stdout)} >= {"atropos", "inference", "trainer", "environment"}

    # `-o .venv/.installed`: use the venv as it is (a worktree's venv may be older than its pyproject.toml; make
    # would rebuild it). The command is otherwise the one `up` prints.
    status = subprocess.run(["make", "-o", ".venv/.installed", "status", f"ALGO={ALGO}"], cwd=ROOT, env=user_env(), capture_output=True,
                            text=True, timeout=120, check=False)
    assert status.returncode == 0 and "training step:" in status.stdout, status.stdout + status.stderr

    tested = subprocess.run([sys.executable, "-m", "hermes_stack", "test-inference", "--algo", ALGO, "--steps", "1",
                             "--out", str(ROOT / ".hermes" / "test-inference.jsonl")],
                            cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=300, check=False)
    assert tested.returncode == 0, tested.stdout[-2000:] + tested.stderr[-2000:]
    assert re.search(r"accuracy \d\.\d+\s+format rate \d\.\d+", tested.stdout), tested.stdout


def test_up_again_while_it_trains_touches_nothing_and_a_dry_run_is_refused(stack):
    """A second `make up` during training ran the build and the dry-run beside the live run: the dry-run's weight
    push put its probe weights into the inference server the run sampled from, for a step (a lifecycle sweep found
    it twice in the inference log). Now it says the run trains and starts nothing; `dry-run` is refused."""
    wait_until(lambda: len(metrics()) >= 1, 300, "a training step")
    before = compose("ps", "--format", "json").stdout
    probes = lambda: compose("logs", "inference").stdout.count("/data/dry-run/")
    pushed = probes()
    again = hs("up", "--algo", ALGO, "--device", "cpu", "--no-build", "--wait-timeout", "600")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert f"{PROJECT} is training already (step " in again.stdout and "dry-run" not in again.stdout, again.stdout
    assert "keys changed" not in again.stdout  # the same key: the secrets' digest label matches
    dry = hs("dry-run", "--algo", ALGO, "--device", "cpu", "--no-build")
    assert dry.returncode == 2 and f"found the {PROJECT} stack training (step " in dry.stderr, dry.stderr[-2000:]
    assert probes() == pushed  # no probe weights reached the live server
    ids = lambda text: sorted(row["ID"] for row in parse_ps(text))  # the same containers, none new
    assert ids(compose("ps", "--format", "json").stdout) == ids(before)


def _by_service() -> dict[str, tuple[str, str]]:
    """Each running service's (container id, secrets' digest label)."""
    out = {}
    for row in parse_ps(compose("ps", "--format", "json").stdout):
        label = subprocess.run(["docker", "inspect", "-f", f'{{{{index .Config.Labels "{SECRETS_LABEL}"}}}}',
                                row["ID"]], capture_output=True, text=True, check=True).stdout.strip()
        out[row["Service"]] = (row["ID"], label)
    return out


def test_a_new_internal_key_reaches_every_container_and_training_goes_on(stack):
    """A container keeps the secret files it was created with. With `.hermes/` deleted (a new internal key) or the
    key file edited while the trainer was stopped, `up` started the trainer on the new key beside an inference server
    still on the old one, and every weight push was refused. The secrets' digest label (compose.base.yml) now
    changes with the key, and compose recreates every container that holds the old one."""
    wait_until(lambda: len(metrics()) >= 1, 300, "a training step")
    before = _by_service()
    digests = {label for _, label in before.values()}
    assert len(digests) == 1 and re.fullmatch(r"[0-9a-f]{16}", next(iter(digests))), before
    key_path = ROOT / ".hermes" / "inference.key"
    if not key_path.is_file():
        pytest.skip("the key file sets HERMES_INFERENCE_KEY: no generated key to change")
    assert key_path.read_text().strip() not in next(iter(digests))
    key_path.write_text("hs-" + secrets.token_urlsafe(24) + "\n")  # as `up` makes one after .hermes/ is deleted
    beside = hs("up", "--algo", ALGO, "--device", "cpu", "--no-build", "--wait-timeout", "600")
    assert beside.returncode == 0 and "is training already" in beside.stdout, beside.stdout[-2000:]
    assert f"keys changed since this run started (or .hermes/ was deleted): its containers keep the old ones until " \
           f"make down ALGO={ALGO}, then HERMES_PROJECT_NAME={PROJECT} make up ALGO={ALGO}" in beside.stdout, \
        beside.stdout[-2000:]
    assert _by_service() == before  # nothing touched while it trains
    assert compose("stop", "trainer", timeout=180).returncode == 0  # the stop saves a checkpoint
    last = metrics()[-1]["step"]
    status = hs("status", "--algo", ALGO).stdout  # a stop exits 0 as a finished run does; status tells them apart
    assert f"trainer        exited 0 (stopped after step {last}, a checkpoint; not completed)" in status, status

    up = hs("up", "--algo", ALGO, "--device", "cpu", "--no-build", "--wait-timeout", "600")
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    after = _by_service()
    for service in ("atropos", "inference", "trainer", "environment"):
        assert after[service][0] != before[service][0], (service, "not recreated")
        assert after[service][1] != before[service][1] and re.fullmatch(r"[0-9a-f]{16}", after[service][1])
    new = wait_until(lambda: [r for r in metrics() if r["step"] > last][:2] if len(
        [r for r in metrics() if r["step"] > last]) >= 2 else None, RECOVERY_S, "two steps on the new key")
    assert [r["step"] for r in new] == [last + 1, last + 2]
    assert "was refused" not in compose("logs", "trainer").stdout


def test_a_service_stopped_by_hand_beside_the_run_is_started_again_by_up(stack):
    """`docker kill` of inference while the run trains (a manual stop: compose does not restart it). `status` said
    `make up` starts it again, but `up` said "training already: nothing to start" and left it stopped, and the
    trainer waited for its inference server until `make down` (a review, reproduced by hand)."""
    wait_until(lambda: len(metrics()) >= 1, 300, "a training step")
    before = _by_service()
    trainer = before["trainer"][0]
    subprocess.run(["docker", "kill", before["inference"][0]], capture_output=True, check=True)  # as a user does
    wait_until(lambda: "inference" not in _by_service(), 60, "inference stopped")
    status = hs("status", "--algo", ALGO)
    assert (f"inference was stopped by hand (docker kill or stop; compose restarts only crashes): HERMES_PROJECT_NAME="
            f"{PROJECT} make up ALGO={ALGO} starts it again beside the training run, which waits for it") in status.stdout, \
        status.stdout
    seen = len(metrics())
    up = hs("up", "--algo", ALGO, "--device", "cpu", "--no-build", "--wait-timeout", "600")
    assert up.returncode == 0 and "is training already" in up.stdout, up.stdout[-2000:] + up.stderr[-2000:]
    assert "started inference again, the rest untouched" in up.stdout, up.stdout[-2000:]
    after = _by_service()
    assert after["trainer"][0] == trainer and "inference" in after, after  # the trainer's container untouched
    steps = wait_until(lambda: metrics()[seen:][:2] if len(metrics()) >= seen + 2 else None, 300,
                       "two steps after inference started again")
    assert [r["step"] for r in steps] == [steps[0]["step"], steps[0]["step"] + 1]


def test_kill_9_of_each_service_in_turn_loses_no_step(stack):
    recovery: dict[str, float] = {}
    for service in ("atropos", "inference", "environment", "trainer"):
        if service == "trainer":  # kill it past a checkpoint, so resuming from it is visible
            wait_until(lambda: newest_checkpoint() >= 25, 600, "the step-25 checkpoint", poll_s=3)
        before = metrics()
        assert before, "no step recorded before the crash"
        last, seen = before[-1]["step"], len(before)
        resume_at = newest_checkpoint() if service == "trainer" else last
        killed_at = time.time()
        kill = compose("exec", "-T", service, "python", "-c", KILL_MAIN)
        # The exec'd killer lives in the container it empties: when the main process dies first, Docker ends the
        # exec too (137). The printed pid is the proof that the kill was sent; the steps below prove the recovery.
        assert kill.returncode in (0, 137) and kill.stdout.strip(), (service, kill.returncode, kill.stdout, kill.stderr)

        dead_at = time.time()  # the exec returned: the main process is gone (a restarted one records after this)

        def two_more_steps(seen: int = seen, service: str = service, dead_at: float = dead_at):
            new = metrics()[seen:]
            if service == "trainer":
                # A step the old trainer finished between reading `before` and the kill is on record too, and the
                # resumed trainer trains it again from the checkpoint: only the restarted trainer's lines count.
                new = [r for r in new if r["time"] > dead_at]
            return new if len(new) >= 2 else None

        new = wait_until(two_more_steps, RECOVERY_S, f"two more steps after kill -9 of {service}'s main process")
        steps = [r["step"] for r in new]
        assert steps == list(range(resume_at + 1, resume_at + 1 + len(steps))), (service, last, resume_at, steps)
        recovery[service] = new[1]["time"] - killed_at
        if service == "inference":
            logs = compose("logs", "inference").stdout
            assert "serving the newest synced weights /data/weights/step-" in logs, logs[-2000:]
    print("\nrecovery (kill -9 -> second new step):",
          ", ".join(f"{s} {t:.1f} s" for s, t in recovery.items()), flush=True)
    trainer_log = compose("logs", "trainer").stdout
    assert "registered again at step" in trainer_log  # Atropos' restart cost no step
    assert f"(step {resume_at})" in trainer_log and "resumed from" in trainer_log


def test_down_then_up_resumes_at_the_step_where_it_stopped(stack):
    wait_until(lambda: len(metrics()) >= 1, 120, "a training step")
    down = hs("down", "--algo", ALGO)
    assert down.returncode == 0, down.stderr
    image = f"{os.environ.get('HERMES_IMAGE_REPO') or 'hermes-stack'}/trainer:cpu"
    stopped = subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", "-v", f"{PROJECT}_hermes-data:/data",
                              image, "/data/metrics.jsonl"], capture_output=True, text=True, timeout=120, check=False)
    assert stopped.returncode == 0, stopped.stderr
    last = [json.loads(line) for line in stopped.stdout.splitlines() if '"step"' in line][-1]["step"]
    # With the containers gone, the run is still on the kept volume: `make report` draws it (it used to say "no
    # training step", the metrics being read only through a trainer container).
    report = hs("report", "--algo", ALGO)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    assert f"(last step {last})" in report.stdout, report.stdout
    atropos_image = f"{os.environ.get('HERMES_IMAGE_REPO') or 'hermes-stack'}/atropos:latest"
    assert subprocess.run(["docker", "ps", "-aq", "--filter", "status=exited", "--filter", f"ancestor={atropos_image}"],
                          capture_output=True, text=True, check=True).stdout.split() == []  # read with --rm

    up = hs("up", "--algo", ALGO, "--device", "cpu", "--no-build", "--wait-timeout", "600")
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    def resumed():
        text = compose("logs", "trainer").stdout
        return text if "resumed from" in text else None

    trainer_log = wait_until(resumed, 120, "the trainer to resume")
    assert f"/step-{last} (step {last})" in trainer_log, trainer_log[-2000:]  # the stop wrote this checkpoint
    new = wait_until(lambda: [r for r in metrics() if r["time"] > time.time() - 600 and r["step"] > last] or None,
                     RECOVERY_S, "a step after up")
    assert new[0]["step"] == last + 1

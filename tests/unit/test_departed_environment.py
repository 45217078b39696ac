"""A departed environment does not stall training (issue 12). Real pieces: atroposlib's run-api, the trainer process
(python -m hermes_stack.trainer, embedded tiny model), and a second real atroposlib BaseEnv of another group size
(tests/fixtures/extra_env.py) that joins mid-run, sends two groups and exits. With its groups of 6 in the queue,
run-api cannot pack the stack's groups of 4 into a batch of 8 (atroposlib packs groups up to the largest size), so
without help training would wait forever. The test plays the stack's own environment (Feeder, plus the readiness
marker that names its env_id, as environment/env.py writes it) and its re-registration."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from trainer_helpers import REPO, Feeder, embedded_model_dir, read_events, read_metrics, trainer_env, write_configs

from hermes_stack.controller.status import event_lines, parse_events

pytestmark = pytest.mark.slow
WAIT_S = 120  # generous for a shared machine; nothing asserts on time
GROUP, PROMPTS = 4, 2  # the stack's environment: batches of 8 sequences


def wait(predicate, what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert proc.poll() is None, f"trainer exited {proc.returncode} waiting for {what}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {log.read_text()[-3000:]}"
        time.sleep(0.1)


def mark_own(data: Path, env_id: int) -> None:
    (data / "ready").mkdir(parents=True, exist_ok=True)
    (data / "ready" / "environment").write_text(json.dumps({"pid": 1, "env_id": env_id}))


def test_an_environment_of_another_group_size_that_leaves_does_not_stall_training(api, inference, tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    from fakes.tiny_tokenizer import build_tiny_tokenizer

    api.reset()
    data = tmp_path / "data"
    configs = write_configs(tmp_path / "configs", group_size=GROUP, batch_size=PROMPTS, num_steps=4, interval=100)
    log = tmp_path / "trainer.log"
    env = trainer_env(data, api.url, inference, HERMES_EMBEDDED_MODEL=str(embedded_model_dir()),
                      HERMES_ENV_DEPARTED_S="4")
    trainer = subprocess.Popen([sys.executable, "-m", "hermes_stack.trainer", "--algo", "grpo", "--config-dir",
                                str(configs), "--profile", "embedded", "--batch-timeout", "300"],
                               env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    extra = None
    try:
        ours = Feeder(api.url, GROUP)
        ours.register(timeout_s=WAIT_S)
        mark_own(data, ours.env_id)
        ours.send_random(2 * PROMPTS, seed=0)
        wait(lambda: len(read_metrics(data / "metrics.jsonl")) == 2, "step 2", trainer, log)

        # A user's extra environment (group size 6) joins and sends two groups, then exits.
        extra_log = tmp_path / "extra.log"
        extra = subprocess.Popen([sys.executable, str(REPO / "tests" / "fixtures" / "extra_env.py"), api.url,
                                  str(build_tiny_tokenizer(tmp_path / "tok")), "6", "2"],
                                 stdout=extra_log.open("w"), stderr=subprocess.STDOUT)
        status = lambda: httpx.get(api.url + "/status", timeout=5).json()
        wait(lambda: status()["queue_size"] >= 2, "the extra environment's two groups", trainer, log)
        ours.send_random(2 * PROMPTS, seed=1)  # enough for two more steps, but they cannot pack with groups of 6
        assert status()["queue_size"] == 6
        extra.terminate()
        extra.wait(timeout=30)

        wait(lambda: "stopped sending" in log.read_text(), "the trainer to notice the departure", trainer, log)
        # The stack's environment registers again (environment/env.py does so when /status-env fails) and sends.
        ours.register(timeout_s=WAIT_S)
        mark_own(data, ours.env_id)
        ours.send_random(2 * PROMPTS, seed=2)
        assert trainer.wait(timeout=WAIT_S) == 0, log.read_text()[-3000:]
    finally:
        for proc in (trainer, extra):
            if proc is not None and proc.poll() is None:
                proc.kill()

    text = log.read_text()
    assert [r["step"] for r in read_metrics(data / "metrics.jsonl")] == [1, 2, 3, 4]
    assert "environment 1 (2 group(s) queued" in text and "disconnected it" in text, text
    assert "environment 0" not in text  # the stack's own environment is never taken for departed
    events = read_events(data / "metrics.jsonl")
    assert [e["event"] for e in events] == ["environment_departed"]
    assert events[0]["env_ids"] == [1] and events[0]["queued_groups"] == 6 and events[0]["at_step"] == 2
    shown = event_lines(parse_events((data / "metrics.jsonl").read_text()))  # what `status` prints
    assert len(shown) == 1 and "environment 1" in shown[0] and "stopped sending" in shown[0]

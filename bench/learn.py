"""Does RL learn? GRPO and PPO on the offline task, in-process, with the embedded tiny model and the torch engine.

    .venv/bin/python bench/learn.py [--algo grpo|ppo|both] [--seeds 0,1,2] [--jobs N] [--steps N]
                                    [--plot docs/learning-curve.png] [--device cpu|cuda] [--model-dir DIR]
                                    [--engine torch|tinker [--tinker-full]] [--lr LR] [--lag N]

`--engine tinker` trains through the real tinker SDK over loopback HTTP against the local Tinker service
(tests.fakes.tinker_service, in this process, torch on CPU behind it) exactly as the stack's trainer does:
TinkerEngine.train_step (forward_backward + optim_step), then export_weights (the peft
adapter, or the whole model with --tinker-full, downloaded from the service), which a local sampler loads for the
next rollouts, as the inference service would. It also prints the SDK round trip per step: the step's wall time
(train_step + export) minus the service's own torch time.

Algorithm semantics come from the shipped configs/config_<algo>.toml ([algorithm], [rollout] group size and
sampling, [reward] weights); the learning rate and batch sizes from the embedded profile's overrides
(hermes_stack.config.profiles), as the CPU stack would run them. The components are the stack's own: the embedded
model build, TorchEngine.generate for rollouts, the offline-arith split and reward weights, TorchEngine.train_step.
Batches are formed as in the stack: a GRPO group whose scores are all equal is dropped (the environment does so)
and the step trains on batch_size kept groups (Atropos fills the trainer's batch with kept groups only).

`--lag 1` samples each step's rollouts from the policy one update back (the sequences carry that policy's log-probs),
as the stack's rollouts are while the trainer trains the batch before (trainer.max_staleness 1); default 0, on-policy.

Held-out accuracy (greedy, the 95 two-digit sums of the test split, never trained on) is measured at the start and
every --eval-every steps. The run keeps the best evaluation's weights (as a checkpoint would) and reports that with
its step, the first evaluation at or above the goal (0.8), and the final one. Each (algorithm, seed) runs in its own
single-threaded process, --jobs at a time (default: one per core). The last lines are one summary per algorithm:
`<algo>: accuracy <start> -> <best> in <steps> steps, <seconds> s`, where <steps> and <seconds> count the training
(rollouts + optimisation, not the evaluations) up to the best evaluation; with several seeds, of the median run,
followed by every seed's best.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import multiprocessing
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hermes_stack.config.loader import load_stack
from hermes_stack.config.models import AlgorithmSection
from hermes_stack.modelcore.embedded import build as build_embedded
from hermes_stack.tasks.offline_arith import format_prompt, offline_arith, parse_answer, score
from hermes_stack.tasks.prompting import new_token_budget
from hermes_stack.trainer.engine import IGNORE, Sequence

TASK_SEED = 0  # the split the environment serves by default


def load_config(algo: str, overrides: dict[str, object] | None = None):
    """The shipped configs with the embedded profile applied, through the loader the stack itself uses; `overrides`
    (--set) are added to the profile's keys for this algorithm, exactly as a tuned value would be."""
    if overrides:
        from hermes_stack.config import profiles

        profiles.EMBEDDED_BY_ALGO[algo] = {**profiles.EMBEDDED_BY_ALGO.get(algo, {}), **overrides}
    return load_stack(algo, ROOT / "configs", profile="embedded")


def shipped_steps(algo: str) -> int:
    """The run's length the CPU stack trains with the shipped configs (the embedded profile's), --steps' default."""
    return load_config(algo).settings.trainer.num_steps


def new_tokens(tokenizer, rows: list[dict], max_token_length: int) -> int:
    """The environment's budget (tasks.prompting.new_token_budget) for the longest prompt of `rows`, so the bench
    samples as much room as the stack's rollouts get (the embedded profile's rollout.max_token_length)."""
    longest = max(len(tokenizer.encode(format_prompt(r["question"]))) for r in rows)
    return new_token_budget(max_token_length, longest)


def accuracy(engine, rows: list[dict], max_new_tokens: int) -> float:
    prompts = [format_prompt(r["question"]) for r in rows]
    outputs = engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    hits = sum(parse_answer(group[0].text) == parse_answer(r["answer"]) for group, r in zip(outputs, rows))
    return hits / len(rows)


def collect_groups(engine, train: list[dict], rng: random.Random, batch_size: int, group_size: int,
                   temperature: float, top_p: float, reward, max_new_tokens: int
                   ) -> tuple[list[list[Sequence]], int, float]:
    """One step's batch as the stack forms it: the environment drops a group whose scores are all equal (GRPO: zero
    advantage for every member) and Atropos fills the trainer's batch with kept groups only. Sampling rounds of
    batch_size prompts repeat until batch_size groups are kept, at most MAX_ROUNDS rounds (then the step trains on
    what it has, or skips when nothing was kept). Returns (groups, prompts drawn, mean score of every sample drawn)."""
    kept: list[list[Sequence]] = []
    drawn, scores = 0, []
    for _ in range(MAX_ROUNDS):
        rows = [rng.choice(train) for _ in range(batch_size)]
        outputs = engine.generate([format_prompt(r["question"]) for r in rows], n=group_size,
                                  temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        drawn += len(rows)
        for row, completions in zip(rows, outputs):
            prompt = engine.tokenizer.encode(format_prompt(row["question"]))
            group = [Sequence(tokens=prompt + c.tokens, mask=[IGNORE] * len(prompt) + c.tokens,
                              score=score(c.text, row["answer"], reward.correctness_weight, reward.format_weight),
                              logprobs=[0.0] * len(prompt) + c.logprobs)
                     for c in completions]
            scores += [seq.score for seq in group]
            if group_size > 1 and len({s.score for s in group}) == 1:
                continue
            kept.append(group)
        if len(kept) >= batch_size:
            break
    return kept[:batch_size], drawn, sum(scores) / len(scores)


class TinkerSide:
    """The Tinker path of the stack in one process: the local Tinker service, the TinkerEngine on the real SDK, and a
    sampler that loads each exported step the way the inference service does (adapter or full weights)."""

    def __init__(self, model_dir: Path, algo: AlgorithmSection, learning_rate: float, lora_rank: int, seed: int,
                 full: bool, workdir: Path, temperature: float = 1.0, schedule: dict[str, object] | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from hermes_stack.trainer.engine_tinker import LocalCritic, TinkerEngine
        from tests.fakes.tinker_service import LocalTinker

        self.torch = torch
        # pending_polls 0: every future is ready when first asked, so the overhead measured is the SDK's own.
        self.service = LocalTinker("tml-bench-key", model_dir=model_dir, full=full, seed=seed, pending_polls=0).start()
        critic = (LocalCritic(str(model_dir), with_value_head=algo.uses_critic, temperature=temperature)
                  if algo.uses_critic or algo.kl_coef > 0 else None)
        self.engine = TinkerEngine(base_model="embedded", algo=algo, lora_rank=lora_rank, learning_rate=learning_rate,
                                   api_key=self.service.api_key, base_url=self.service.base_url, critic=critic,
                                   **(schedule or {}))
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.policy = self.base
        self.generator = torch.Generator().manual_seed(seed)
        self.workdir = workdir
        self.epochs = 1  # one forward_backward + optim_step per batch: what the Tinker engine does
        self.wall_s = self.compute_s = self.cpu_s = self.compute_cpu_s = 0.0

    def train_step(self, groups: list[list[Sequence]]) -> dict[str, float]:
        began, computed = time.perf_counter(), self.service.compute_s
        began_cpu, computed_cpu = time.process_time(), self.service.compute_cpu_s
        metrics = self.engine.train_step(groups)
        directory = self.engine.export_weights(self.workdir / f"step-{self.engine.step}")
        self.wall_s += time.perf_counter() - began
        self.compute_s += self.service.compute_s - computed
        # CPU seconds of the whole process (SDK threads, HTTP server threads, torch) minus the service's torch work.
        self.cpu_s += time.process_time() - began_cpu
        self.compute_cpu_s += self.service.compute_cpu_s - computed_cpu
        self.load(directory)
        metrics.setdefault("entropy", float("nan"))
        metrics.setdefault("kl", float("nan"))
        return metrics

    def load(self, directory: Path) -> None:
        """The exported files as the inference service loads them (peft adapter, merged for speed; or a model dir)."""
        import copy
        import shutil

        from transformers import AutoModelForCausalLM

        if (directory / "adapter_config.json").is_file():
            from peft import PeftModel

            policy = PeftModel.from_pretrained(copy.deepcopy(self.base), directory).eval()
            # Merged only when that is the same model: with tied embeddings (SmolLM2) merging the lm_head adapter
            # writes its update into the shared matrix, so the input embeddings moved too and the sampler drew
            # from another policy than the one trained (max |logit| difference 0.34 for a small random adapter).
            # The built-in inference server keeps the adapter unmerged (inference/builtin.py), as here.
            tied = bool(getattr(self.base.config, "tie_word_embeddings", False))
            targets = set(getattr(policy.peft_config["default"], "target_modules", None) or ())
            self.policy = policy if tied and "lm_head" in targets else policy.merge_and_unload().eval()
        else:
            self.policy = AutoModelForCausalLM.from_pretrained(directory, dtype=self.torch.float32).eval()
        shutil.rmtree(directory, ignore_errors=True)

    def generate(self, prompts, n: int = 1, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 16):
        from hermes_stack.modelcore.sampling_core import sample
        from hermes_stack.trainer.engine_torch import Completion

        ids = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]  # as TorchEngine
        raw = sample(self.policy, ids, eos_token_id=self.tokenizer.eos_token_id,
                     pad_token_id=self.tokenizer.pad_token_id, n=n, temperature=temperature, top_p=top_p,
                     max_new_tokens=max_new_tokens, generator=self.generator)
        return [[Completion(t, lp, self.tokenizer.decode(t, skip_special_tokens=True), reason)
                 for t, lp, reason in group] for group in raw]

    def close(self) -> None:
        self.engine.close()
        self.service.stop()


def run(algo: str, steps: int, seed: int, device: str, model_dir: Path, eval_every: int,
        lr_decay: bool = False, engine_kind: str = "torch", tinker_full: bool = False,
        learning_rate_override: float | None = None, overrides: dict[str, object] | None = None,
        until_goal: bool = False, lag: int = 0) -> dict:
    import torch

    from hermes_stack.trainer.__main__ import lr_schedule
    from hermes_stack.trainer.engine_torch import TorchEngine

    stack = load_config(algo, overrides)
    params = stack.config.algorithm
    rollout, reward = stack.config.rollout, stack.config.reward
    group_size, batch_size = rollout.group_size, rollout.batch_size
    learning_rate = learning_rate_override or stack.settings.tinker.learning_rate
    temperature, top_p = rollout.temperature, rollout.top_p

    torch.manual_seed(seed)
    # The schedule of [trainer] lr_schedule over this run's steps, as the stack's over num_steps; --lr-decay forces
    # the cosine.
    schedule = stack.settings.trainer
    arguments = lr_schedule(stack, steps, cosine=lr_decay)
    cosine = arguments["lr_decay_steps"] is not None
    workdir = tempfile.TemporaryDirectory(prefix="learn-tinker-")
    if engine_kind == "tinker":
        torch.set_num_threads(1)
        engine = TinkerSide(model_dir, params, learning_rate, stack.settings.tinker.lora_rank, seed, tinker_full,
                            Path(workdir.name), temperature, schedule=arguments)
    else:
        engine = TorchEngine(model_dir, params, learning_rate, device=device, seed=seed, **arguments,
                             epochs=stack.settings.trainer.epochs, minibatches=stack.settings.trainer.minibatches,
                             temperature=temperature, micro_batch_size=stack.settings.trainer.micro_batch_size)
    train, test = offline_arith("train", TASK_SEED), offline_arith("test", TASK_SEED)
    budget = new_tokens(engine.tokenizer, train + test, rollout.max_token_length)
    rng = random.Random(seed)
    print(f"[{algo} seed {seed}] estimator={params.advantage_estimator} gamma={params.gamma} lam={params.lam} "
          f"clip={params.clip_epsilon} entropy={params.entropy_coef} value={params.value_loss_coef} "
          f"kl={params.kl_coef} ({params.kl_penalty}) | temperature={temperature} top_p={top_p} "
          f"prompts/step={batch_size} group={group_size} new-tokens={budget} lr={learning_rate} epochs={engine.epochs} "
          f"minibatches={getattr(engine, 'minibatches', 1)} "
          f"lr-decay={f'cosine from {schedule.lr_decay_start:g} to {schedule.min_lr_ratio:g}x' if cosine else 'none'} "
          f"device={device} lag={lag} "
          f"engine={engine_kind}{' (full weights)' if tinker_full else ''}", flush=True)

    start = accuracy(engine, test, budget)
    curve = [(0, 0.0, start)]
    best = (start, 0, 0.0)
    goal = None  # (step, seconds) of the first evaluation at or above GOAL
    best_policy = copy.deepcopy(engine.policy.state_dict())
    print(f"[{algo} seed {seed}] step 0: held-out accuracy {start:.2f}", flush=True)
    train_seconds = 0.0
    drawn_total = kept_total = 0
    # --lag: the weights before each of the last `lag` train steps, so a step samples from the policy `lag` updates
    # back, as the stack's rollouts generated while the previous batch trains (trainer.max_staleness 1) do.
    history: collections.deque = collections.deque(maxlen=max(1, lag))
    metrics = {"reward_mean": float("nan"), "kl": float("nan"), "entropy": float("nan")}
    cpu_began = time.process_time()
    for step in range(1, steps + 1):
        began = time.perf_counter()
        with sampling_from(engine, history[0] if lag and history else None) as own:
            groups, drawn, sampled_reward = collect_groups(engine, train, rng, batch_size, group_size, temperature,
                                                           top_p, reward, budget)
        drawn_total += drawn
        kept_total += len(groups)
        if groups:
            if lag:  # the weights this step trains from: the snapshot the swap kept, or a new one
                history.append(own if own is not None else copy.deepcopy(engine.policy.state_dict()))
            metrics = engine.train_step(groups)
        train_seconds += time.perf_counter() - began
        if step % eval_every == 0 or step == steps:
            acc = accuracy(engine, test, budget)
            curve.append((step, train_seconds, acc))
            if acc >= GOAL and goal is None:
                goal = (step, train_seconds)
            if acc > best[0]:
                best = (acc, step, train_seconds)
                best_policy = copy.deepcopy(engine.policy.state_dict())
            print(f"[{algo} seed {seed}] step {step}: held-out {acc:.2f} sampled reward {sampled_reward:.3f} "
                  f"kl {metrics['kl']:.4f} entropy {metrics['entropy']:.3f} kept {kept_total}/{drawn_total} groups "
                  f"{train_seconds:.1f} s", flush=True)
            if until_goal and goal is not None:
                steps = step  # --until-goal: the question is answered, stop
                break

    final = curve[-1][2]
    cpu_seconds = time.process_time() - cpu_began
    tail = [a for _, _, a in curve[-TAIL:]]
    engine.policy.load_state_dict(best_policy)  # the kept checkpoint
    kept = accuracy(engine, test, budget)
    tinker = {}
    if engine_kind == "tinker":
        per_step = engine.wall_s / steps
        overhead = (engine.wall_s - engine.compute_s) / steps
        overhead_cpu = (engine.cpu_s - engine.compute_cpu_s) / steps
        tinker = {"tinker_step_s": per_step, "tinker_overhead_s": overhead, "tinker_overhead_cpu_s": overhead_cpu}
        print(f"[{algo} seed {seed}] tinker: train_step + export {per_step:.3f} s/step, of which the service's torch "
              f"work {engine.compute_s / steps:.3f} s and the SDK round trips (HTTP, serialisation, future polling, "
              f"adapter download) {overhead:.3f} s; in CPU time {engine.cpu_s / steps:.3f} s/step, of which the "
              f"round trips {overhead_cpu:.3f} s", flush=True)
        engine.close()
    workdir.cleanup()
    print(f"[{algo} seed {seed}] start {start:.2f}; best held-out {best[0]:.2f} at step {best[1]} ({best[2]:.1f} s; "
          f"re-evaluated {kept:.2f}); final {final:.2f} at step {steps}; mean of last {len(tail)} evaluations "
          f"{sum(tail) / len(tail):.2f}; {train_seconds:.1f} s total, {train_seconds / steps:.3f} s/step, "
          f"{cpu_seconds:.0f} CPU s", flush=True)
    return {"algo": algo, "start": start, "best": best[0], "best_step": best[1], "best_seconds": best[2],
            "goal_step": goal[0] if goal else None, "goal_seconds": goal[1] if goal else None,
            "final": final, "moving_average": sum(tail) / len(tail), "steps": steps, "seconds": train_seconds,
            "cpu_seconds": cpu_seconds, "curve": curve, **tinker}


@contextlib.contextmanager
def sampling_from(engine, state: dict | None):
    """Within the block the engine's policy holds `state` (older weights: the behaviour policy of a lagged rollout,
    whose log-probs the sequences carry, as the inference service's do); its own weights come back afterwards.
    Yields the snapshot of its own weights (None when `state` is None), which the caller keeps instead of copying
    them again."""
    if state is None:
        yield None
        return
    own = copy.deepcopy(engine.policy.state_dict())
    engine.policy.load_state_dict(state)
    try:
        yield own
    finally:
        engine.policy.load_state_dict(own)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"grpo": "tab:blue", "ppo": "tab:orange"}
    fig, ax = plt.subplots(figsize=(7, 4))
    labelled: set[str] = set()
    for r in results:
        steps = [s for s, _, _ in r["curve"]]
        label = None if r["algo"] in labelled else r["algo"].upper()
        labelled.add(r["algo"])
        ax.plot(steps, [a for _, _, a in r["curve"]], color=colours.get(r["algo"]), alpha=0.8, linewidth=1.2,
                label=label)
    ax.axhline(GOAL, color="grey", linestyle="--", linewidth=0.8, label=f"goal {GOAL}")
    ax.set_xlabel("training step")
    ax.set_ylabel(f"held-out greedy accuracy ({len(offline_arith('test', TASK_SEED))} unseen sums)")
    ax.set_ylim(-0.02, 1.02)
    seeds = sorted({r["seed"] for r in results})
    ax.set_title(f"Embedded tiny model on offline-arith, CPU (seeds {', '.join(map(str, seeds))})")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"curve written to {path}", flush=True)


def one_run(algo: str, seed: int, steps: int, device: str, eval_every: int, lr_decay: bool,
            model_dir: Path | None, engine_kind: str = "torch", tinker_full: bool = False,
            learning_rate: float | None = None, overrides: dict[str, object] | None = None,
            until_goal: bool = False, lag: int = 0) -> dict:
    """A whole run in its own process: build the embedded model for the seed (unless given), then train."""
    with tempfile.TemporaryDirectory() as tmp:
        if model_dir is None:
            model_dir = Path(tmp) / "embedded"
            facts = build_embedded(model_dir, seed=seed)
            print(f"[{algo} seed {seed}] embedded model built in {facts['build_seconds']} s: {facts['parameters']} "
                  f"parameters, held-out accuracy {facts['test_accuracy']:.2f}, format {facts['test_format']:.2f}",
                  flush=True)
        result = run(algo, steps, seed, device, model_dir, eval_every, lr_decay, engine_kind, tinker_full,
                     learning_rate, overrides, until_goal, lag)
    result["seed"] = seed
    return result


def summary(algo: str, runs: list[dict]) -> str:
    """`<algo>: accuracy <start> -> <end> in <steps> steps, <seconds> s` for the median run by best accuracy
    (the only run with one seed), then every seed's best and how many reached the goal."""
    ordered = sorted(runs, key=lambda r: (r["best"], -r["best_seconds"]))
    r = ordered[(len(ordered) - 1) // 2]  # the lower median: with two seeds, the worse one
    line = f"{algo}: accuracy {r['start']:.2f} -> {r['best']:.2f} in {r['best_step']} steps, {r['best_seconds']:.0f} s"
    if len(runs) > 1:
        reached = sum(x["goal_step"] is not None for x in runs)
        seeds = ", ".join(str(x["seed"]) for x in runs)
        bests = " / ".join(f"{x['best']:.2f}" for x in runs)
        line += f" (median of seeds {seeds}: best {bests}; {reached} of {len(runs)} reached {GOAL})"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("grpo", "ppo", "both"), default="both")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default: the embedded profile's, as the CPU stack runs)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (model build, sampling, shuffles)")
    parser.add_argument("--jobs", type=int, default=None, help="runs in parallel, one core each (default: cores)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--model-dir", type=Path, default=None, help="an embedded model dir (default: build one)")
    parser.add_argument("--lr-decay", action="store_true",
                        help="cosine learning-rate decay over the run, whatever [trainer] lr_schedule says")
    parser.add_argument("--plot", type=Path, default=None, help="write the curves to this PNG")
    parser.add_argument("--engine", choices=("torch", "tinker"), default="torch",
                        help="tinker: through the tinker SDK and the local Tinker service (over loopback HTTP)")
    parser.add_argument("--tinker-full", action="store_true", help="tinker: train every weight instead of LoRA")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a profile key on top of the embedded profile's (e.g. trainer.epochs=4, "
                             "algorithm.kl_coef=0.01): what hermes_stack.config.profiles would ship")
    parser.add_argument("--until-goal", action="store_true", help=f"stop a run at its first evaluation >= {GOAL}")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help=f"exit 1 also when a run needs more than this many training seconds to reach {GOAL}")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate instead of the embedded profile's (the Tinker engine takes one optimiser "
                             "step per batch where the torch engine takes two)")
    parser.add_argument("--lag", type=int, default=0,
                        help="sample each step's rollouts from the policy this many updates back (1: the stack's "
                             "overlap of rollouts and training); torch engine only")
    args = parser.parse_args(argv)
    if args.lag < 0:
        parser.error("--lag: updates back, 0 or more")
    if args.lag and args.engine != "torch":
        parser.error("--lag: the torch engine only")

    overrides = dict(parse_override(item) for item in args.set)
    algos = ["grpo", "ppo"] if args.algo == "both" else [args.algo]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    jobs = [(a, s) for s in seeds for a in algos]
    workers = max(1, min(args.jobs or os.cpu_count() or 1, len(jobs)))
    began = time.perf_counter()
    # One process per run: each is single-threaded (the tiny model does not gain from threads), so runs in parallel
    # use one core each, and one run's wall time is what it would be alone on that core.
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(one_run, a, s, args.steps or shipped_steps(a), args.device, args.eval_every,
                               args.lr_decay, args.model_dir, args.engine, args.tinker_full, args.lr, overrides,
                               args.until_goal, args.lag)
                   for a, s in jobs]
        results = [f.result() for f in futures]
    print(f"{len(jobs)} run(s) on {workers} process(es) in {time.perf_counter() - began:.0f} s wall", flush=True)
    if args.plot:
        plot(results, args.plot)
    for r in results:
        goal = (f"reached {GOAL} at step {r['goal_step']} ({r['goal_seconds']:.0f} s)" if r["goal_step"] is not None
                else f"did not reach {GOAL}")
        print(f"  {r['algo']} seed {r['seed']}: {r['start']:.2f} -> best {r['best']:.2f} at step {r['best_step']} "
              f"({r['best_seconds']:.0f} s), {goal}, final {r['final']:.2f}, {r['cpu_seconds']:.0f} CPU s"
              + (f", {r['tinker_step_s']:.3f} s/step train+export of which {r['tinker_overhead_s']:.3f} s SDK round "
                 "trips" if "tinker_step_s" in r else ""))
    for algo in algos:
        print(summary(algo, [r for r in results if r["algo"] == algo]))
    # The bench can fail: a run that never reached the goal (or, with --max-seconds, too late) is exit 1.
    failed = [r for r in results if r["goal_step"] is None
              or (args.max_seconds is not None and r["goal_seconds"] > args.max_seconds)]
    for r in failed:
        why = ("never reached" if r["goal_step"] is None
               else f"reached {GOAL} after {r['goal_seconds']:.0f} s > --max-seconds {args.max_seconds:g} s;")
        print(f"FAILED {r['algo']} seed {r['seed']}: {why} {GOAL} held-out (best {r['best']:.2f})")
    return 1 if failed else 0


def parse_override(item: str) -> tuple[str, object]:
    """`key=value` with the value read as JSON when it parses (numbers, true/false, null), else as a string."""
    import json

    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw


MAX_ROUNDS = 4  # sampling rounds per step at most, while too few groups survive the equal-score drop
GOAL = 0.8  # issue 4: held-out accuracy both algorithms must reach
TAIL = 10  # evaluations in the moving average (10 x --eval-every steps)

if __name__ == "__main__":
    sys.exit(main())

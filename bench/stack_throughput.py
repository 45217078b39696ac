"""How much of the built-in inference server's generation rate does the CPU stack keep?

    flock /tmp/hermes-docker.lock .venv/bin/python bench/stack_throughput.py [--algo grpo|ppo|both] [--steps 30]
    .venv/bin/python bench/stack_throughput.py --raw-only     # the server's raw rate alone, no Docker

Raw rate: the built-in backend (hermes_stack.inference.builtin.BuiltinBackend, in this process, one torch thread as
in its container) generating one step's batch of the shipped config with the embedded profile (GRPO 32 prompts x 8,
PPO 256 x 1; the environment's new-token budget) as one request, sequences per second, best of --repeats timed in
each of --rounds rounds a few seconds apart (a reading right after a stack goes down can meet Docker's own
clean-up); the mean over them is printed too (the best is a batch without a long row);
measured before the stack starts and again after it is down, and the ratios divide by the mean of the two. Both
readings generate with the embedded model the stack starts from. The policy the stack served at its last step
generates other completions (often a token or two longer, so a batch takes more sampling steps): the raw rate of
that policy, the weights the trainer last pushed, is printed too, with the ratio against it.

Stack rate: `hermes-stack up` with the shipped configs (bench/stack_run.py), the trainer's metrics.jsonl over
--steps steps after the first --skip: sequences trained per second of wall time between step records. Printed
with the per-step breakdown the trainer records: rollout wait (wait_s), train (step_s), weight push (sync_s),
held-out evaluation (eval_s, every 10th step; averaged over all steps), and the ratio stack / raw (goal >= 0.8).

Environment rate: the environment's own batch lines (env.py, rollout_clock.py): sequences it generated, groups
dropped for equal scores included, per second during which it had groups in flight, over its batch lines after the
first --skip. Its ratio to the raw rate says how much of the server's rate the rollout path keeps; the trained
rate above is also bounded by training time and by the share of groups GRPO drops, so both are printed.

Steal: the share of the host's CPU its hypervisor gave other guests during each raw reading and the stack run
(stack_run.steal_share). On a shared cloud host the raw rate can move by a third within minutes (issue 22); a
ratio read beside high steal says more about the host than about the code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import itertools

from stack_run import cpu_times, steal_share

from hermes_stack.config.loader import load_stack
from hermes_stack.tasks.offline_arith import format_prompt, offline_arith


def batch_shape(algo: str) -> tuple[int, int, int]:
    stack = load_stack(algo, ROOT / "configs", profile="embedded")
    rollout = stack.config.rollout
    return rollout.batch_size, rollout.group_size, rollout.max_token_length


def raw_rate(algo: str, model_dir: Path, repeats: int, rounds: int = 1, pause_s: float = 3.0) -> tuple[float, float]:
    """Sequences per second of the built-in backend generating one step's batch in one request, (the best, the
    mean) of `repeats` timed generations in each of `rounds` rounds `pause_s` apart. The best is the batch without a
    long row (the batch samples until its longest row ends); the mean counts the long rows as a run meets them."""
    import torch

    from hermes_stack.inference.builtin import BuiltinBackend

    # One intra-op thread, as in the inference container (it set that for the embedded model it started with, and
    # keeps it for the weights pushed later, which carry no embedded-model marker).
    torch.set_num_threads(1)
    prompts_n, group, max_len = batch_shape(algo)
    backend = BuiltinBackend(str(model_dir), seed=0)
    rows = offline_arith("train", 0)[:prompts_n]
    prompts = [backend.tokenizer.encode(format_prompt(r["question"])) for r in rows]
    budget = max_len - max(len(p) for p in prompts) - 1  # the environment's rule (env.py _budget)
    stack = load_stack(algo, ROOT / "configs", profile="embedded")
    params = {"max_new_tokens": budget, "temperature": stack.config.rollout.temperature,
              "top_p": stack.config.rollout.top_p, "n": group}

    async def once() -> float:
        began = time.perf_counter()
        await backend.generate({"input_ids": prompts, "sampling_params": params, "return_logprob": True})
        return time.perf_counter() - began

    async def all_runs() -> list[float]:
        await backend.start()
        try:
            await once()  # warm
            timed = []
            for round_ in range(rounds):
                if round_:
                    await asyncio.sleep(pause_s)
                timed += [await once() for _ in range(repeats)]
            return timed
        finally:
            await backend.stop()

    timed = asyncio.run(all_runs())
    return prompts_n * group / min(timed), prompts_n * group * len(timed) / sum(timed)


def stack_figures(algo: str, steps: int, skip: int, weights_to: Path | None = None) -> dict:
    from stack_run import run_stack

    prompts_n, group, _ = batch_shape(algo)
    run = run_stack(algo, lambda r: len(r.records) >= skip + steps + 1, timeout_s=1800,
                    log=lambda m: print(f"  {m}", flush=True), weights_to=weights_to)
    records = run.records[skip:skip + steps + 1]
    if len(records) < 2:
        raise SystemExit(f"{algo}: only {len(run.records)} step(s) recorded\n{run.log_tail[-1500:]}")
    spans = [b["time"] - a["time"] for a, b in itertools.pairwise(records)]
    sequences = [b.get("sequences") or prompts_n * group for b in records[1:]]
    mean = lambda key: statistics.fmean((r.get(key) or 0.0) for r in records[1:])
    from hermes_stack.environment.rollout_clock import awaiting_from_log, rate_from_log

    env_rate, env_sequences, env_busy = rate_from_log(run.env_log, skip)
    return {"env_seq_per_s": env_rate, "env_sequences": float(env_sequences), "env_busy_s": env_busy,
            "env_awaiting_s": awaiting_from_log(run.env_log, skip),
            "seq_per_s": sum(sequences) / sum(spans), "step_wall_s": statistics.fmean(spans),
            "wait_s": mean("wait_s"), "step_s": mean("step_s"), "sync_s": mean("sync_s"), "eval_s": mean("eval_s"),
            "staleness_max": max((r.get("staleness_max") or 0.0) for r in records[1:]),
            "stale_dropped": sum((r.get("stale_groups_dropped") or 0.0) for r in records[1:]),
            "steps": float(len(spans)), "sampler_lines": sampler_lines(run.inference_log),
            "cancelled": cancelled(run.env_log), "steal": run.steal}


CANCELLED = re.compile(r"chunks cancelled (\d+) \((\d+) prompts\)")


def cancelled(log: str) -> tuple[int, int]:
    """(chunks, prompts) atroposlib cancelled while they sampled over the whole run (env.py's batch lines count them
    from the start; the last line holds the total): sampling lost when its queue reached the bound meanwhile."""
    found = CANCELLED.findall(log)
    return (int(found[-1][0]), int(found[-1][1])) if found else (0, 0)


SAMPLED = re.compile(r"sampled \d+ batches in \d+ s: .*busy \d+%")


def sampler_lines(log: str) -> list[str]:
    """The built-in server's own batch lines (model_host.BatchLog, one every 30 s of the whole run: start-up, --skip'd
    steps and the trainer's held-out batches included): rows a batch, its rate while sampling, and its busy share,
    which split the environment's gap into the server's own slowdown and its idle time."""
    return SAMPLED.findall(log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("grpo", "ppo", "both"), default="both")
    parser.add_argument("--steps", type=int, default=30, help="steps measured in the stack")
    parser.add_argument("--skip", type=int, default=5, help="first steps not measured (start-up)")
    parser.add_argument("--repeats", type=int, default=5, help="raw generations timed a round (best kept)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of raw generations, a few seconds apart")
    parser.add_argument("--raw-only", action="store_true", help="only the built-in server's raw rate")
    args = parser.parse_args(argv)
    from hermes_stack.modelcore.embedded import build as build_embedded

    algos = ["grpo", "ppo"] if args.algo == "both" else [args.algo]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "embedded"
        build_embedded(model_dir, seed=0)
        for algo in algos:
            # Read again once the stack is down, and each algorithm's pair right around its own run: this machine's
            # speed drifts (the same code's raw rate read 3779 and 5948/s two minutes apart), so the ratio divides by
            # the mean of the two readings.
            times = cpu_times()
            before, before_mean = raw_rate(algo, model_dir, args.repeats, args.rounds)
            prompts_n, group, _ = batch_shape(algo)
            print(f"{algo}: built-in server raw rate {before:.0f} sequences/s, the best generation's ({prompts_n} x "
                  f"{group} in one request; {before_mean:.0f} over all {args.repeats * args.rounds}; steal "
                  f"{steal_share(times, cpu_times()):.0%})", flush=True)
            if args.raw_only:
                continue
            pushed = Path(tmp) / f"{algo}-pushed"
            f = stack_figures(algo, args.steps, args.skip, weights_to=pushed)
            times = cpu_times()
            after, after_mean = raw_rate(algo, model_dir, args.repeats, args.rounds)
            raw = (before + after) / 2
            print(f"{algo}: raw rate before the stack {before:.0f}, after it {after:.0f} sequences/s (the best "
                  f"generation's; over all of them {before_mean:.0f} and {after_mean:.0f}; steal after "
                  f"{steal_share(times, cpu_times()):.0%}); the ratios below divide by the mean of the best, {raw:.0f}",
                  flush=True)
            report(algo, f, raw, (before_mean + after_mean) / 2)
            report_policy(algo, f, pushed, args.repeats, args.rounds)
    return 0


def report_policy(algo: str, f: dict, pushed: Path, repeats: int, rounds: int) -> None:
    """The raw rate of the policy the stack served last (the newest step folder the trainer pushed), with the
    environment's rate against it: the same generation work as the stack's, not the starting model's."""
    from hermes_stack.modelcore.weights_layout import newest_step_dir

    newest = newest_step_dir(pushed)  # `cp` of a folder to a path that does not exist yet: that path is the folder
    if newest is None or f["env_busy_s"] <= 0:
        print(f"{algo}: no pushed weights to measure the served policy's raw rate", flush=True)
        return
    rate, mean = raw_rate(algo, newest, repeats, rounds)
    print(f"{algo}: the served policy's raw rate ({newest.name}) {rate:.0f} sequences/s (over all generations "
          f"{mean:.0f}); environment's rollout rate = {f['env_seq_per_s'] / rate:.2f} of it", flush=True)


def report(algo: str, f: dict, raw: float, raw_mean: float) -> None:
    """The stack's figures against `raw` (the mean of the best raw generations before and after: the goal's
    divisor) and, for the environment's rate, against `raw_mean` too (the mean over all raw generations, long rows
    included, as the environment meets them)."""
    print(f"{algo}: stack {f['seq_per_s']:.0f} sequences/s = {f['seq_per_s'] / raw:.2f} of the raw rate; "
          f"per step {f['step_wall_s']:.2f} s wall: rollout wait {f['wait_s']:.2f} s, train {f['step_s']:.2f} s, "
          f"sync {f['sync_s']:.2f} s, eval {f['eval_s']:.2f} s (mean over {f['steps']:.0f} steps); "
          f"staleness max {f['staleness_max']:.0f}, {f['stale_dropped']:.0f} stale group(s) dropped", flush=True)
    if f["env_busy_s"] > 0:
        print(f"{algo}: environment's rollout rate {f['env_seq_per_s']:.0f} sequences/s = "
              f"{f['env_seq_per_s'] / raw:.2f} of the raw rate, {f['env_seq_per_s'] / raw_mean:.2f} of the mean raw "
              f"generation's {raw_mean:.0f}/s ({f['env_sequences']:.0f} sequences "
              f"generated, dropped groups included, in {f['env_busy_s']:.1f} s with groups in flight; chunks "
              f"awaited /generate {f['env_awaiting_s']:.1f} s, summed over chunks); "
              f"trained {f['seq_per_s']:.0f} sequences/s = {f['seq_per_s'] / raw:.2f}; "
              f"{f['cancelled'][0]} chunk(s) of {f['cancelled'][1]} prompts cancelled by atroposlib while "
              "sampling (whole run)", flush=True)
    else:
        print(f"{algo}: the environment's log has no rollout rate (an environment without it)", flush=True)
    for line in f["sampler_lines"]:
        print(f"{algo}: inference server: {line}", flush=True)
    print(f"{algo}: load average {os.getloadavg()[0]:.1f}; the hypervisor took {f['steal']:.0%} of the host's CPU "
          "time while the stack trained (steal)", flush=True)


if __name__ == "__main__":
    sys.exit(main())

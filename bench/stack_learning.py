"""Does the CPU default learn within its own run? `hermes-stack up` with the shipped configs, from a fresh volume,
read through the trainer's own held-out evaluations (metrics.jsonl `eval_accuracy`, every 10 steps).

    flock /tmp/hermes-docker.lock .venv/bin/python bench/stack_learning.py [--algo grpo|ppo|both] [--runs 3]
                                                                       [--budget-s 300] [--plot docs/stack-learning.png]
                                                                       [--to-end] [--curves runs.jsonl]

Per run: `<algo>: held-out <start> -> <end>, first >= 0.8 after <s> s of training` (<s> counts from the start of
step 1's training to the evaluation that first reached 0.8; the stack's start and the dry-run are not counted).
A run stops at that evaluation, or after --budget-s seconds of training. Exit 1 when any run did not reach 0.8
within the budget: the bench can fail. Hold the Docker lock (bench/stack_run.py says why).

--to-end: the run trains all its shipped steps (the trainer exits at `trainer.num_steps`), so <end> is how the
default run ends; such a run also fails when its last evaluation is below 0.8.
--curves FILE: append each run's curve to FILE (JSON lines); --plot then draws every curve in FILE, so runs of
separate invocations (one algorithm at a time) share one picture.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stack_run import StackRun, run_stack

GOAL = 0.8
END_S = 1800.0  # --to-end: seconds of training after which a run that has not finished is stopped


def evaluations(run: StackRun) -> list[dict]:
    """The step records that carry a held-out evaluation."""
    return [r for r in run.records if r.get("eval_accuracy") is not None]


def last_accuracy(run: StackRun) -> float:
    evaluated = evaluations(run)
    return evaluated[-1]["eval_accuracy"] if evaluated else 0.0


def first_goal(run: StackRun) -> dict | None:
    return next((r for r in run.records if (r.get("eval_accuracy") or 0.0) >= GOAL), None)


def line(run: StackRun) -> str:
    evaluated = evaluations(run)
    start = f"{run.baseline:.2f}" if run.baseline is not None else "?"
    end = f"{evaluated[-1]['eval_accuracy']:.2f} at step {evaluated[-1]['step']}" if evaluated else "no evaluation"
    goal = first_goal(run)
    when = (f"first >= {GOAL} after {goal['time'] - run.started:.0f} s of training (step {goal['step']})" if goal
            else f"never >= {GOAL} in {run.records[-1]['time'] - run.started:.0f} s" if run.records
            else "no step trained")
    return f"{run.algo}: held-out {start} -> {end}, {when}; the hypervisor took {run.steal:.0%} of the host's CPU (steal)"


def curve(run: StackRun) -> dict:
    """(seconds of training, held-out accuracy) of one run, the baseline at 0 s."""
    points = [(0.0, run.baseline)] if run.baseline is not None else []
    points += [(r["time"] - run.started, r["eval_accuracy"]) for r in evaluations(run)]
    return {"algo": run.algo, "points": points}


def plot(curves: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"grpo": "tab:blue", "ppo": "tab:orange"}
    fig, ax = plt.subplots(figsize=(7, 4))
    labelled: set[str] = set()
    for one in curves:
        algo, points = one["algo"], one["points"]
        label = None if algo in labelled else f"{algo.upper()} (stack)"
        labelled.add(algo)
        ax.plot([p[0] for p in points], [p[1] for p in points], color=colours[algo], alpha=0.8, label=label)
    ax.axhline(GOAL, color="grey", linestyle="--", linewidth=0.8, label=f"goal {GOAL}")
    ax.set_xlabel("seconds of training (from step 1)")
    ax.set_ylabel("held-out greedy accuracy (trainer's own evaluation)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("`make up` on CPU, shipped configs, 2 cores")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"curve written to {path}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("grpo", "ppo", "both"), default="both")
    parser.add_argument("--runs", type=int, default=3, help="runs per algorithm")
    parser.add_argument("--budget-s", type=float, default=300.0, help=f"seconds of training to reach {GOAL}")
    parser.add_argument("--plot", type=Path, default=None, help="write the curves to this PNG")
    parser.add_argument("--curves", type=Path, default=None, help="append each run's curve to this JSON-lines file")
    parser.add_argument("--to-end", action="store_true",
                        help=f"train the whole shipped run and fail also when it ends below {GOAL}")
    args = parser.parse_args(argv)
    # --to-end polls until the trainer has exited (stack_run stops reading then); END_S bounds a run that hangs.
    done = (lambda r: False) if args.to_end else (lambda r: first_goal(r) is not None)
    timeout_s = END_S if args.to_end else args.budget_s
    algos = ["grpo", "ppo"] if args.algo == "both" else [args.algo]
    runs: list[StackRun] = []
    began = time.monotonic()
    for i in range(args.runs):
        for algo in algos:
            run = run_stack(algo, done, timeout_s,
                            log=lambda m, i=i: print(f"  run {i + 1}: {m}", flush=True))
            runs.append(run)
            print(line(run), flush=True)
    print(f"{len(runs)} run(s) in {time.monotonic() - began:.0f} s wall", flush=True)
    curves = [curve(r) for r in runs if r.records and r.started is not None]
    if args.curves:
        with args.curves.open("a") as out:
            out.writelines(json.dumps(c) + "\n" for c in curves)
        curves = [json.loads(text) for text in args.curves.read_text().splitlines() if text.strip()]
    if args.plot:
        plot(curves, args.plot)
    failed = [r for r in runs if (g := first_goal(r)) is None or g["time"] - r.started > args.budget_s
              or (args.to_end and last_accuracy(r) < GOAL)]
    for run in failed:
        print(f"FAILED {line(run)} (budget {args.budget_s:.0f} s)\n{run.log_tail[-1500:]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

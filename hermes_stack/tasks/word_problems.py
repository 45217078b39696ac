"""Small word problems in gsm8k's shape, generated from templates (no copied data): the dataset of the real-model CPU
profile (`--model smollm2-135m`), written once to `configs/word_problems.jsonl` and served through the environment's
ordinary JSONL path (`[environment] dataset = "word_problems.jsonl"`, split by a hash of the question, 1 row in 10
held out: hermes_stack.tasks.datasets).

    python -m hermes_stack.tasks.word_problems configs/word_problems.jsonl

Why this shape: a 135M model on two CPU cores gets tens of RL steps, not thousands. One addition or subtraction of
small numbers with a one-line worked answer (`3 + 4 = 7` then `#### 7`) keeps completions near ten tokens, and the
base model already gets some right, so the reward has something to select from. A test checks that the committed
file is exactly what this module generates.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 0
NAMES = ["Ann", "Ben", "Mia", "Tom", "Sara", "Omar", "Lily", "Raj", "Zoe", "Leo", "Ivy", "Sam"]
ITEMS = ["apples", "pens", "stickers", "marbles", "books", "cookies", "shells", "cards", "coins", "eggs"]
ADD = [
    "{n} has {a} {i} and gets {b} more. How many {i} does {n} have now?",
    "{n} had {a} {i}. A friend gave {n} {b} more. How many {i} does {n} have?",
    "There are {a} {i} in a box. {n} puts in {b} more. How many {i} are in the box?",
]
SUB = [
    "{n} has {a} {i} and gives away {b}. How many {i} does {n} have left?",
    "There are {a} {i} on a table. {n} takes {b}. How many {i} are left?",
    "{n} had {a} {i} and lost {b}. How many {i} does {n} have now?",
]


def generate(seed: int = SEED) -> list[dict]:
    """Every (template, name, item, numbers) combination drawn once, in a seeded order: questions are unique."""
    rng = random.Random(seed)
    rows: dict[str, dict] = {}
    for _ in range(4000):
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        if rng.random() < 0.5:
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            question, work, result = rng.choice(ADD), f"{a} + {b} = {a + b}", a + b
        else:
            a = rng.randint(5, 15)
            b = rng.randint(1, a - 1)
            question, work, result = rng.choice(SUB), f"{a} - {b} = {a - b}", a - b
        text = question.format(n=name, i=item, a=a, b=b)
        rows.setdefault(text, {"question": text, "answer": f"{work}\n#### {result}"})
        if len(rows) >= 600:
            break
    return list(rows.values())


def to_jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0] if argv else "configs/word_problems.jsonl")
    path.write_text(to_jsonl(generate()), encoding="utf-8")
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

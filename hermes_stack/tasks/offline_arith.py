"""The offline task of the embedded CPU profile: single-digit addition, in gsm8k's shape.

Rows are `{"question": "3+4=", "answer": "#### 7"}` so the environment serves them exactly like gsm8k (the reference
is the number after `####`). All 100 pairs a+b with a, b in 0..9 are shuffled with a seed and split 80 train / 20
test, so the test split holds sums of pairs the policy never trained on.

The prompt is the question itself: the embedded tokenizer knows only digits, `+`, `=`, `#`, space and newline, so
there is no room for an English instruction. The format the model must produce is `PROMPT_FORMAT`'s answer part,
`#### N`, learnt in the embedded model's format-only warm start (see hermes_stack.trainer.embedded).
"""

from __future__ import annotations

import random
import re

DATASET_NAME = "offline-arith"
SPLITS = ("train", "test")
TEST_SIZE = 20
# What the model sees, and what it must answer: "<a>+<b>=" then "#### <a+b>".
PROMPT_FORMAT = "{question}"
ANSWER_FORMAT = "#### {answer}"
_ANSWER = re.compile(r"####\s*(-?\d+)")
_EXACT = re.compile(r"#### (\d+)")


def _pairs(seed: int) -> list[tuple[int, int]]:
    pairs = [(a, b) for a in range(10) for b in range(10)]
    random.Random(seed).shuffle(pairs)
    return pairs


def offline_arith(split: str, seed: int = 0) -> list[dict]:
    """The rows of one split ("train": 80 rows, "test": 20 rows); disjoint, deterministic for a seed."""
    if split not in SPLITS:
        raise ValueError(f"offline-arith split {split!r}: expected one of {', '.join(SPLITS)}")
    pairs = _pairs(seed)
    chosen = pairs[TEST_SIZE:] if split == "train" else pairs[:TEST_SIZE]
    return [{"question": f"{a}+{b}=", "answer": ANSWER_FORMAT.format(answer=a + b)} for a, b in chosen]


def format_prompt(question: str) -> str:
    """The prompt text for a question (the question itself; see the module docstring)."""
    return PROMPT_FORMAT.format(question=question)


def parse_answer(text: str) -> int | None:
    """The integer after the last `####` in a completion or reference answer, None when there is none."""
    found = _ANSWER.findall(text)
    return int(found[-1]) if found else None


def is_well_formatted(completion: str) -> bool:
    """Exactly `#### N` (surrounding whitespace aside): the format the prompt asks for."""
    return _EXACT.fullmatch(completion.strip()) is not None


def score(completion: str, answer: str, correctness_weight: float = 1.0, format_weight: float = 0.1) -> float:
    """correctness_weight * (right number) + format_weight * (exact format): the config's [reward] semantics,
    for in-process use (bench/learn.py). The environment service grades with its own reward module."""
    predicted = parse_answer(completion)
    correct = predicted is not None and predicted == parse_answer(answer)
    return correctness_weight * float(correct) + format_weight * float(is_well_formatted(completion))

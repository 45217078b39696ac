"""The offline task of the embedded CPU profile: addition without carry, in gsm8k's shape.

Rows are `{"question": "47+2=", "answer": "#### 49"}` so the environment serves them exactly like gsm8k (the reference
is the number after `####`).

Why this task, and not the whole single-digit table: held-out accuracy must measure generalisation, not luck.
- The held-out split is COMPOSITIONAL: two-digit + one-digit sums without carry (`47+2=` -> 49: the tens digit is
  copied, the units digit is a single-digit sum). All 495 of them are shuffled with a seed; 95 are held out, 400 are
  trained on. Every held-out problem is a new combination of parts seen in training (its tens digit with other units,
  its units sum under other tens), so a policy that learnt the parts solves it and one that memorised rows does not.
  (On the single-digit table instead, 80 train / 20 held-out pairs, a held-out pair is an entry never seen: best
  held-out accuracy varied 0.5-1.0 across seeds as the policy memorised the 80 rows.)
- The train split also holds the 55 single-digit sums without carry (`3+4=` -> 7): the units table on its own, an
  easy part a format-only policy gets right one time in ten. GRPO learns only from groups whose scores differ, so
  it needs such a part to start from: with the two-digit problems alone (about 1 right answer in 90) almost every
  group scored all-equal and GRPO never left chance (measured, bench/learn.py).

The prompt is the question itself: the embedded tokenizer knows only digits, `+`, `=`, `#`, space and newline, so
there is no room for an English instruction. The format the model must produce is `#### N`, learnt in the embedded
model's format-only warm start (hermes_stack.modelcore.embedded) from `warm_start_answer`.
"""

from __future__ import annotations

import random
import re

SPLITS = ("train", "test")
TEST_SIZE = 95  # of the 495 two-digit problems; the other 400 are trained on
# What the model sees, and what it must answer: "<a>+<b>=" then "#### <a+b>".
PROMPT_FORMAT = "{question}"
ANSWER_FORMAT = "#### {answer}"
_ANSWER = re.compile(r"####\s*(-?\d+)")
_EXACT = re.compile(r"#### (\d+)")


def _no_carry(first: range) -> list[tuple[int, int]]:
    """(a, b) for a in `first`, b a digit, whose units digits add up to at most 9."""
    return [(a, b) for a in first for b in range(10) if a % 10 + b <= 9]


def _two_digit(seed: int) -> list[tuple[int, int]]:
    pairs = _no_carry(range(10, 100))
    random.Random(seed).shuffle(pairs)
    return pairs


def offline_arith(split: str, seed: int = 0) -> list[dict]:
    """The rows of one split: "train" (400 two-digit problems and the 55 single-digit ones, shuffled together) or
    "test" (95 two-digit problems never trained on). Disjoint, deterministic for a seed."""
    if split not in SPLITS:
        raise ValueError(f"offline-arith split {split!r}: expected one of {', '.join(SPLITS)}")
    two_digit = _two_digit(seed)
    if split == "test":
        chosen = two_digit[:TEST_SIZE]
    else:
        chosen = two_digit[TEST_SIZE:] + _no_carry(range(10))
        random.Random(seed + 1).shuffle(chosen)
    return [{"question": f"{a}+{b}=", "answer": ANSWER_FORMAT.format(answer=a + b)} for a, b in chosen]


def warm_start_answer(question: str, rng: random.Random) -> str:
    """A well-formatted answer to `question` that is RANDOM: `#### N` with N a number as long as the first operand
    (no carry keeps the sum that long). It teaches the shape of an answer, never the arithmetic."""
    digits = len(question.split("+", 1)[0])
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return ANSWER_FORMAT.format(answer=rng.randint(low, 10**digits - 1))


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

"""The rule reward: `correctness_weight * correct + format_weight * well_formatted`. Pure functions.

The answer format every prompt asks for (gsm8k's own): the completion ends with a line

    #### <number>

e.g. `#### 72`. Commas, a currency sign, a plus sign, a decimal point or a unit after the number are accepted (`#### $1,000`, `#### +72`,
`#### 72.0`, `#### 18 apples`): equivalence with the reference is decided by math-verify, not by string equality.

- well_formatted: the last non-empty line is `#### ` followed by something math-verify reads as a number.
- correct: the text after the LAST `####` (anywhere) is equivalent to the reference. Without any marker, a `\\boxed{}`
  answer is still graded (models trained on MATH write it by habit) but the completion is not well formatted.
  A completion with neither marker nor box gets correct = False and well_formatted = False; the caller counts and
  logs it as a format failure (`RewardResult.reason`), so a zero reward is never silent.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass

MARKER = "####"
_BOXED = re.compile(r"\\boxed\s*\{")
# Only the tail matters and math-verify's cost grows with input length.
_MAX_ANSWER_CHARS = 200
# Plain integers (every offline-arith answer, most gsm8k ones) are compared as integers: the same verdict as
# math-verify's, at a fraction of its ~1.5 ms per completion, which bound the CPU stack's rollouts.
_PLAIN_INT = re.compile(r"[-+]?\d+")
# An explicit plus sign (`#### +9`, which the CPU stack's policy writes early on) is the number itself: math-verify
# reads `+9` as no number at all, so it is dropped before parsing (int() reads it as it is).
_PLUS = re.compile(r"\+(?=[\d.])")


@dataclass(frozen=True)
class RewardWeights:
    correctness: float = 1.0
    format: float = 0.1


# The key of each sequence's verdict in atroposlib's per-sequence `overrides`: the built-in environment sets it, the
# trainer counts it (trainer/metrics.py rollout_accuracy). One name for both services.
CORRECT_OVERRIDE = "hermes_correct"


@dataclass(frozen=True)
class RewardResult:
    score: float
    correct: bool
    well_formatted: bool
    extracted: str | None  # the answer text that was graded, None when none was found
    reason: str  # "ok", "wrong answer", "no '#### N' final line", ...


def _parse(text: str, reference: bool = False) -> list:
    """math-verify's parse of `text` (capped), a fresh list each call over a cached tuple: a completion's answer is
    parsed once for its format and its verdict, and a reference once per run while it stays in its own cache (each
    parse ~1.5 ms of sympy: the environment's largest own cost in the CPU stack, issue 22)."""
    # math-verify times out with SIGALRM, which only works on the main thread; elsewhere run without its timeout
    # (inputs are capped to _MAX_ANSWER_CHARS so parsing stays fast).
    main = threading.current_thread() is threading.main_thread()
    capped = text[:_MAX_ANSWER_CHARS]
    if _PLUS.match(capped):
        capped = capped[1:]
    return list(_parse_reference(capped, main) if reference else _parse_answer(capped, main))


def _parse_uncached(text: str, main_thread: bool) -> tuple:
    from math_verify import parse

    return tuple(parse(text, parsing_timeout=5 if main_thread else None))


# Answers: a chunk's worth and more (the format and the verdict of one completion ask for the same text). References:
# a dataset's worth (gsm8k's train split is 7,473), so a chunk's new answers never push them out.
_parse_answer = functools.lru_cache(maxsize=4096)(_parse_uncached)
_parse_reference = functools.lru_cache(maxsize=16384)(_parse_uncached)


def _verify(gold: list, candidate: list) -> bool:
    from math_verify import verify

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    return bool(verify(gold, candidate, timeout_seconds=timeout))


def _boxed_content(text: str) -> str | None:
    """The content of the last \\boxed{...}, braces balanced."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    start = matches[-1].end()
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def after_marker(text: str) -> str | None:
    """The text after the last `####` up to the end of that line, stripped; None when there is no marker."""
    index = text.rfind(MARKER)
    if index < 0:
        return None
    return text[index + len(MARKER):].split("\n", 1)[0].strip()


def reference_answer(answer: str) -> str:
    """gsm8k's reference: the text after the last `####` (the whole string when there is none)."""
    found = after_marker(answer)
    return found if found is not None else answer.strip()


def is_well_formatted(completion: str) -> bool:
    # The last non-empty line. Stripped, the text ends in a character that is not whitespace (everything
    # splitlines() splits on is whitespace to strip()), so its last line is that line: no list of every stripped
    # line (~3 us a completion, a share of the CPU stack's rollout path: issue 22).
    text = completion.strip()
    last = text.splitlines()[-1].strip() if text else ""
    if not last.startswith(MARKER):
        return False
    value = last[len(MARKER):].strip()
    return bool(value) and (_PLAIN_INT.fullmatch(value) is not None or bool(_parse(value)))


def answers_agree(candidate: str, reference: str) -> bool:
    if _PLAIN_INT.fullmatch(candidate) and _PLAIN_INT.fullmatch(reference):
        return int(candidate) == int(reference)
    gold = _parse(reference, reference=True)
    guess = _parse(candidate)
    if not gold or not guess:
        return False
    return _verify(gold, guess)


def score_completion(completion: str, answer: str, weights: RewardWeights = RewardWeights()) -> RewardResult:
    """Score one completion against a gsm8k-shaped answer (`... #### 72`) or a bare reference (`72`)."""
    reference = reference_answer(answer)
    formatted = is_well_formatted(completion)
    extracted = after_marker(completion)
    source = "marker"
    if extracted is None:
        extracted = _boxed_content(completion)
        source = "boxed"
    correct = bool(extracted) and answers_agree(extracted, reference)
    if correct and formatted:
        reason = "ok"
    elif extracted is None:
        reason = "no '#### N' final line and no \\boxed{} answer"
    elif not formatted:
        reason = "no '#### N' final line" + (" (graded the \\boxed{} answer)" if source == "boxed" else "")
        if not correct:
            reason += ", wrong answer"
    else:
        reason = "wrong answer"
    score = weights.correctness * float(correct) + weights.format * float(formatted)
    return RewardResult(score=score, correct=correct, well_formatted=formatted, extracted=extracted, reason=reason)


@functools.lru_cache(maxsize=16384)
def score_remembered(completion: str, answer: str, correctness: float, format: float) -> RewardResult:
    """score_completion with these weights, remembered per (completion, answer): a pure function, and a policy that
    has learnt an item writes the same completion for it again each time the item comes round. A hit is ~0.3 us
    where scoring is ~5 us, ~1.3 ms of a 256-row PPO chunk's tail in the environment (issue 22). The result is
    frozen, so a caller cannot change what the next one gets."""
    return score_completion(completion, answer, RewardWeights(correctness=correctness, format=format))


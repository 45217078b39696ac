"""The offline task: split sizes, no overlap, no carry, and held-out problems built only from trained parts."""

from __future__ import annotations

import random

import pytest

from hermes_stack.tasks.offline_arith import (
    TEST_SIZE,
    is_well_formatted,
    offline_arith,
    parse_answer,
    score,
    warm_start_answer,
)


def operands(row: dict) -> tuple[int, int]:
    a, b = row["question"].rstrip("=").split("+")
    return int(a), int(b)


def test_split_sizes_and_disjoint():
    train, test = offline_arith("train"), offline_arith("test")
    assert len(test) == TEST_SIZE == 95
    assert len(train) == 400 + 55
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert len({r["question"] for r in train}) == len(train)


def test_answers_are_the_sums_without_carry():
    for row in offline_arith("train") + offline_arith("test"):
        a, b = operands(row)
        assert parse_answer(row["answer"]) == a + b
        assert a % 10 + b <= 9 and 0 <= b <= 9
        assert row["answer"] == f"#### {a + b}"


def test_held_out_problems_are_two_digit_and_combine_trained_parts():
    train = [operands(r) for r in offline_arith("train")]
    tens_seen = {a // 10 for a, _ in train if a >= 10}
    units_seen = {(a % 10, b) for a, b in train}
    for a, b in map(operands, offline_arith("test")):
        assert a >= 10
        assert a // 10 in tens_seen
        assert (a % 10, b) in units_seen


def test_train_holds_every_single_digit_sum_without_carry():
    singles = {operands(r) for r in offline_arith("train") if operands(r)[0] < 10}
    assert singles == {(a, b) for a in range(10) for b in range(10) if a + b <= 9}


def test_deterministic_per_seed_and_seed_changes_the_split():
    assert offline_arith("test", 0) == offline_arith("test", 0)
    assert offline_arith("test", 0) != offline_arith("test", 1)


def test_unknown_split():
    with pytest.raises(ValueError, match="split 'dev'"):
        offline_arith("dev")


def test_warm_start_answers_have_the_format_and_length_but_not_the_sum():
    rng = random.Random(0)
    rows = offline_arith("train")
    hits = 0
    for row in rows * 4:
        answer = warm_start_answer(row["question"], rng)
        assert is_well_formatted(answer)
        assert len(str(parse_answer(answer))) == len(str(parse_answer(row["answer"])))
        hits += parse_answer(answer) == parse_answer(row["answer"])
    # chance level (1 in 10 for single-digit sums, 1 in 90 for two-digit), far from knowing the arithmetic
    assert hits / (len(rows) * 4) < 0.05


def test_score_weights():
    assert score("#### 49", "#### 49") == pytest.approx(1.1)
    assert score("#### 48", "#### 49") == pytest.approx(0.1)
    assert score("49", "#### 49") == 0.0
    assert score(" #### 49 ", "#### 49", correctness_weight=2.0, format_weight=0.5) == pytest.approx(2.5)


def test_the_answer_is_the_last_marker_and_the_format_is_the_whole_completion():
    # The held-out accuracy (modelcore/embedded.evaluate, bench/learn.py) reads the last `#### N`, as the reward does.
    assert parse_answer("#### 3\n#### 49") == 49
    assert parse_answer("no marker") is None
    # Exactly `#### N`: text before or after the marker is not the format, though the number may still be right.
    assert is_well_formatted("7 #### 49") is False
    assert is_well_formatted("#### 49 apples") is False
    assert is_well_formatted("  #### 49\n") is True
    assert score("7 #### 49", "#### 49") == pytest.approx(1.0)

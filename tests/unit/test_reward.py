"""The rule reward on real-looking completions: correctness by math-verify, format = final '#### N' line."""

import threading

import pytest

from hermes_stack.tasks.reward import (
    RewardWeights,
    is_well_formatted,
    reference_answer,
    score_completion,
    score_remembered,
)

GSM8K_ANSWER = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
)

# (case, completion, reference answer, correct, well_formatted)
TABLE = [
    ("correct", "She sold 48/2 = 24 in May, so 48 + 24 = 72 in total.\n#### 72", GSM8K_ANSWER, True, True),
    ("wrong", "She sold 48 + 48 = 96 clips.\n#### 96", GSM8K_ANSWER, False, True),
    ("unformatted", "She sold 48 + 24 = 72 clips in total.", GSM8K_ANSWER, False, False),
    ("boxed only", "48 + 24 = 72, so the answer is \\boxed{72}.", GSM8K_ANSWER, True, False),
    ("boxed after marker", "48 + 24 = 72\n#### \\boxed{72}", GSM8K_ANSWER, True, True),
    ("decimal", "48 + 24 = 72.0\n#### 72.0", GSM8K_ANSWER, True, True),
    ("commas", "The total is one thousand.\n#### 1,000", "#### 1000", True, True),
    ("commas in reference", "The total is 1000 dollars.\n#### 1000", "It costs 1,000.\n#### 1,000", True, True),
    ("currency and units", "He pays 5 * 3 = 15 dollars.\n#### $15 dollars", "#### 15", True, True),
    ("units", "She has 18 apples.\n#### 18 apples", "#### 18", True, True),
    ("marker not last line", "#### 72\nI hope this helps!", GSM8K_ANSWER, True, False),
    ("empty marker", "I am not sure.\n####", GSM8K_ANSWER, False, False),
    ("last marker wins", "#### 96\nWait, 48 + 24 = 72.\n#### 72", GSM8K_ANSWER, True, True),
    ("negative", "3 - 5 = -2\n#### -2", "#### -2", True, True),
    ("empty completion", "", GSM8K_ANSWER, False, False),
    ("tiny-model style", " #### 7", "#### 7", True, True),
    ("explicit plus", "4 + 5 = 9\n#### +9", "#### 9", True, True),
    ("explicit plus, decimal", "#### +9.0", "#### 9", True, True),
    ("explicit plus, wrong", "#### +8", "#### 9", False, True),
    ("plus of a negative", "#### +9", "#### -9", False, True),
    ("two plus signs", "#### ++9", "#### 9", False, False),
    ("plus before no number", "#### +nine", "#### 9", False, False),
]


@pytest.mark.parametrize("case,completion,answer,correct,formatted", TABLE, ids=[row[0] for row in TABLE])
def test_reward_table(case, completion, answer, correct, formatted):
    weights = RewardWeights(correctness=1.0, format=0.1)
    result = score_completion(completion, answer, weights)
    assert result.correct is correct
    assert result.well_formatted is formatted
    assert result.score == pytest.approx(1.0 * correct + 0.1 * formatted)


def test_weights_are_applied():
    result = score_completion("#### 72", "#### 72", RewardWeights(correctness=2.0, format=0.5))
    assert result.score == pytest.approx(2.5)
    wrong = score_completion("#### 71", "#### 72", RewardWeights(correctness=2.0, format=0.5))
    assert wrong.score == pytest.approx(0.5)


def test_remembered_scores_are_score_completions_for_each_weight_pair():
    for case, completion, answer, *_ in TABLE:
        for c, f in ((1.0, 0.1), (2.0, 0.5), (1.0, 0.1)):
            assert score_remembered(completion, answer, c, f) == score_completion(
                completion, answer, RewardWeights(correctness=c, format=f)), case


def test_missing_marker_reason_is_named():
    # No silent zero: the caller logs `reason`, which names the missing marker.
    result = score_completion("I think it is seventy-two.", GSM8K_ANSWER)
    assert result.score == 0.0
    assert result.extracted is None
    assert "####" in result.reason
    assert score_completion("48 + 24 = 72\n#### 72", GSM8K_ANSWER).reason == "ok"
    assert score_completion("#### 71", GSM8K_ANSWER).reason == "wrong answer"


def test_reference_answer_takes_text_after_last_marker():
    assert reference_answer(GSM8K_ANSWER) == "72"
    assert reference_answer("42") == "42"


def test_format_needs_a_number_after_marker():
    assert is_well_formatted("#### 12")
    assert not is_well_formatted("#### ")
    assert not is_well_formatted("#### twelve and a half-ish ??")


def test_the_format_reads_the_last_non_empty_line_as_a_list_of_every_stripped_line_would():
    """is_well_formatted reads only the last line of the stripped text (issue 22: no list of every line); the verdict
    is the one of the last non-empty stripped line of splitlines(), whatever line ends and blank lines surround it
    (splitlines also splits on \\x1c, \\x85, \\u2028 ..., all whitespace to strip())."""
    def by_every_line(completion: str) -> bool:  # the definition: the last non-empty stripped line
        lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
        return bool(lines) and lines[-1].startswith("####") and is_well_formatted(lines[-1])

    ends = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
    cases = ["", " ", "\n\n", "#### 12", "#### ", "x\n#### 12", "#### 12\nx", "#### 12\n\n  \n", "  #### 7  ",
             "#### twelve", "a\n####\n", "#### 3 apples\n \t", "#### 1,000"]
    cases += [f"work{end}#### 42{end}{end} " for end in ends] + [f"#### 42{end}tail" for end in ends]
    cases += [f"#### 5{end}{end}" for end in ends] + [f"{end}#### 9" for end in ends]
    verdicts = [(case, is_well_formatted(case), by_every_line(case)) for case in cases]
    assert [v for v in verdicts if v[1] != v[2]] == []
    assert sum(v[1] for v in verdicts) > len(ends) * 2  # both verdicts occur: the comparison is not vacuous
    assert sum(not v[1] for v in verdicts) > len(ends)


def test_reward_works_off_the_main_thread():
    # math-verify's timeout uses SIGALRM (main thread only): the reward must still work in worker threads.
    results = []
    thread = threading.Thread(target=lambda: results.append(score_completion("#### 72", GSM8K_ANSWER)))
    thread.start()
    thread.join()
    assert results and results[0].correct and results[0].well_formatted


@pytest.mark.parametrize("candidate,reference", [
    ("49", "49"), ("049", "49"), ("48", "49"), ("-3", "-3"), ("3", "-3"), ("0", "0"), ("1000", "1000"),
    ("18", "81"), ("7", "7"), ("+49", "49"), ("+3", "-3"),
])
def test_plain_integer_fast_path_gives_math_verify_verdict(candidate, reference):
    from hermes_stack.tasks import reward as rw

    slow = rw._verify(rw._parse(reference), rw._parse(candidate))
    assert rw.answers_agree(candidate, reference) == slow
    assert rw.is_well_formatted(f"#### {candidate}") == bool(rw._parse(candidate))


def test_each_answer_text_is_parsed_once_for_its_format_and_its_verdict(monkeypatch):
    """The reference and a non-integer answer are parsed by math-verify once, not once per use (each parse is sympy
    work), and the verdicts are the uncached ones."""
    import math_verify

    from hermes_stack.tasks import reward as rw

    rw._parse_answer.cache_clear()
    rw._parse_reference.cache_clear()
    parsed = []
    real = math_verify.parse
    monkeypatch.setattr(math_verify, "parse", lambda text, **kw: parsed.append(text) or real(text, **kw))
    first = score_completion("so\n#### 72.0", GSM8K_ANSWER)
    again = score_completion("so\n#### 72.0", GSM8K_ANSWER)
    assert first == again and first.correct and first.well_formatted
    assert sorted(parsed) == ["72", "72.0"]  # the answer's once (format and verdict), the reference's once
    wrong = score_completion("#### 71.5", GSM8K_ANSWER)
    assert not wrong.correct and wrong.well_formatted
    assert parsed.count("72") == 1
    for n in range(5000):  # more new answers than the answers' cache holds: the reference stays parsed
        score_completion(f"#### {n}.5", GSM8K_ANSWER)
    assert parsed.count("72") == 1
    rw._parse_answer.cache_clear()
    rw._parse_reference.cache_clear()

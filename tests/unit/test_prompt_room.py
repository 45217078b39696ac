"""Every prompt must leave room to answer within rollout.max_token_length (tasks/prompting.py PromptRoom): the pure
count and its one-line refusal, and the dry-run's check (trainer/prompt_check.py) on prompts built and tokenised as
the environment sends them. The environment's own check at start is in test_environment.py."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from fakes.stack_files import write_stack
from fakes.tiny_tokenizer import build_tiny_tokenizer

from hermes_stack.config.loader import load_stack
from hermes_stack.tasks.prompting import INSTRUCTION, MIN_NEW_TOKENS, PromptRoom, prompt_room, room_line
from hermes_stack.trainer.__main__ import HELD_OUT_ROWS
from hermes_stack.trainer.prompt_check import PromptRoomFailed, check_prompts

# ---------------------------------------------------------------- the count (pure)


def test_a_prompt_must_leave_four_new_tokens_below_the_limit() -> None:
    # 16 tokens: one stays free (Atropos drops a sequence at the limit), so an 11-token prompt leaves exactly 4.
    assert MIN_NEW_TOKENS == 4
    assert prompt_room([11], 16) == PromptRoom(count=1, shortest=11, longest=11, max_token_length=16, cramped=0)
    assert prompt_room([11], 16).least_new_tokens == 4
    assert prompt_room([12], 16).cramped == 1 and prompt_room([12], 16).least_new_tokens == 3
    room = prompt_room([5, 11, 12, 30], 16)
    assert room == PromptRoom(count=4, shortest=5, longest=30, max_token_length=16, cramped=2, longest_at=3)
    assert room.least_new_tokens == -15


def test_prompts_that_fit_are_no_problem_and_their_line_has_the_figures() -> None:
    room = prompt_room([5, 6, 11], 16)
    assert room.problem("c.toml", "train prompts", "gsm8k") is None
    assert room_line([("train prompts", room), ("held-out prompts", prompt_room([6], 16))]) == (
        "3 train prompts of 5-11 tokens, 1 held-out prompts of 6-6 tokens; rollout.max_token_length 16 leaves the "
        "longest 4 new tokens (at least 4 needed)")


def test_a_cramped_prompt_is_one_line_with_file_key_found_expected_and_the_fix() -> None:
    room = prompt_room([5, 12], 16)
    assert room.longest_at == 1
    problem = room.problem("configs/config_grpo.toml", "train prompts", "data/sums.jsonl",
                           longest_question="What is the sum of all the numbers from one to a hundred, counted twice?")
    assert problem.line() == (
        "configs/config_grpo.toml: rollout.max_token_length: found 16, which leaves 1 of 2 train prompts fewer than 4 "
        "new tokens (the longest prompt is 12 tokens, its question 'What is the sum of all the numbers from one to "
        "…'), expected room for at least 4 new tokens after every prompt. Hint: raise rollout.max_token_length to "
        "at least 17 (more for a worked answer) or shorten or drop the longest rows of data/sums.jsonl (a prompt's "
        "tokens include its chat template)")


def test_the_hint_names_only_what_makes_this_datasets_prompts_long() -> None:
    room = prompt_room([900], 512)
    assert room.problem("c.toml", "train prompts", "gsm8k", fewshot=3, system_prompt="Answer briefly.").hint == (
        "raise rollout.max_token_length to at least 905 (more for a worked answer) or lower [environment] fewshot "
        "(3 solved examples in every prompt) or shorten [environment] system_prompt (a prompt's tokens include its "
        "chat template)")
    # fewshot without a system prompt shows no examples (tasks/prompting.py messages): not named
    assert "fewshot" not in room.problem("c.toml", "train prompts", "gsm8k", fewshot=3).hint
    # the offline task's prompt is the bare sum: no template, no examples, no rows of a file to shorten
    assert room.problem("c.toml", "train prompts", "offline-arith", fewshot=3).hint == (
        "raise rollout.max_token_length to at least 905 (more for a worked answer)")


# ---------------------------------------------------------------- the dry-run's check


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return build_tiny_tokenizer(tmp_path_factory.mktemp("tok"))  # one token a character, and <s>


@pytest.fixture
def jsonl(tmp_path):
    rows = [{"question": f"What is {a}+{b}?", "answer": f"#### {a + b}"} for a in range(10) for b in range(6)]
    path = tmp_path / "sums.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def _stack(tmp_path, dataset, tokenizer_dir, max_token_length: int):
    write_stack(tmp_path / "configs", "grpo", dataset=str(dataset), model_path=str(tokenizer_dir),
                max_token_length=max_token_length)
    return load_stack("grpo", tmp_path / "configs", "gpu")


def _prompt_tokens(question: str) -> int:
    # tasks/prompting.prompt_text without a chat template: the question, a blank line, the instruction; <s> first
    return len(f"{question}\n\n{INSTRUCTION}\n") + 1


def test_the_dry_run_counts_the_split_and_the_held_out_rows_as_the_environment_sends_them(tmp_path, tokenizer_dir,
                                                                                          jsonl) -> None:
    from transformers import AutoTokenizer

    from hermes_stack.tasks.datasets import load_items

    stack = _stack(tmp_path, jsonl, tokenizer_dir, 200)
    where = {"offline": True, "base_dir": tmp_path / "configs"}
    train, test = (len(load_items(str(jsonl), split, 10**9, **where)) for split in ("train", "test"))
    tokens = _prompt_tokens("What is 1+2?")  # every question here is as long
    line = check_prompts(stack, AutoTokenizer.from_pretrained(tokenizer_dir), held_out_rows=4)
    assert line == (f"prompts: {train} train prompts of {tokens}-{tokens} tokens, {min(4, test)} held-out prompts of "
                    f"{tokens}-{tokens} tokens; rollout.max_token_length 200 leaves the longest {200 - tokens - 1} new "
                    "tokens (at least 4 needed)")


def test_the_dry_run_refuses_prompts_longer_than_the_limit_before_any_other_check(tmp_path, tokenizer_dir,
                                                                                 jsonl) -> None:
    from transformers import AutoTokenizer

    from hermes_stack.trainer.__main__ import LayerFailure, loop_checks

    stack = _stack(tmp_path, jsonl, tokenizer_dir, 64)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with pytest.raises(PromptRoomFailed) as refused:
        check_prompts(stack, tokenizer, held_out_rows=4)
    tokens = _prompt_tokens("What is 1+2?")
    assert re.fullmatch(
        rf"{re.escape(str(stack.config_path))}: rollout\.max_token_length: found 64, which leaves (\d+) of \1 train "
        rf"prompts fewer than 4 new tokens \(the longest prompt is {tokens} tokens, its question 'What is \d\+\d\?'\), "
        r"expected room for at least 4 new tokens after every prompt\. Hint: raise rollout\.max_token_length to at "
        rf"least {tokens + 5} \(more for a worked answer\) or shorten or drop the longest rows of "
        rf"{re.escape(str(jsonl))} \(a prompt's tokens include its chat template\)", str(refused.value)), refused.value
    # In the dry-run: a config error (exit 2), raised before the memory probe and the first weight push, which this
    # engine (a tokenizer and nothing else) could not run.
    with pytest.raises(LayerFailure) as failed:
        loop_checks(stack, SimpleNamespace(tokenizer=tokenizer), None, None, None)
    assert failed.value.exit_code == 2 and failed.value.layer == "config"
    assert str(failed.value) == f"trainer: config: {refused.value}"


def test_a_long_held_out_row_is_refused_too(tmp_path, tokenizer_dir, jsonl) -> None:
    """The trainer evaluates every held-out row with the budget its longest prompt leaves: one long test row would
    give every row a truncated answer."""
    from transformers import AutoTokenizer

    from hermes_stack.tasks.datasets import _split_of

    long_test = next(q for q in (f"How much is {n} plus {n}?" + " Think." * 20 for n in range(100))
                     if _split_of({"question": q}) == "test")
    jsonl.write_text(jsonl.read_text() + "\n" + json.dumps({"question": long_test, "answer": "#### 2"}))
    limit = _prompt_tokens("What is 1+2?") + 30  # room for the short rows, not for the long one
    stack = _stack(tmp_path, jsonl, tokenizer_dir, limit)
    with pytest.raises(PromptRoomFailed) as refused:
        check_prompts(stack, AutoTokenizer.from_pretrained(tokenizer_dir), held_out_rows=HELD_OUT_ROWS)
    assert "which leaves 1 of " in str(refused.value) and " held-out prompts fewer than 4 new tokens" in str(
        refused.value)
    assert f"(the longest prompt is {_prompt_tokens(long_test)} tokens, its question 'How much is " in str(
        refused.value)


def test_what_the_trainer_cannot_count_it_says_is_counted_elsewhere(tmp_path, tokenizer_dir, jsonl) -> None:
    stack = _stack(tmp_path, jsonl, tokenizer_dir, 64)  # too short: never read below
    assert check_prompts(stack, None, 16) == ("prompts: checked by the environment when it starts (this engine "
                                              "holds no tokenizer here)")
    gsm8k = SimpleNamespace(config=SimpleNamespace(environment=SimpleNamespace(name="gsm8k", dataset="gsm8k"),
                                                   rollout=SimpleNamespace(max_token_length=64)))
    assert check_prompts(gsm8k, object(), 16) == ("prompts: checked by the environment when it starts (gsm8k is "
                                                  "loaded there, from the hub)")
    mine = SimpleNamespace(config=SimpleNamespace(environment=SimpleNamespace(name="my-env", dataset="x.jsonl"),
                                                  rollout=SimpleNamespace(max_token_length=64)))
    assert check_prompts(mine, object(), 16) == "prompts: not checked: the environment my-env builds its own prompts"

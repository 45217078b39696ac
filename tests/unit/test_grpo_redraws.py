"""GRPO outside atroposlib's serve loop (process mode: test-inference; gateway rollouts) in env.py
collect_trajectories: one group per call, a group whose scores all agree counted as dropped and the next prompt
drawn, up to DRAWS_PER_WORKER rounds. The generation is a stub returning groups with chosen scores; the serve loop's
chunks are test_rollout_chunks.py's."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("atroposlib")


def make_env(scores_by_question: dict[str, list[float]]):
    from types import SimpleNamespace

    from hermes_stack.environment.env import HermesMathEnv, Totals

    env = object.__new__(HermesMathEnv)
    env._encoded = {}  # __init__'s prompt-ids cache
    env.config = SimpleNamespace(ensure_scores_are_not_same=True, prompts_per_batch=4, rollout_source="inference")
    env.totals, env._next = Totals(), 1  # atroposlib drew the first item already
    env.train_items = [{"question": q} for q in scores_by_question]
    env.process_mode = True  # no workers: test-inference's one group at a time
    asked: list[str] = []

    async def collect(item):
        asked.append(item["question"])
        return {"scores": scores_by_question[item["question"]], "question": item["question"]}

    env._collect_group = collect
    return env, asked


def test_groups_that_score_alike_are_counted_and_the_next_prompt_is_drawn():
    env, asked = make_env({"a": [0, 0], "b": [1, 1], "c": [1, 0], "d": [0, 1]})
    group, backlog = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert (group["question"], backlog, asked) == ("c", [], ["a", "b", "c"])
    assert env.totals.dropped_equal_scores == 2  # a and b; c is returned


def test_when_every_draw_agrees_the_last_group_goes_to_atroposlib_and_the_rest_are_counted():
    from hermes_stack.environment.env import DRAWS_PER_WORKER

    env, asked = make_env({"a": [1, 1], "b": [0, 0]})
    group, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(set(group["scores"])) == 1 and len(asked) == DRAWS_PER_WORKER
    # every group but the one returned is counted here; atroposlib drops (and env.py counts) the returned one
    assert env.totals.dropped_equal_scores == DRAWS_PER_WORKER - 1


def test_ppo_groups_of_one_are_not_redrawn():
    env, asked = make_env({"a": [1.0], "b": [1.0]})
    env.config.ensure_scores_are_not_same = False
    group, backlog = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert group["question"] == "a" and backlog == [] and asked == ["a"] and env._next == 1

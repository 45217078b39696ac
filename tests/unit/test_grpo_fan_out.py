"""GRPO fan-out in the environment (env.py collect_trajectories): how many prompts one worker draws at once, one
group returned per worker, the other groups worth training on kept as spares and used only under the same served
policy step, equal-score groups counted as dropped. The generation is a stub returning groups with chosen scores;
the real path is covered by test_env_atropos.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytest.importorskip("atroposlib")


def test_fan_out_keeps_about_a_batch_in_flight_within_its_bounds():
    from hermes_stack.environment.env import fan_out

    assert [fan_out(32, w, 8) for w in (32, 31, 16, 11, 8, 4, 1, 0)] == [1, 2, 2, 3, 4, 8, 8, 8]
    assert fan_out(1, 5, 8) == 1  # never below one


def make_env(scores_by_question: dict[str, list[float]], workers: int, prompts: int = 4):
    from hermes_stack.environment.env import HermesMathEnv, Totals

    env = object.__new__(HermesMathEnv)
    env._encoded = {}  # __init__'s prompt-ids cache
    env.config = SimpleNamespace(ensure_scores_are_not_same=True, prompts_per_batch=prompts,
                                 rollout_source="inference")
    env.totals, env._spares, env._next = Totals(), [], 1  # atroposlib drew the first item already
    env.train_items = [{"question": q} for q in scores_by_question]
    env.workers = set(range(workers))
    env.served = 5

    async def collect(item):
        return {"scores": scores_by_question[item["question"]], "question": item["question"],
                "generation_params": {"policy_step": env.served}}

    env._collect_group = collect
    env.policy_step = lambda: env.served
    return env


def test_one_group_is_returned_and_the_others_worth_training_on_wait_as_spares():
    env = make_env({"a": [0, 0], "b": [1, 0], "c": [1, 1], "d": [0, 1]}, workers=1)  # fan 4: a..d at once
    group, backlog = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert (group["question"], backlog) == ("b", [])
    assert [g["question"] for g in env._spares] == ["d"]
    assert env.totals.dropped_equal_scores == 2  # a and c

    item = {"question": "x"}
    group, backlog = asyncio.run(env.collect_trajectories(item))  # same policy step: the spare, item given back
    assert (group["question"], backlog, env.totals.spares_used) == ("d", [item], 1)


def test_a_spare_from_an_older_policy_step_is_discarded_not_sent():
    env = make_env({"a": [0, 0], "b": [1, 0], "c": [1, 1], "d": [0, 1]}, workers=1)
    asyncio.run(env.collect_trajectories(env.train_items[0]))
    env.served = 6  # the trainer pushed new weights meanwhile
    group, backlog = asyncio.run(env.collect_trajectories(env.train_items[1]))
    assert group["generation_params"]["policy_step"] == 6 and backlog == []
    assert env.totals.spares_discarded == 1


def test_when_every_draw_agrees_the_last_group_goes_to_atroposlib_and_the_rest_are_counted():
    from hermes_stack.environment.env import DRAWS_PER_WORKER

    env = make_env({"a": [1, 1], "b": [0, 0]}, workers=2, prompts=4)  # fan 2
    group, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(set(group["scores"])) == 1 and env._spares == []
    # every group but the one returned is counted here; atroposlib drops (and env.py counts) the returned one
    assert env.totals.dropped_equal_scores == 2 * DRAWS_PER_WORKER - 1


def test_no_fan_out_for_gateway_rollouts_or_process_mode():
    env = make_env({"a": [0, 0]}, workers=1)
    assert env._fan() == 4
    env.config.rollout_source = "gateway"  # a paid service: never more calls than asked for
    assert env._fan() == 1
    env.config.rollout_source, env.process_mode = "inference", True
    assert env._fan() == 1


def test_ppo_groups_of_one_are_neither_fanned_out_nor_redrawn():
    """Without a server that takes batched prompts (test_ppo_chunks.py covers the one that does): one group."""
    env = make_env({"a": [1.0]}, workers=1)
    env.config.ensure_scores_are_not_same, env.config.group_size = False, 1
    group, backlog = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert group["question"] == "a" and backlog == [] and env._next == 1

"""The environment leaves when the trainer has pushed its last step (stack_behaviour.StackBehaviour), not when
Atropos' step plus its queue pass total_steps: Atropos counts batches handed out, and a trainer that hands one back
unused (every group too stale) would otherwise wait for a batch no environment sends (the GPU rehearsal's stall)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from hermes_stack.environment import __main__ as env_main
from hermes_stack.environment.stack_behaviour import StackBehaviour, TrainerFinished
from hermes_stack.modelcore.weights_layout import write_served_step

TOTAL = 8


class Upstream:
    """BaseEnv's get_status as far as the mixin sees it: it fills status_dict."""

    def __init__(self, config):
        self.config = config
        self.status_dict: dict = {}

    async def get_status(self):
        self.status_dict = {"current_step": 7, "queue_size": 12}


class Env(StackBehaviour, Upstream):
    pass


def env(data_dir=None) -> Env:
    return Env(SimpleNamespace(total_steps=TOTAL, data_dir=str(data_dir) if data_dir else None))


def status(e: Env) -> None:
    asyncio.run(e.get_status())


def test_without_a_data_volume_upstreams_rule_stands():
    e = env()
    status(e)
    assert e.config.total_steps == TOTAL and e.trainer_steps is None


def test_before_the_first_push_upstreams_rule_stands(tmp_path):
    e = env(tmp_path)
    status(e)
    assert e.config.total_steps == TOTAL and e.trainer_steps is None


def test_while_the_trainer_is_behind_the_environment_stays(tmp_path):
    write_served_step(tmp_path / "weights", 5)
    e = env(tmp_path)
    status(e)
    # Atropos at step 7 with 12 groups queued (3 batches) is past 8 by upstream's sum; the trainer has pushed 5
    assert e.trainer_steps == TOTAL
    assert e.status_dict["current_step"] + e.status_dict["queue_size"] // 4 <= e.config.total_steps
    write_served_step(tmp_path / "weights", TOTAL - 1)
    status(e)  # still behind: still no exit, and the kept total is not the lifted one
    assert e.trainer_steps == TOTAL


def test_once_the_trainer_pushed_its_last_step_it_leaves(tmp_path):
    write_served_step(tmp_path / "weights", 3)
    e = env(tmp_path)
    status(e)
    write_served_step(tmp_path / "weights", TOTAL)
    with pytest.raises(TrainerFinished) as raised:
        status(e)
    assert raised.value.args == (TOTAL,)


def test_it_says_the_step_the_trainer_pushed_even_past_total_steps(tmp_path):
    """A trainer resumed with a larger num_steps than this environment was started with pushes past TOTAL: the
    environment leaves, naming the step pushed, not its own total."""
    write_served_step(tmp_path / "weights", TOTAL + 2)
    with pytest.raises(TrainerFinished) as raised:
        status(env(tmp_path))
    assert raised.value.args == (TOTAL + 2,)


def test_a_users_environment_reads_the_volume_from_ready_dir(tmp_path):
    write_served_step(tmp_path / "weights", TOTAL)
    e = Env(SimpleNamespace(total_steps=TOTAL))  # a user's config has no data_dir
    e.ready_dir = str(tmp_path)
    with pytest.raises(TrainerFinished):
        status(e)


def test_the_stacks_ready_dir_wins_over_a_users_own_data_dir_field(tmp_path):
    """A user's config may have a `data_dir` of its own meaning something else: the stack's volume (ready_dir) is
    the one read."""
    stack, other = tmp_path / "stack", tmp_path / "theirs"
    other.mkdir()
    write_served_step(stack / "weights", TOTAL)
    e = Env(SimpleNamespace(total_steps=TOTAL, data_dir=str(other)))
    e.ready_dir = str(stack)
    assert e._data_dir() == str(stack)
    with pytest.raises(TrainerFinished):
        status(e)


POLLS = 50  # the fake loop's bound: a rule that never raises fails the test instead of hanging it


def served_class(seen: dict, fail: Exception | None = None, workers: int = 3):
    """An environment class `serve` runs: upstream's loop polls the status (starting `workers` workers first), or
    raises `fail` as a broken environment or an unreachable Atropos would."""

    class Served(Env):
        ready_marker = None

        def __init__(self, config, server_configs, slurm, testing):
            super().__init__(config)
            self.workers: set = set()
            self.curr_step = 0

        async def env_manager(self):
            seen["workers"] = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(workers)]
            self.workers.update(seen["workers"])
            if fail is not None:
                raise fail
            for _ in range(POLLS):
                await self.get_status()
                await asyncio.sleep(0)
            seen["loop ran out"] = True

        async def close_pools(self):  # serve's `finally`: every worker was told to stop before the loop ends
            seen["cancelling"] = [worker.cancelling() for worker in seen["workers"]]
            for worker in seen["workers"]:
                worker.cancel()

    return Served


def test_serve_ends_cleanly_and_cancels_the_workers(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("hermes_stack.service_heap.freeze_startup_heap", lambda name: None)
    write_served_step(tmp_path / "weights", TOTAL)
    seen: dict = {}
    config = SimpleNamespace(total_steps=TOTAL, data_dir=str(tmp_path))
    with caplog.at_level(logging.INFO, logger="hermes_stack.environment"):
        assert asyncio.run(env_main.serve(config, [], env_class=served_class(seen))) == 0
    assert "loop ran out" not in seen
    assert seen["cancelling"] == [1, 1, 1]
    assert f"total_steps {TOTAL} reached (the trainer pushed step {TOTAL})" in caplog.text
    assert config.total_steps == TOTAL  # never lifted: the trainer was done at the first look


def test_a_real_failure_is_not_taken_for_the_end_of_training(tmp_path, monkeypatch, caplog):
    """Only TrainerFinished ends serve with 0: a broken environment (or an unreachable Atropos) raises, so compose
    restarts the service, and the ready marker and pools are still cleaned up."""
    monkeypatch.setattr("hermes_stack.service_heap.freeze_startup_heap", lambda name: None)
    seen: dict = {}
    config = SimpleNamespace(total_steps=TOTAL, data_dir=str(tmp_path))
    with caplog.at_level(logging.INFO, logger="hermes_stack.environment"), pytest.raises(RuntimeError, match="boom"):
        asyncio.run(env_main.serve(config, [], env_class=served_class(seen, fail=RuntimeError("boom"))))
    assert "cancelling" in seen  # the `finally` ran
    assert "reached" not in caplog.text


class Sampling:
    """A user's environment as the mixin sees it: its groups carry no policy step, unless it sets one itself; the
    trainer pushes step 6 while the generation runs."""

    def __init__(self, config, weights, own_step=None):
        self.config, self.weights, self.own_step = config, weights, own_step

    async def collect_trajectories(self, item):
        write_served_step(self.weights, 6)  # a push lands mid-generation: the group was sampled with step 5
        params = None if self.own_step is None else {"policy_step": self.own_step, "temperature": 1.0}
        groups = [{"tokens": [[1]], "scores": [1.0], "generation_params": params}, {"tokens": [[2]], "scores": [0.0]}]
        return groups, []


class SamplingEnv(StackBehaviour, Sampling):
    pass


def test_a_user_environments_groups_carry_the_step_served_when_their_generation_began(tmp_path):
    """The trainer bounds staleness by it; untagged groups passed unbounded (its step lines said staleness=nan)."""
    write_served_step(tmp_path / "weights", 5)
    e = SamplingEnv(SimpleNamespace(data_dir=str(tmp_path)), tmp_path / "weights")
    groups, _ = asyncio.run(e.collect_trajectories({}))
    assert [g["generation_params"] for g in groups] == [{"policy_step": 5}, {"policy_step": 5}]
    own = SamplingEnv(SimpleNamespace(data_dir=str(tmp_path)), tmp_path / "weights", own_step=3)
    groups, _ = asyncio.run(own.collect_trajectories({}))
    assert groups[0]["generation_params"] == {"policy_step": 3, "temperature": 1.0}  # its own step is kept
    assert groups[1]["generation_params"] == {"policy_step": 6}
    untagged = SamplingEnv(SimpleNamespace(data_dir=None), tmp_path / "weights")
    groups, _ = asyncio.run(untagged.collect_trajectories({}))  # no data volume: nothing to read, nothing tagged
    assert "generation_params" not in groups[1]


class SelfTagging(StackBehaviour, Sampling):
    tags_policy_step = True  # as the built-in environment's inference rollouts: it tags right before it samples


def test_an_environment_that_tags_its_own_groups_is_not_read_for_again(tmp_path, monkeypatch):
    """The built-in environment reads the served step right before each chunk samples; the mixin read the same file
    again for every chunk, on the chunk's path."""
    import hermes_stack.environment.stack_behaviour as behaviour

    write_served_step(tmp_path / "weights", 5)
    reads = []
    monkeypatch.setattr(behaviour, "read_served_step", lambda path: reads.append(path) or 5)
    groups, _ = asyncio.run(SelfTagging(SimpleNamespace(data_dir=str(tmp_path)), tmp_path / "weights")
                            .collect_trajectories({}))
    assert reads == [] and "generation_params" not in groups[1]
    groups, _ = asyncio.run(SamplingEnv(SimpleNamespace(data_dir=str(tmp_path)), tmp_path / "weights")
                            .collect_trajectories({}))
    assert len(reads) == 1 and groups[1]["generation_params"] == {"policy_step": 5}


def test_the_built_in_environment_tags_its_inference_rollouts_itself_and_leaves_gateway_ones_to_the_mixin():
    from hermes_stack.environment.env import HermesMathEnv

    env = object.__new__(HermesMathEnv)
    env.config = SimpleNamespace(rollout_source="inference")
    assert env.tags_policy_step
    env.config = SimpleNamespace(rollout_source="gateway")
    assert not env.tags_policy_step

"""The trainer's Atropos client against atroposlib's real run-api (a loopback subprocess)."""

from __future__ import annotations

import itertools

import httpx
import pytest
from trainer_helpers import Feeder, free_port

from hermes_stack.trainer.atropos_client import (
    PROMPT_LOGPROB,
    AtroposClient,
    AtroposError,
    NoBatchError,
    groups_from_batch,
)
from hermes_stack.trainer.engine import Sequence


@pytest.fixture
def client(api):
    api.reset()
    c = AtroposClient(api.url)
    yield c
    c.close()


def _register(client: AtroposClient, batch: int) -> None:
    client.register(batch_size_sequences=batch, max_token_len=64, checkpoint_dir="/data/checkpoints",
                    save_checkpoint_interval=2, starting_step=3, num_steps=10, wandb_group="g", wandb_project="p")


def test_batch_before_register_is_a_protocol_error_with_a_hint(client) -> None:
    with pytest.raises(AtroposError, match="must /register first"):
        client.poll_batch()


def test_register_poll_and_convert_a_full_batch(client, api) -> None:
    _register(client, 8)
    assert client.info() == {"batch_size": 8, "max_token_len": 64}
    assert client.status()["current_step"] == 3
    assert client.poll_batch() is None  # this first poll is what lets the environment register
    feeder = Feeder(api.url, group_size=4)
    feeder.register()
    feeder.send(feeder.group([5, 6, 7], [[8, 9], [10, 11], [12, 13], [14, 15]], [1.0, 0.0, 0.5, 0.0]))
    assert client.poll_batch() is None  # 4 of 8 sequences
    feeder.send(feeder.group([1, 2], [[3], [4], [5], [6]], [0.0, 1.0, 1.0, 0.0], logprobs=False))
    batch = client.get_batch(timeout_s=5)
    assert client.status()["current_step"] == 4
    groups = groups_from_batch(batch)
    assert [len(g) for g in groups] == [4, 4]
    first = groups[0][0]
    assert first == Sequence(tokens=[5, 6, 7, 8, 9], mask=[-100, -100, -100, 8, 9], score=1.0,
                             logprobs=[PROMPT_LOGPROB] * 3 + [-0.5, -0.6])
    assert [s.score for s in groups[0]] == [1.0, 0.0, 0.5, 0.0]
    assert groups[1][2] == Sequence(tokens=[1, 2, 5], mask=[-100, -100, 5], score=1.0, logprobs=[])


def test_no_environment_is_named_as_the_cause(client) -> None:
    _register(client, 4)
    with pytest.raises(NoBatchError, match="no environment has registered"):
        client.get_batch(timeout_s=0.3)


def test_registered_but_silent_environment_names_equal_scores(client, api) -> None:
    _register(client, 4)
    client.poll_batch()
    Feeder(api.url, group_size=4).register()
    with pytest.raises(NoBatchError, match="all its scores were equal"):
        client.get_batch(timeout_s=0.3)


def test_silent_environment_with_dead_inference_names_inference(client, api) -> None:
    _register(client, 4)
    client.poll_batch()
    Feeder(api.url, group_size=4).register()
    with pytest.raises(NoBatchError, match="inference service does not answer"):
        client.get_batch(timeout_s=0.3, inference_ok=lambda: False)


def test_partial_queue_names_the_batch_arithmetic(client, api) -> None:
    _register(client, 8)
    client.poll_batch()
    feeder = Feeder(api.url, group_size=4)
    feeder.register()
    feeder.send_random(1)
    with pytest.raises(NoBatchError, match=r"1 group\(s\) queued but a batch needs 8"):
        client.get_batch(timeout_s=0.3)


def test_stop_request_abandons_the_wait(client) -> None:
    _register(client, 4)
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 3

    assert client.get_batch(timeout_s=30, should_stop=stop) is None


def test_unreachable_atropos_says_which_service() -> None:
    c = AtroposClient(f"http://127.0.0.1:{free_port()}", timeout_s=1)
    with pytest.raises(AtroposError, match="is the atropos service"):
        c.status()


def test_completion_only_logprobs_are_right_aligned_and_bad_lengths_refused() -> None:
    item = {"tokens": [[1, 2, 3, 4]], "masks": [[-100, -100, 3, 4]], "scores": [0.5],
            "inference_logprobs": [[-0.1, -0.2]]}
    assert groups_from_batch([item])[0][0].logprobs == [1.0, 1.0, -0.1, -0.2]
    with pytest.raises(AtroposError, match="cannot align"):
        groups_from_batch([{**item, "inference_logprobs": [[-0.1, -0.2, -0.3]]}])
    with pytest.raises(AtroposError, match="expected equal counts"):
        groups_from_batch([{**item, "scores": [0.5, 1.0]}])


def test_mock_transport_non_json_answer_is_reported() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>proxy</html>"))
    with pytest.raises(AtroposError, match="non-JSON"):
        AtroposClient("http://atropos:8000", transport=transport).status()


def test_sequences_longer_than_the_trainer_limit_are_cut() -> None:
    item = {"tokens": [[1, 2, 3, 4, 5], [1, 2, 3]], "masks": [[-100, -100, 3, 4, 5], [-100, -100, 3]],
            "scores": [1.0, 0.0], "inference_logprobs": [[1.0, 1.0, -0.1, -0.2, -0.3], [1.0, 1.0, -0.4]]}
    long, short = groups_from_batch([item], max_len=4)[0]
    assert long == Sequence(tokens=[1, 2, 3, 4], mask=[-100, -100, 3, 4], score=1.0, logprobs=[1.0, 1.0, -0.1, -0.2])
    assert short.tokens == [1, 2, 3] and short.logprobs == [1.0, 1.0, -0.4]


def test_a_restarted_atropos_gets_the_same_registration_again_at_the_trainers_own_step(client, api) -> None:
    _register(client, 8)  # starting_step 3
    client.trainer_step = 7
    api.restart()
    said: list[str] = []
    client.on_reregister = said.append
    assert client.poll_batch() is None
    assert said and "forgot this trainer" in said[0] and "registered again at step 7" in said[1]
    assert client.info() == {"batch_size": 8, "max_token_len": 64}
    assert client.status()["current_step"] == 7  # not 3: step numbers never go back


def test_a_group_posted_to_a_restarted_atropos_before_the_trainer_registers_again_does_not_wedge_it(client, api):
    """Seen in the stack: the environment posts to the fresh run-api first; run-api then skips initialising the run
    on /register (it checks for a queue) and would answer every /batch "not registered"."""
    _register(client, 8)
    client.trainer_step = 4
    api.restart()
    early = Feeder(api.url, group_size=4)
    early.env_id = 0  # the environment still has its old env_id
    early.send(early.group([1, 2], [[3], [4], [5], [6]], [0.0, 1.0, 1.0, 0.0]))
    said: list[str] = []
    client.on_reregister = said.append
    assert client.poll_batch() is None  # forgot -> registers again, sees the run uninitialised, clears, registers
    assert client.info() == {"batch_size": 8, "max_token_len": 64}
    assert client.poll_batch() is None and client.status()["current_step"] == 4
    assert sum("forgot this trainer" in line for line in said) == 1, said


def test_an_atropos_outage_is_ridden_out_and_the_trainer_registers_again_at_its_step(client, api) -> None:
    import threading

    _register(client, 8)
    client.trainer_step = 5
    said: list[str] = []
    client.on_reregister = said.append
    api.stop()  # connection refused from now on
    timer = threading.Timer(1.5, api.restart)
    timer.start()
    try:
        with pytest.raises(NoBatchError):  # back, registered again, and then no environment sends anything
            client.get_batch(timeout_s=1.0)
    finally:
        timer.join()
    assert "atropos unreachable" in said[0] and "waiting up to 600 s" in said[0], said
    assert any("registered again at step 5" in line for line in said), said
    assert client.status()["current_step"] == 5 and client.outages == 1


def test_an_outage_past_its_bound_stops_with_atropos_gone(client, api) -> None:
    from hermes_stack.trainer.atropos_client import AtroposGone

    _register(client, 8)
    client.outage_s = 1.0
    client.on_reregister = lambda _line: None
    api.stop()
    try:
        with pytest.raises(AtroposGone, match="did not come back within 1 s"):
            client.get_batch(timeout_s=30.0)
    finally:
        api.restart()


class _Clock:
    """time.monotonic/time.sleep for get_batch: sleeping advances the clock, so the test runs in no real time."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_batch_that_lands_mid_wait_is_taken_within_a_quarter_second(client, monkeypatch) -> None:
    """The backoff stops at 0.25 s: with the old 2 s cap a batch ready at 2.0 s was taken at 3.15 s."""
    import hermes_stack.trainer.atropos_client as module

    clock = _Clock()
    monkeypatch.setattr(module, "time", clock)
    polls: list[float] = []

    def poll() -> list | None:
        polls.append(clock.now)
        return [{"tokens": []}] if clock.now >= 2.0 else None

    monkeypatch.setattr(client, "poll_batch", poll)
    assert client.get_batch(timeout_s=30) == [{"tokens": []}]
    assert 2.0 <= polls[-1] <= 2.25 + 1e-9
    gaps = [b - a for a, b in itertools.pairwise(polls)]
    assert gaps[0] == pytest.approx(0.05) and max(gaps) == pytest.approx(0.25)  # backs off, but not past 0.25 s

"""The environment's rollout rate: the clock's arithmetic on a fake clock (reference values), and the batch line
env.py writes read back by the bench's parser (bench/stack_throughput.py)."""

from __future__ import annotations

import logging

import pytest


class Ticks:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_clock_counts_wall_time_with_any_group_in_flight_once():
    from hermes_stack.environment.rollout_clock import RolloutClock, rollout_rate

    now = Ticks()
    clock = RolloutClock(now)
    clock.enter()           # t=0: one group
    now.t = 1.0
    clock.enter()           # t=1: two overlap
    now.t = 2.0
    clock.leave()
    now.t = 3.0
    clock.leave()           # busy 0..3
    now.t = 5.0             # idle 3..5 is not counted
    clock.enter()
    now.t = 6.5
    assert clock.busy_s() == pytest.approx(4.5)  # the open interval counts
    clock.leave()
    now.t = 9.0
    assert clock.busy_s() == pytest.approx(4.5) and clock.inflight == 0
    assert rollout_rate(90, 4.5) == pytest.approx(20.0)
    assert rollout_rate(0, 0.0) == 0.0


def test_the_batch_line_reads_back_as_total_sequences_over_total_in_flight_time(caplog):
    pytest.importorskip("atroposlib")
    from hermes_stack.environment.env import HermesMathEnv, Totals
    from hermes_stack.environment.rollout_clock import RolloutClock, awaiting_from_log, rate_from_log

    now = Ticks()
    env = object.__new__(HermesMathEnv)
    env._encoded = {}  # __init__'s prompt-ids cache
    env.totals, env.judge = Totals(clock=RolloutClock(now)), None
    env._chunked = lambda: True  # the serve loop's chunks (only they time their /generate)
    caplog.set_level(logging.INFO, logger="hermes_stack.environment")
    for sequences, busy in ((400, 2.0), (300, 1.0), (100, 1.0)):  # per batch: 200, 300, 100 sequences/s
        env.totals.clock.enter()
        now.t += busy
        env.totals.clock.leave()
        now.t += 0.7  # nothing in flight: not counted
        env.totals.sequences += sequences
        env.totals.generate_s += busy / 2  # half of each batch's in-flight time awaiting /generate
        env.totals.recent = [0.5, 0.25]
        env._log_batch()
    assert ("rollout rate 200 sequences/s (400 generated in 2.00 s with groups in flight, chunks awaiting /generate "
            "1.00 s)") in caplog.text
    assert "(300 generated in 1.00 s with groups in flight, chunks awaiting /generate 0.50 s)" in caplog.text  # per line
    assert (awaiting_from_log(caplog.text), awaiting_from_log(caplog.text, skip=1)) == pytest.approx((2.0, 1.0))
    assert rate_from_log(caplog.text) == pytest.approx((200.0, 800, 4.0))
    assert rate_from_log(caplog.text, skip=1) == pytest.approx((200.0, 400, 2.0))  # 400 / 2.0, not mean(300, 100)
    env._chunked = lambda: False  # process mode, a BaseEnv's own rollouts: no split to report, not "0.00 s"
    env.totals.recent = [0.5]
    env._log_batch()
    assert caplog.text.splitlines()[-1].count("with groups in flight) | run:") == 1
    assert rate_from_log(caplog.text) == pytest.approx((200.0, 800, 4.0))  # the line still reads back

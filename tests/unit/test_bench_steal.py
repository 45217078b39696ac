"""bench/stack_run.py's reading of the host's steal: the share of CPU time its hypervisor gave other guests between
two /proc/stat readings, printed beside the stack benches' rates (a raw rate that moves by a third within minutes
comes with it)."""

from __future__ import annotations

import math

from bench_helpers import bench_module


def stack_run_module():
    return bench_module("stack_run")


STAT = """cpu  100 5 50 800 10 1 2 32 7 0
cpu0 50 2 25 400 5 0 1 16 3 0
intr 12345
"""


def test_cpu_times_reads_the_aggregate_line_only():
    assert stack_run_module().cpu_times(STAT) == [100, 5, 50, 800, 10, 1, 2, 32, 7, 0]
    assert stack_run_module().cpu_times("intr 1\n") == []


def test_steal_is_its_share_of_the_time_spent_between_readings_guest_time_left_out():
    m = stack_run_module()
    before = [100, 5, 50, 800, 10, 1, 2, 32, 7, 0]
    # 200 ticks spent: 60 user, 80 idle, 40 steal (20 of the rest in system, nice, iowait, irq, softirq); guest +50
    after = [160, 5, 65, 880, 12, 2, 4, 72, 57, 0]
    assert m.steal_share(before, after) == 40 / 200


def test_no_steal_field_or_no_time_spent_reads_nan():
    m = stack_run_module()
    assert math.isnan(m.steal_share([1, 2, 3, 4], [2, 3, 4, 5]))
    same = [100, 5, 50, 800, 10, 1, 2, 32]
    assert math.isnan(m.steal_share(same, same))
    assert math.isnan(m.steal_share([], []))

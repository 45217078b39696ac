"""DepartureWatch: which environment stopped sending while no batch formed (pure)."""

from hermes_stack.trainer.departures import DepartureWatch


def test_an_environment_whose_queued_groups_do_not_move_for_the_bound_is_departed():
    watch = DepartureWatch(after_s=10)
    assert watch.observe(0, {0: 5, 1: 3}, own={0}) == {}
    assert watch.observe(9, {0: 5, 1: 3}, own={0}) == {}
    assert watch.observe(10, {0: 5, 1: 3}, own={0}) == {1: (3, 10)}  # ours (0) never, though as quiet


def test_a_sending_environment_or_one_with_nothing_queued_is_not_departed():
    watch = DepartureWatch(after_s=10)
    watch.observe(0, {1: 3, 2: 0}, own=set())
    watch.observe(8, {1: 4, 2: 0}, own=set())  # env 1 sent a group: a new window
    assert watch.observe(15, {1: 4, 2: 0}, own=set()) == {}
    assert watch.observe(18, {1: 4, 2: 0}, own=set()) == {1: (4, 10)}


def test_reset_starts_every_window_again():
    watch = DepartureWatch(after_s=10)
    watch.observe(0, {1: 3}, own=set())
    watch.reset()
    assert watch.observe(12, {1: 3}, own=set()) == {}
    assert watch.observe(22, {1: 3}, own=set()) == {1: (3, 10)}

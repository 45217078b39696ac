"""service_heap: a ready service's start-up objects leave the cyclic collector's scans; what it makes later does not."""

from __future__ import annotations

import gc
import logging
import weakref

import pytest

from hermes_stack.service_heap import freeze_startup_heap


class Node:
    def __init__(self):
        self.other = self  # a reference cycle: only the cyclic collector frees it


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of this worker's tests run with every object collectable again


def test_startup_objects_are_frozen_and_later_cycles_still_collected(unfrozen, caplog):
    kept = Node()
    with caplog.at_level(logging.INFO, logger="hermes_stack.service_heap"):
        frozen = freeze_startup_heap("inference")
    assert frozen > 1000 and gc.get_freeze_count() > 1000  # the interpreter and pytest alone hold thousands
    assert any("inference:" in r.getMessage() and str(frozen) in r.getMessage() for r in caplog.records)
    assert not any(o is kept for o in gc.get_objects())  # frozen: no generation holds it, so no scan walks it

    later = Node()
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None  # made after the freeze: a cycle is collected as before


def test_garbage_left_by_start_up_is_collected_before_the_freeze(unfrozen):
    garbage = Node()
    gone = weakref.ref(garbage)
    gc.disable()  # no automatic collection between dropping it and the freeze: the freeze's own collect must free it
    try:
        del garbage
        freeze_startup_heap("environment")
    finally:
        gc.enable()
    assert gone() is None


def test_a_frozen_model_replaced_later_is_still_freed(unfrozen, tmp_path):
    # The inference service freezes before it restores the newest weights, which replace the model it started with
    # (and every push replaces the served one): that relies on a transformers model holding no reference cycle.
    import torch
    from transformers import AutoModelForCausalLM

    from hermes_stack.modelcore.embedded import build

    build(tmp_path / "m", seed=0)
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"), dtype=torch.float32).eval()
    freed = weakref.ref(model)
    weights = weakref.ref(next(model.parameters()))
    freeze_startup_heap("inference")
    del model
    assert freed() is None and weights() is None

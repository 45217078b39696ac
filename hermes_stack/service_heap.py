"""A service's start-up objects leave the cyclic garbage collector's scans once it is ready (gc.freeze).

Each service holds ~390,000 GC-tracked objects after start-up (torch, transformers, atroposlib, the model, the
tokenizer), alive for the whole run. CPython's oldest-generation collection walks all of them: in the CPU stack's
environment and inference processes a full collection took up to ~240 ms on a shared core, eight times in 20 s, and
the rollout chunk it landed in took three times as long as its neighbours (bench/env_loopback.py with a gc.callbacks
probe; issue 22, docs/benchmarks.md). Frozen objects are still freed by reference counting; only a cycle among them
is never collected, which for what lives from start-up to exit costs nothing. A transformers model holds no cycle,
so the built-in server's first model, replaced by restored or pushed weights, is freed (tests/unit/
test_service_heap.py). Objects made later (each step's tensors, a reloaded model) are collected as before.

Called by each service's entry point just before it starts work (inference: before uvicorn serves; environment:
before atroposlib's env_manager; trainer: before the loop), not where tests build the same objects.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("hermes_stack.service_heap")


def freeze_startup_heap(service: str) -> int:
    """Collect what start-up left as garbage, then freeze everything still tracked; the number of objects frozen
    (logged). Called once, when the service is ready to work; a second call freezes what was made since."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%s: %d start-up objects frozen out of the garbage collector's scans", service, frozen)
    return frozen

"""bench/learn.py --lag: within `sampling_from` the engine's policy holds the older weights a lagged rollout samples
from, and its own weights (the same parameter tensors the optimiser holds) come back afterwards, an error included."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
BENCH = Path(__file__).resolve().parents[2] / "bench" / "learn.py"


def learn_module():
    spec = importlib.util.spec_from_file_location("bench_learn_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_policy_samples_with_the_older_weights_and_gets_its_own_back():
    learn = learn_module()
    policy = torch.nn.Linear(3, 2)
    older = copy.deepcopy(policy.state_dict())
    with torch.no_grad():
        policy.weight.add_(1.0)
    own = copy.deepcopy(policy.state_dict())
    engine = SimpleNamespace(policy=policy)
    weight = policy.weight  # the tensor an optimiser would hold
    with learn.sampling_from(engine, older):
        assert torch.equal(policy.weight, older["weight"]) and not torch.equal(policy.weight, own["weight"])
    assert torch.equal(policy.weight, own["weight"]) and policy.weight is weight
    with pytest.raises(RuntimeError), learn.sampling_from(engine, older):
        raise RuntimeError("a sampling failure")
    assert torch.equal(policy.weight, own["weight"])
    with learn.sampling_from(engine, None):  # no lag: the policy as it is
        assert torch.equal(policy.weight, own["weight"])

"""bench/learn.py --lag: within `sampling_from` the engine's policy holds the older weights a lagged rollout samples
from, and its own weights (the same parameter tensors the optimiser holds) come back afterwards, an error included."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from bench_helpers import bench_module

torch = pytest.importorskip("torch")


def learn_module():
    return bench_module("learn")


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

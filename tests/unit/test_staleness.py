"""Rollouts overlap training with a bounded staleness (hermes_stack/trainer/staleness.py): groups carry the policy
step they were generated with, the trainer never trains on one staler than trainer.max_staleness, it reports the
staleness of every batch, and an off-policy batch is corrected with the behaviour log-probs it carried."""

from __future__ import annotations

import io
import math
import threading

import pytest
import torch
from trainer_helpers import Feeder, TinyEngine, read_metrics
from trainer_helpers import grpo_params as grpo

from hermes_stack.modelcore import embedded
from hermes_stack.modelcore.weights_layout import read_served_step, write_served_step
from hermes_stack.trainer import algorithms as alg
from hermes_stack.trainer import engine_torch
from hermes_stack.trainer.atropos_client import AtroposClient
from hermes_stack.trainer.engine import IGNORE, Sequence
from hermes_stack.trainer.engine_torch import TorchEngine
from hermes_stack.trainer.loop import LoopSettings, run_training
from hermes_stack.trainer.metrics import MetricsSink, format_line
from hermes_stack.trainer.staleness import policy_step_of, split_by_staleness
from hermes_stack.trainer.weights_sync import InferenceClient


def tagged(step: int | None, name: str = "") -> dict:
    group = {"tokens": [[1, 2]], "masks": [[-100, 2]], "scores": [1.0], "name": name}
    if step is not None:
        group["generation_params"] = {"policy_step": step}
    return group


# ------------------------------------------------------------------ the pure functions


def test_groups_staler_than_the_bound_are_dropped_and_the_rest_reported():
    groups = [tagged(10, "a"), tagged(9, "b"), tagged(8, "c"), tagged(None, "d"), tagged(12, "e")]
    report = split_by_staleness(groups, policy_version=10, bound=1)
    assert [g["name"] for g in report.kept] == ["a", "b", "d", "e"]
    assert [g["name"] for g in report.dropped] == ["c"]
    assert report.staleness == [0, 1, 0]  # a policy step ahead of the trainer (a resumed trainer) counts as 0
    assert report.untagged == 1
    m = report.metrics()
    assert m["staleness_max"] == 1 and m["stale_groups_dropped"] == 1 and m["untagged_groups"] == 1
    assert m["staleness_mean"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("bound", [0, 1, 2, 5])
def test_kept_groups_never_exceed_the_bound(bound):
    groups = [tagged(step) for step in range(21)]
    report = split_by_staleness(groups, policy_version=20, bound=bound)
    assert max(report.staleness) == bound and all(lag <= bound for lag in report.staleness)
    assert len(report.kept) == bound + 1 and len(report.dropped) == 20 - bound


def test_no_bound_keeps_everything_and_an_untagged_batch_has_no_staleness_figure():
    report = split_by_staleness([tagged(0), tagged(7)], policy_version=9, bound=None)
    assert len(report.kept) == 2 and report.staleness == [9, 2]
    untagged = split_by_staleness([tagged(None)], policy_version=3, bound=1).metrics()
    assert math.isnan(untagged["staleness_max"]) and untagged["untagged_groups"] == 1


@pytest.mark.parametrize("value", ["3", True, None, [3]])
def test_a_malformed_policy_step_is_untagged(value):
    assert policy_step_of({"generation_params": {"policy_step": value}}) is None
    assert policy_step_of({"generation_params": None}) is None


def test_a_whole_float_policy_step_is_a_step():
    """A JSON decoder (or a user's environment) may give 9.0 for 9: it is tagged and bounded like 9."""
    assert policy_step_of({"generation_params": {"policy_step": 3.0}}) == 3
    report = split_by_staleness([tagged(9.0), tagged(8.0)], policy_version=10, bound=1)
    assert report.staleness == [1] and report.untagged == 0 and len(report.dropped) == 1


def test_served_step_marker_round_trip(tmp_path):
    assert read_served_step(tmp_path / "weights") == 0  # nothing pushed yet: the base model
    write_served_step(tmp_path / "weights", 7)
    assert read_served_step(tmp_path / "weights") == 7
    (tmp_path / "weights" / "served-step").write_text("garbage")
    assert read_served_step(tmp_path / "weights") == 0


def test_the_step_line_shows_the_batch_staleness():
    line = format_line(3, 10, {"reward_mean": 0.5, "staleness_max": 1.0, "stale_groups_dropped": 2.0})
    assert "staleness=1" in line and "stale_dropped=2" in line


# ------------------------------------------------------------------ the loop, against the real run-api


class RecordingEngine(TinyEngine):
    def __init__(self):
        super().__init__()
        self.seen: list[list[str]] = []

    def train_step(self, groups):
        self.seen.append([tuple(s.tokens[:1]) for g in groups for s in g[:1]])
        return super().train_step(groups)


def test_the_loop_trains_only_on_groups_within_the_bound_and_logs_their_staleness(api, inference, tmp_path,
                                                                                   monkeypatch):
    """Two steps of 2 groups each; the trainer starts at policy version 0 and 1. A group tagged with policy step -5
    (staleness 5 and 6) is never trained on, whatever batch it lands in; every step's record keeps <= the bound."""
    api.reset()
    settings = LoopSettings(num_steps=2, batch_size_sequences=4 * 2, max_token_len=64,
                            checkpoint_dir=tmp_path / "checkpoints", save_interval=10, data_dir=tmp_path,
                            batch_timeout_s=20, inference_wait_s=5, max_staleness=1)
    stale_prompt = [15, 15, 15]

    def feed():
        feeder = Feeder(api.url, 4)
        feeder.register()
        for i, step in enumerate([0, -5, 0, 0, -5, 1, 1]):
            prompt = stale_prompt if step < 0 else [3 + i, 4, 5]
            group = feeder.group(prompt, [[3, 4], [5, 6], [7, 8], [9, 10]], [1.0, 0.0, 1.0, 0.0])
            group["generation_params"] = {"policy_step": step}
            feeder.send(group)

    from hermes_stack.trainer import loop

    judged: list[tuple[int, int]] = []  # (the policy version a batch was judged against, groups kept)

    def recording(batch, version, bound):
        report = split_by_staleness(batch, version, bound)
        judged.append((version, len(report.kept)))
        return report

    monkeypatch.setattr(loop, "split_by_staleness", recording)
    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    out = io.StringIO()
    sink = MetricsSink(tmp_path / "metrics.jsonl", 2, stream=out)
    atropos = AtroposClient(api.url)
    engine = RecordingEngine()
    try:
        last = run_training(engine, atropos, InferenceClient(inference.url, inference.key), settings, sink)
    finally:
        atropos.close()
    thread.join(5)
    assert last == 2
    trained = [first for step in engine.seen for first in step]
    assert trained and (stale_prompt[0],) not in trained
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["staleness_max"] is not None and r["staleness_max"] <= 1 for r in records)
    # Each step's groups are judged against the policy it trains (version k-1 for step k): a loop that measured the
    # lag against one version too few would let a group 2 updates behind through. Which groups land in which batch
    # depends on timing, so the versions the loop asked about are what is checked.
    assert [version for version, kept in judged if kept] == [0, 1]
    assert sum(r["stale_groups_dropped"] for r in records) >= 1
    assert "staleness=" in out.getvalue()
    assert read_served_step(tmp_path / "weights") == 2  # written after each push took: the environment reads it


# ------------------------------------------------------------------ off-policy correction in the torch engine


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("staleness") / "embedded"
    embedded.build(directory, seed=0, steps=30)
    return directory


@pytest.mark.parametrize("decoupled", [True, False], ids=["decoupled", "coupled"])
def test_a_stale_batch_is_corrected_with_the_behaviour_logprobs_it_carried(model_dir, monkeypatch, decoupled):
    """Rollouts sampled from the policy, then the policy trained a step (the overlap: the batch is now one update
    old). Training on that batch, the correction uses the behaviour log-probs the rollouts carried. Coupled (plain
    PPO): they are the ratio's denominator, so the first pass's ratio differs from 1 by exactly exp(current -
    behaviour). Decoupled (the default): the ratio is to the current policy (1 in the first pass) and each token's
    weight is exactly min(exp(current - behaviour), cap)."""
    engine = TorchEngine(model_dir, grpo(), 5e-3, temperature=0.8, seed=0, epochs=1, decoupled=decoupled)
    prompts = ["12+3=", "40+5=", "7+2=", "31+6="]
    outputs = engine.generate(prompts, n=4, temperature=0.8, max_new_tokens=8)

    def group_of(prompt, completions):
        ids = engine.tokenizer.encode(prompt)
        return [Sequence(ids + c.tokens, [IGNORE] * len(ids) + c.tokens, float(i % 2), [0.0] * len(ids) + c.logprobs)
                for i, c in enumerate(completions)]

    batch = [group_of(p, c) for p, c in zip(prompts, outputs)]
    engine.train_step(batch)  # the policy moves on: `batch` is one update stale now
    current = engine.sequence_logprobs([s.tokens for g in batch for s in g])
    behaviour = [s.logprobs[1:] for g in batch for s in g]
    gap = max(abs(a - b) for cur, beh, s in zip(current, behaviour, [s for g in batch for s in g])
              for a, b, m in zip(cur, beh, s.mask[1:]) if m != IGNORE)
    assert gap > 1e-3  # the stale batch really is off-policy

    seen = {}
    original = alg.policy_loss

    def spy(logprobs, old_logprobs, *args, weights=None, **kwargs):
        seen.setdefault("ratio", torch.exp(logprobs - old_logprobs).detach())
        seen.setdefault("old", old_logprobs.detach().clone())
        seen.setdefault("weights", None if weights is None else weights.detach().clone())
        return original(logprobs, old_logprobs, *args, weights=weights, **kwargs)

    monkeypatch.setattr(engine_torch.alg, "policy_loss", spy)
    engine.train_step(batch)
    flat = [s for g in batch for s in g]
    for row, s in enumerate(flat):
        trained = [i for i, m in enumerate(s.mask[1:]) if m != IGNORE]
        old = seen["old"][row, trained].tolist()
        lag = [math.exp(current[row][i] - s.logprobs[1:][i]) for i in trained]
        if decoupled:
            assert old == pytest.approx([current[row][i] for i in trained], abs=1e-5)
            assert seen["ratio"][row, trained].tolist() == pytest.approx([1.0] * len(trained), abs=1e-5)
            capped = [min(w, alg.BEHAVIOUR_WEIGHT_CAP) for w in lag]
            assert seen["weights"][row, trained].tolist() == pytest.approx(capped, rel=1e-4)
        else:
            assert old == pytest.approx([s.logprobs[1:][i] for i in trained], abs=1e-6)
            assert seen["ratio"][row, trained].tolist() == pytest.approx(lag, rel=1e-4)
            assert seen["weights"] is None

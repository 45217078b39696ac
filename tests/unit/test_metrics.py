"""Per-step metrics: the stdout line, the JSONL record the controller's status reads."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from trainer_helpers import read_metrics

from hermes_stack.trainer.metrics import MetricsSink, format_line, record, reward_stats


def test_reward_stats_over_groups() -> None:
    stats = reward_stats([[1.0, 0.0], [0.5, 0.5]])
    assert stats["reward_mean"] == pytest.approx(0.5)
    assert stats["reward_std"] == pytest.approx(math.sqrt((0.25 + 0.25 + 0 + 0) / 4))
    assert stats["reward_min"] == 0.0 and stats["reward_max"] == 1.0
    assert stats["groups_all_equal"] == pytest.approx(0.5)


def test_line_names_step_and_known_terms_in_order() -> None:
    line = format_line(12, 200, {"kl": 0.004, "reward_mean": 0.61, "loss": 0.0123, "mystery": 3.0,
                                 "tokens_per_s": 1234.4}, checkpoint="step-12")
    assert line == "step 12/200 reward_mean=0.610 loss=0.0123 kl=0.0040 tok/s=1234 checkpoint=step-12"


def test_record_has_the_status_keys_even_when_the_engine_omits_them() -> None:
    rec = record(3, {"policy_loss": 0.5, "note": "text", "bad": float("nan")}, None, now=100.0)
    assert rec == {"step": 3, "time": 100.0, "checkpoint": None, "reward_mean": None, "loss": None, "kl": None,
                   "policy_loss": 0.5, "bad": None}


def test_sink_writes_jsonl_and_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = io.StringIO()
    sink = MetricsSink(tmp_path / "m" / "metrics.jsonl", 10, stream=out)
    sink.log(1, {"reward_mean": 0.25, "loss": 1.5, "kl": 0.0})
    sink.log(2, {"reward_mean": 0.5, "loss": 1.0, "kl": 0.01}, checkpoint="step-2")
    sink.close()
    records = read_metrics(tmp_path / "m" / "metrics.jsonl")
    assert [(r["step"], r["reward_mean"], r["checkpoint"]) for r in records] == [(1, 0.25, None), (2, 0.5, "step-2")]
    assert out.getvalue().splitlines()[1].startswith("step 2/10 reward_mean=0.500 loss=1.0000 kl=0.0100")


def test_torn_last_line_after_a_crash_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "rew')
    assert read_metrics(path) == [{"step": 1}]


def test_wandb_offline_when_enabled_without_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = io.StringIO()
    sink = MetricsSink(tmp_path / "metrics.jsonl", 2, wandb_enabled=True, wandb_project="t", stream=out)
    sink.log(1, {"reward_mean": 0.1, "loss": 0.2, "kl": 0.0})
    sink.close()
    assert "wandb: logging offline" in out.getvalue()
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_rollout_accuracy_counts_the_environments_verdicts_and_is_none_without_them():
    from hermes_stack.tasks.reward import CORRECT_OVERRIDE
    from hermes_stack.trainer.metrics import format_line, rollout_accuracy

    batch = [{"scores": [1.1, 0.1], "overrides": [{CORRECT_OVERRIDE: True}, {CORRECT_OVERRIDE: False}]},
             {"scores": [1.1, 1.0], "overrides": [{CORRECT_OVERRIDE: True, "other": 1}, {CORRECT_OVERRIDE: True}]}]
    assert rollout_accuracy(batch) == 0.75
    assert rollout_accuracy([{"scores": [1.0, -1.0]}]) is None  # a user's environment: scores only, no verdict
    assert rollout_accuracy([{"scores": [1.0], "overrides": [{"set_advantage_to_zero": True}]}]) is None
    assert "reward_mean=0.500 acc=0.75 loss" in format_line(3, 9, {"reward_mean": 0.5, "rollout_accuracy": 0.75,
                                                                   "loss": 0.1})


def test_wandb_stays_off_when_disabled_even_with_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`"enabled": false` (the shipped value) is off: a WANDB_API_KEY in the key file turned the trainer's logging
    on while the environment's stayed off."""
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    out = io.StringIO()
    sink = MetricsSink(tmp_path / "metrics.jsonl", 2, wandb_enabled=False, wandb_project="t", stream=out)
    sink.log(1, {"reward_mean": 0.1, "loss": 0.2, "kl": 0.0})
    sink.close()
    assert sink._wandb is None and "wandb" not in out.getvalue()
    assert not (tmp_path / "wandb").exists()

"""Atomic checkpoints: a save interrupted at any point is never what resume picks up."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from hermes_stack.errors import InputError, StackError
from hermes_stack.trainer import checkpoint as ckpt


def _state(value: float) -> dict:
    return {"engine": {"policy": {"w": torch.full((3,), value)}, "optimizer": {"state": {}, "lr": 0.1}}}


def test_relative_checkpoint_dir_lives_on_the_data_volume(tmp_path: Path) -> None:
    assert ckpt.resolve_checkpoint_dir("./temp/", tmp_path) == tmp_path / "checkpoints" / "temp"
    assert ckpt.resolve_checkpoint_dir(".", tmp_path) == tmp_path / "checkpoints"
    assert ckpt.resolve_checkpoint_dir(str(tmp_path / "ck"), tmp_path) == tmp_path / "ck"


@pytest.mark.parametrize("configured", ["/elsewhere/ck", "../../../etc", "./a/../../b"])
def test_checkpoint_dir_outside_the_data_volume_is_refused(tmp_path: Path, configured: str) -> None:
    with pytest.raises(InputError, match="tinker.checkpoint_dir"):
        ckpt.resolve_checkpoint_dir(configured, tmp_path)


def test_save_then_load_round_trips_state_and_step(tmp_path: Path) -> None:
    path = ckpt.save_checkpoint(tmp_path, 5, _state(2.5))
    assert path == tmp_path / "step-5"
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest == ckpt.Checkpoint(5, path)
    state = ckpt.load_checkpoint(latest)
    assert state["step"] == 5
    assert torch.equal(state["engine"]["policy"]["w"], torch.full((3,), 2.5))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(ckpt.TMP_PREFIX)]


def test_latest_is_numeric_not_lexicographic_and_keep_prunes(tmp_path: Path) -> None:
    for step in (2, 9, 10, 11):
        ckpt.save_checkpoint(tmp_path, step, _state(step), keep=3)
    assert [c.step for c in ckpt.list_checkpoints(tmp_path)] == [9, 10, 11]
    assert ckpt.latest_checkpoint(tmp_path).step == 11


def test_crash_before_rename_leaves_only_a_temp_dir_that_resume_ignores(tmp_path: Path) -> None:
    ckpt.save_checkpoint(tmp_path, 4, _state(4.0))
    # What a kill -9 between torch.save and the manifest leaves behind: a temp dir with a state file.
    half = tmp_path / f"{ckpt.TMP_PREFIX}step-6-999"
    half.mkdir()
    (half / ckpt.STATE_FILE).write_bytes(b"\x80\x02half")
    assert ckpt.latest_checkpoint(tmp_path).step == 4
    removed = ckpt.clean_incomplete(tmp_path)
    assert removed == [half]
    assert not half.exists()


def test_step_dir_without_manifest_is_not_complete(tmp_path: Path) -> None:
    ckpt.save_checkpoint(tmp_path, 4, _state(4.0))
    broken = tmp_path / "step-8"
    broken.mkdir()
    torch.save({"step": 8}, broken / ckpt.STATE_FILE)
    assert ckpt.latest_checkpoint(tmp_path).step == 4
    assert broken in ckpt.clean_incomplete(tmp_path)


def test_truncated_or_corrupted_state_file_is_rejected(tmp_path: Path) -> None:
    ckpt.save_checkpoint(tmp_path, 3, _state(3.0))
    path = ckpt.save_checkpoint(tmp_path, 6, _state(6.0))
    data = (path / ckpt.STATE_FILE).read_bytes()
    # Same size, one flipped byte: only the hash can tell.
    (path / ckpt.STATE_FILE).write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    assert ckpt.latest_checkpoint(tmp_path).step == 3
    (path / ckpt.STATE_FILE).write_bytes(data[: len(data) // 2])
    assert not ckpt.is_complete(path, verify_hashes=False)


def test_manifest_marked_incomplete_or_garbage_is_rejected(tmp_path: Path) -> None:
    path = ckpt.save_checkpoint(tmp_path, 2, _state(2.0))
    manifest = json.loads((path / ckpt.MANIFEST).read_text())
    (path / ckpt.MANIFEST).write_text(json.dumps({**manifest, "complete": False}))
    assert ckpt.latest_checkpoint(tmp_path) is None
    (path / ckpt.MANIFEST).write_text("{not json")
    assert ckpt.latest_checkpoint(tmp_path) is None


def test_resaving_an_existing_step_replaces_it(tmp_path: Path) -> None:
    ckpt.save_checkpoint(tmp_path, 4, _state(1.0))
    ckpt.save_checkpoint(tmp_path, 4, _state(7.0))
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path))
    assert torch.equal(state["engine"]["policy"]["w"], torch.full((3,), 7.0))
    assert [p.name for p in tmp_path.iterdir()] == ["step-4"]


def test_step_mismatch_between_dir_and_state_is_an_error(tmp_path: Path) -> None:
    path = ckpt.save_checkpoint(tmp_path, 4, _state(1.0))
    os.rename(path, tmp_path / "step-5")
    with pytest.raises(StackError, match="step 4"):
        ckpt.load_checkpoint(ckpt.Checkpoint(5, tmp_path / "step-5"))

"""Atomic training checkpoints: `<root>/step-<N>/` holding `state.pt` and, written last, `manifest.json`.

A checkpoint is written into a hidden temp dir, fsynced, given its manifest (sizes + sha256 of every file), fsynced
again and only then renamed to `step-<N>`. Resume trusts only a `step-<N>` dir whose manifest exists and matches its
files, so a `kill -9` at any moment leaves either a complete checkpoint or nothing resume would pick up.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_stack.errors import InputError, Problem, StackError

MANIFEST = "manifest.json"
STATE_FILE = "state.pt"
TMP_PREFIX = ".tmp-"
_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path


def resolve_checkpoint_dir(configured: str, data_dir: Path) -> Path:
    """`tinker.checkpoint_dir` as a path on the data volume: relative paths live under `<data_dir>/checkpoints`."""
    path = Path(configured)
    # "./temp/" (the seed's value) becomes <data>/checkpoints/temp: on the volume, never in the image's cwd.
    resolved = path if path.is_absolute() else data_dir.joinpath("checkpoints", *[p for p in path.parts if p != "."])
    # validate refuses these first (rules.checkpoint_dir_on_volume); this keeps a hand-started trainer on the volume.
    if ".." in path.parts or not resolved.is_relative_to(data_dir):
        raise InputError(Problem("settings", "tinker.checkpoint_dir", repr(configured),
                                 f"a folder inside the data volume {data_dir}",
                                 "use a relative path such as ./temp/ (it lands in <data>/checkpoints/)"))
    return resolved


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _write_manifest(directory: Path, step: int, meta: dict[str, Any]) -> None:
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    manifest = {"step": step, "complete": True, "created": time.time(), "files": files, "meta": meta}
    tmp = directory / (MANIFEST + ".part")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    _fsync_path(tmp)
    os.replace(tmp, directory / MANIFEST)


def is_complete(directory: Path, *, verify_hashes: bool = True) -> bool:
    """True when the manifest exists, parses, and every file it lists is present with its size (and hash)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        files = manifest["files"]
        if not manifest.get("complete") or STATE_FILE not in files:
            return False
        for name, info in files.items():
            path = directory / name
            if path.stat().st_size != info["bytes"]:
                return False
            if verify_hashes and _sha256(path) != info["sha256"]:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def list_checkpoints(root: Path) -> list[Checkpoint]:
    """Every `step-<N>` dir under root, oldest first (complete or not)."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir():
            found.append(Checkpoint(int(match.group(1)), child))
    return sorted(found, key=lambda c: c.step)


def clean_incomplete(root: Path) -> list[Path]:
    """Remove temp dirs of interrupted saves and step dirs without a valid manifest. Returns what was removed."""
    removed = []
    if not root.is_dir():
        return removed
    for child in root.iterdir():
        if child.is_dir() and child.name.startswith(TMP_PREFIX):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    for ckpt in list_checkpoints(root):
        if not is_complete(ckpt.path, verify_hashes=False):
            shutil.rmtree(ckpt.path, ignore_errors=True)
            removed.append(ckpt.path)
    return removed


def read_meta(checkpoint: Checkpoint) -> dict[str, Any]:
    """The `meta` its manifest carries (what the run was trained with); {} when unreadable or absent."""
    try:
        meta = json.loads((checkpoint.path / MANIFEST).read_text()).get("meta")
    except (OSError, ValueError, AttributeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def latest_checkpoint(root: Path) -> Checkpoint | None:
    """The newest checkpoint that is complete and intact (hashes checked), or None."""
    for ckpt in reversed(list_checkpoints(root)):
        if is_complete(ckpt.path):
            return ckpt
    return None


def save_checkpoint(root: Path, step: int, state: dict[str, Any], *, keep: int = 3,
                    meta: dict[str, Any] | None = None) -> Path:
    """Write `state` (policy, critic, optimizer, ...) as checkpoint `step` atomically; keep the newest `keep`."""
    import torch

    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{TMP_PREFIX}step-{step}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    state_path = tmp / STATE_FILE
    with state_path.open("wb") as fh:
        torch.save({**state, "step": step}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    _write_manifest(tmp, step, meta or {})
    _fsync_path(tmp)
    final = root / f"step-{step}"
    if final.exists():
        # Re-saving a step (resumed from an older checkpoint): move the old one out of the way first. The
        # rename keeps the window without a valid step-<N> as short as two renames.
        trash = root / f"{TMP_PREFIX}old-step-{step}-{os.getpid()}"
        os.rename(final, trash)
        os.rename(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(tmp, final)
    _fsync_path(root)
    prune(root, keep)
    return final


def prune(root: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints."""
    complete = [c for c in list_checkpoints(root) if is_complete(c.path, verify_hashes=False)]
    doomed = complete[:-keep] if keep > 0 else []
    for ckpt in doomed:
        shutil.rmtree(ckpt.path, ignore_errors=True)
    return [c.path for c in doomed]


def load_checkpoint(ckpt: Checkpoint) -> dict[str, Any]:
    """The saved state dict (with its "step"). Loads tensors only (no arbitrary pickled objects)."""
    import torch

    try:
        state = torch.load(ckpt.path / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise StackError(f"checkpoint {ckpt.path}: cannot load {STATE_FILE}: {exc}. Hint: delete that directory "
                         "to resume from the previous checkpoint") from exc
    if state.get("step") != ckpt.step:
        raise StackError(f"checkpoint {ckpt.path}: state says step {state.get('step')}, directory says {ckpt.step}")
    return state

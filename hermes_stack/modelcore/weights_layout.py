"""The layout of `<data>/weights`: the trainer writes `step-<N>` folders, the inference service loads the newest.

Writer and reader share it through this module. A step's folder appears by rename of a `.tmp-` folder, so a reader
only ever sees finished exports; temp folders a killed export left behind are removed by `prune_weight_dirs`.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

_STEP_DIR = re.compile(r"^step-(\d+)$")
TMP_PREFIX = ".tmp-"


def export_step_weights(engine: Any, weights_root: Path, step: int) -> Path:
    """engine.export_weights into a temp dir, then rename to `step-<N>`: readers only ever see finished dirs."""
    weights_root.mkdir(parents=True, exist_ok=True)
    tmp = weights_root / f"{TMP_PREFIX}step-{step}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    engine.export_weights(tmp)
    final = weights_root / f"step-{step}"
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    return final


def newest_step_dir(weights_root: Path) -> Path | None:
    """The `step-<N>` dir with the largest N (finished exports only: they appear by rename), or None."""
    if not weights_root.is_dir():
        return None
    steps = [(int(m.group(1)), child) for child in weights_root.iterdir()
             if (m := _STEP_DIR.match(child.name)) and child.is_dir()]
    return max(steps)[1] if steps else None


def prune_weight_dirs(weights_root: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` step dirs and any leftover temp dirs of a killed export."""
    if not weights_root.is_dir():
        return []
    removed = []
    steps = []
    for child in weights_root.iterdir():
        if child.name.startswith(TMP_PREFIX) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
        elif (m := _STEP_DIR.match(child.name)) and child.is_dir():
            steps.append((int(m.group(1)), child))
    steps.sort()
    for _, path in steps[:-keep] if keep > 0 else []:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


SERVED_STEP = "served-step"  # beside the step dirs: the step the inference service serves (trainer/staleness.py)


def write_served_step(weights_root: Path, step: int) -> Path:
    """Written by the trainer after a push of `step` took: from then on the inference service serves at least it.
    Atomic (rename), so a reader sees the old or the new step, never a torn file."""
    weights_root.mkdir(parents=True, exist_ok=True)
    path = weights_root / SERVED_STEP
    tmp = weights_root / f".{SERVED_STEP}.{os.getpid()}"
    tmp.write_text(str(int(step)))
    os.replace(tmp, path)
    return path


# A rollout group's `generation_params` key for the weights step it was sampled with: environments write it, the
# trainer bounds a group's staleness by it (trainer/staleness.py).
POLICY_STEP_KEY = "policy_step"


def read_served_step(weights_root: Path) -> int:
    """The step the inference service serves at least (0, the base model, when no push has taken yet)."""
    try:
        return int((weights_root / SERVED_STEP).read_text().strip())
    except (OSError, ValueError):
        return 0

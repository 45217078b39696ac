"""The layout of `<data>/weights`: the trainer writes `step-<N>` folders, the inference service loads the newest.

Writer and reader share it through this module. A step's folder appears by rename of a `.tmp-` folder, so a reader
only ever sees finished exports; temp folders a killed export left behind are removed by `prune_weight_dirs`.
"""

from __future__ import annotations

import json
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


# The modules a served LoRA adapter may train: the inference service launches SGLang with exactly these
# (--lora-target-modules), and SGLang's memory pool refuses an adapter with any other (0.5.18 lora/mem_pool.py
# `can_support`). peft's "all-linear" on the Llama/Qwen/Mistral layout the memory plan supports, and Tinker's adapter
# with train_unembed=False. Not SGLang's "all": it adds embed_tokens and lm_head, with vocabulary-sized LoRA buffers
# in every adapter slot out of the static memory the plan gives the KV cache.
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def adapter_problem(directory: Path) -> str | None:
    """Why SGLang would refuse the peft adapter in `directory`, or None: adapter_config.json and
    adapter_model.safetensors present (what /load_lora_adapter reads), and its target modules (the last part of each
    name) among LORA_TARGET_MODULES; peft's "all-linear" shorthand passes, as SGLang lets it."""
    files = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    if "adapter_config.json" not in files or "adapter_model.safetensors" not in files:
        return (f"found files {files[:8]}{' …' if len(files) > 8 else ''}, expected a peft adapter "
                f"(adapter_config.json and adapter_model.safetensors)")
    try:
        modules = json.loads((directory / "adapter_config.json").read_text()).get("target_modules")
    except (OSError, ValueError, AttributeError) as exc:
        return f"adapter_config.json is not a JSON object ({type(exc).__name__})"
    if isinstance(modules, str) or modules is None:
        return None if modules in (None, "all-linear") else f"target_modules {modules!r}, expected a list of modules"
    extra = sorted({str(m).rsplit(".", 1)[-1] for m in modules} - set(LORA_TARGET_MODULES))
    return f"target modules {extra} beyond the served ones {list(LORA_TARGET_MODULES)}" if extra else None


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

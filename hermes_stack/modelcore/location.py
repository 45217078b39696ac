"""Where a service finds the model `inference.model_path` names, and whether the policy trains a LoRA adapter: one
rule for the trainer, the inference service and the environment (they must agree: the trainer pushes adapters only
when the inference service was started with LoRA serving on)."""

from __future__ import annotations

from pathlib import Path

from hermes_stack.modelcore import catalog
from hermes_stack.modelcore.embedded import is_embedded_model

EMBEDDED_MODEL = "embedded"  # inference.model_path sentinel: the tiny model at $HERMES_EMBEDDED_MODEL


def model_location(model_path: str, embedded_model: Path | str, models_dir: Path | str) -> str:
    """The `embedded` sentinel -> the tiny model's directory; a catalog name -> its directory in the image
    (modelcore/catalog.py); anything else (a local directory, a hub id) as written."""
    if model_path == EMBEDDED_MODEL:
        return str(embedded_model)
    return catalog.local_dir(model_path, models_dir)


def trains_lora(engine: str, model_dir: Path | str, lora_rank: int | None) -> bool:
    """Tinker always trains a LoRA adapter (and `auto` may become Tinker: LoRA); the torch engine does for every
    model but the embedded tiny one, which is fully fine-tuned."""
    if engine in ("tinker", "auto"):
        return True
    return bool(lora_rank) and not is_embedded_model(model_dir)

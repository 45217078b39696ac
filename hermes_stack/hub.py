"""THE place where a model path is told apart from a Hugging Face hub id, and where a hub id becomes a folder.

Rules (docs/architecture.md, "Models"):
- A hub id is `org/name` (letters, digits, `-_.`), not absolute, not `./…`/`../…`/`~…`, and no such folder exists
  under the config's base directory. Everything else is a local path.
- The gpu profile with a hub id is ONLINE: HF_HUB_OFFLINE and friends are cleared for that process (and the SGLang
  child). Everywhere else (the embedded profile, local paths) the Hugging Face libraries are kept offline, because
  a hub lookup without a network hangs (~49 s) before failing.
- Inference, trainer and environment share one cache: the named volume `hermes-models`, mounted at
  HF_CACHE = /home/hermes/.cache/huggingface in all three (created owned by uid 10001 in the images, so the volume
  is too). The inference service downloads a hub id once, with progress, before it starts serving; the trainer and
  the environment start after it is healthy and find the files in the cache (`resolve_model` looks there first).
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from pathlib import Path

OFFLINE_FLAGS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
HF_CACHE = "/home/hermes/.cache/huggingface"  # the hermes-models volume (compose.base.yml)
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_hub_id(model_path: str, base_dir: Path | None = None) -> bool:
    """`Qwen/Qwen3-8B` yes; `/models/x`, `./x`, `x`, `embedded`, or an existing folder `models/x` no."""
    if not _HUB_ID.match(model_path) or model_path.startswith(("./", "../", "~")):
        return False
    local = [Path(model_path)] + ([base_dir / model_path] if base_dir is not None else [])
    return not any(p.is_dir() for p in local)


def needs_hub(profile: str, *names: str | None) -> bool:
    """The gpu profile with at least one hub id among the model, tokenizer or dataset names."""
    return profile == "gpu" and any(n and is_hub_id(n) for n in names)


def set_hub_access(online: bool, environ: MutableMapping[str, str] | None = None) -> None:
    """Online: remove the offline flags (an image or a parent may have set them). Offline: set all three."""
    environ = os.environ if environ is None else environ
    for name in OFFLINE_FLAGS:
        if online:
            environ.pop(name, None)
        else:
            environ[name] = "1"


def cached_model(repo_id: str) -> Path | None:
    """The folder of `repo_id` in the shared cache, without any network call; None when it is not there."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError):
        return None


def resolve_model(repo_id: str, *, who: str, download: bool = True, log=print) -> Path:
    """The local folder of hub id `repo_id`: from the shared cache, else downloaded into it (progress bars shown)
    when `download`. Raises LookupError with a one-line reason otherwise."""
    found = cached_model(repo_id)
    if found is not None and (found / "config.json").is_file():
        log(f"{who}: model {repo_id} from the shared cache ({found})")
        return found
    if not download:
        raise LookupError(f"{repo_id} is not in the shared cache {cache_dir()} and this service does not download "
                          "(the inference service fetches hub ids once; is it healthy?)")
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import enable_progress_bars

    enable_progress_bars()  # transformers' loaders turn them off; a download of many GB must show its progress
    endpoint = os.environ.get("HF_ENDPOINT") or "the Hugging Face hub"
    log(f"{who}: downloading {repo_id} from {endpoint} into {cache_dir()} (once; shared with the other services)")
    try:
        path = Path(snapshot_download(repo_id))
    except Exception as exc:
        raise LookupError(f"downloading {repo_id} failed: {type(exc).__name__}: {exc}") from exc
    log(f"{who}: model {repo_id} downloaded to {path}")
    return path


def cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)

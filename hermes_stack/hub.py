"""THE place where a model path is told apart from a Hugging Face hub id, and where a hub id becomes a folder.

Rules (docs/architecture.md, "Models"):
- A hub id is `org/name` as huggingface_hub's validate_repo_id takes it (letters, digits, `-_.`; no `--` or `..`;
  neither part starting or ending with `-` or `.`; at most 96 characters each; not ending in `.git`), and no such
  folder exists under the config's base directory. Everything else is a local path.
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
# huggingface_hub 2.4's REPO_ID_REGEX (utils/_validators.py) for owner/name, written out: validate must not import
# huggingface_hub (~60 ms) to judge a name. A part starts and ends with a letter, digit or _ (its \b's), 1-96
# characters. Matched with fullmatch: `$` would let a trailing newline through, which the hub library refuses.
HUB_ID_LIMIT = 96
_PART = rf"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{{0,{HUB_ID_LIMIT - 2}}}[A-Za-z0-9_])?"
_HUB_ID = re.compile(rf"{_PART}/{_PART}")
HUB_ID_RULE = (f"owner/name of letters, digits, -, _ and ., without -- or .., neither part starting or ending with "
               f"- or ., at most {HUB_ID_LIMIT} characters each")


def _hub_shaped(name: str) -> bool:
    """validate_repo_id's checks, in its order: the pattern, then no -- or .., then no .git ending."""
    return bool(_HUB_ID.fullmatch(name)) and "--" not in name and ".." not in name and not name.endswith(".git")


def is_hub_id(model_path: str, base_dir: Path | None = None) -> bool:
    """`Qwen/Qwen3-8B` yes; `/models/x`, `./x`, `x`, `embedded`, `Qwen/Qwen3-8B.` (the hub library refuses it),
    or an existing folder `models/x` no."""
    if not _hub_shaped(model_path):
        return False
    local = [Path(model_path)] + ([base_dir / model_path] if base_dir is not None else [])
    return not any(p.is_dir() for p in local)


def hub_id_flaw(name: str) -> str | None:
    """Why `name`, written as owner/name, is no hub id (the first reason, as validate_repo_id would stop at it);
    None when it is one."""
    if _hub_shaped(name):
        return None
    controls = sorted({c for c in name if ord(c) < 32 or ord(c) == 127})
    if controls:
        return "a control character " + ", ".join(f"U+{ord(c):04X}" for c in controls)
    odd = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "-_./"))})
    if odd:
        return "the character" + ("s " if len(odd) > 1 else " ") + " ".join(repr(c) for c in odd)
    parts = name.split("/")
    if len(parts) != 2:
        return f"{len(parts) - 1} slashes"
    for what, part in zip(("owner", "name"), parts):
        if not part:
            return f"an empty {what}"
        if len(part) > HUB_ID_LIMIT:
            return f"a{'n' if what == 'owner' else ''} {what} of {len(part)} characters"
        if part[0] in "-.":
            return f"{part[0]!r} at the start of the {what}"
        if part[-1] in "-.":
            return f"{part[-1]!r} at the end of the {what}"
    double = "--" if "--" in name else ".."
    return f"{double!r} in it" if double in name else "'.git' at the end"


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

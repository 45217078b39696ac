"""Write a config_<algo>.toml + settings_<algo>.json pair for tests (the seed files with small values)."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _set(text: str, section: str, key: str, value: str) -> str:
    pattern = re.compile(rf"(\[{re.escape(section)}\][^\[]*?^{re.escape(key)}\s*=\s*)([^#\n]*?)(\s*(#.*)?)$", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        return pattern.sub(lambda m: m.group(1) + value + m.group(3), text, count=1)
    return re.sub(rf"(\[{re.escape(section)}\]\n)", lambda m: m.group(1) + f"{key} = {value}\n", text, count=1)


def write_stack(directory: Path, algo: str = "grpo", *, dataset: str | None = None, model_path: str | None = None,
                group_size: int = 4, batch_size: int = 2, max_token_length: int = 160, num_steps: int = 2,
                judge: bool | None = False, judge_style: str | None = "auto", atropos_port: int = 8000,
                inference_port: int = 8001, max_samples: int = 1000, checkpoint_interval: int | None = None,
                checkpoint_dir: str | None = None) -> Path:
    """The one config writer of the tests: the repository's pair with small values; None keeps the repository's."""
    directory.mkdir(parents=True, exist_ok=True)
    toml = (REPO / "configs" / f"config_{algo}.toml").read_text()
    for section, key, value in [
        ("environment", "dataset", None if dataset is None else json.dumps(dataset)),
        ("environment", "max_samples", str(max_samples)),
        ("rollout", "group_size", str(group_size)), ("rollout", "batch_size", str(batch_size)),
        ("rollout", "max_token_length", str(max_token_length)), ("atropos", "api_port", str(atropos_port)),
        ("reward", "judge", None if judge is None else "true" if judge else "false"),
        ("reward", "judge_style", None if judge_style is None else json.dumps(judge_style)),
    ]:
        if value is not None:
            toml = _set(toml, section, key, value)
    (directory / f"config_{algo}.toml").write_text(toml)
    settings = json.loads((REPO / "configs" / f"settings_{algo}.json").read_text())
    if model_path is not None:
        settings["inference"]["model_path"] = model_path
    settings["inference"].update(port=inference_port, base_url=f"http://localhost:{inference_port}/v1")
    settings["atropos"]["rollout_server_url"] = f"http://localhost:{atropos_port}"
    settings["algorithm"]["group_size"] = group_size
    settings.setdefault("trainer", {})["num_steps"] = num_steps
    if checkpoint_interval is not None:
        settings["tinker"]["save_checkpoint_interval"] = checkpoint_interval
    if checkpoint_dir is not None:
        settings["tinker"]["checkpoint_dir"] = checkpoint_dir
    (directory / f"settings_{algo}.json").write_text(json.dumps(settings, indent=2))
    return directory

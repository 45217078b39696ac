"""Write a config_<algo>.toml + settings_<algo>.json pair for environment tests (seed files with small values)."""

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


def write_stack(directory: Path, algo: str = "grpo", *, dataset: str, model_path: str, group_size: int = 4,
                batch_size: int = 2, max_token_length: int = 160, num_steps: int = 2, judge: bool = False,
                judge_style: str = "auto", atropos_port: int = 8000, inference_port: int = 8001,
                max_samples: int = 1000) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    toml = (REPO / "configs" / f"config_{algo}.toml").read_text()
    for section, key, value in [
        ("environment", "dataset", json.dumps(dataset)), ("environment", "max_samples", str(max_samples)),
        ("rollout", "group_size", str(group_size)), ("rollout", "batch_size", str(batch_size)),
        ("rollout", "max_token_length", str(max_token_length)), ("atropos", "api_port", str(atropos_port)),
        ("reward", "judge", "true" if judge else "false"), ("reward", "judge_style", json.dumps(judge_style)),
    ]:
        toml = _set(toml, section, key, value)
    (directory / f"config_{algo}.toml").write_text(toml)
    settings = json.loads((REPO / "configs" / f"settings_{algo}.json").read_text())
    settings["inference"].update(model_path=model_path, port=inference_port,
                                 base_url=f"http://localhost:{inference_port}/v1")
    settings["atropos"]["rollout_server_url"] = f"http://localhost:{atropos_port}"
    settings["algorithm"]["group_size"] = group_size
    settings.setdefault("trainer", {})["num_steps"] = num_steps
    (directory / f"settings_{algo}.json").write_text(json.dumps(settings, indent=2))
    return directory

"""The environments an agent can pick (`rl_list_environments`, `rl_select_environment`).

Every environment is served by one Atropos environment class, hermes_stack.environment.env.HermesMathEnv, over the
dataset that `[environment] dataset` in config_<algo>.toml names. Selecting one writes that value (through the
config edit path, validated first). `list_environments` is the one place the list is made, so another source of
environments (a user folder) plugs in here.
"""

from __future__ import annotations

from pathlib import Path

ENV_CLASS = "HermesMathEnv"
ENV_FILE = "hermes_stack/environment/env.py"

BUILT_IN: tuple[dict[str, str], ...] = (
    {"name": "gsm8k", "dataset": "gsm8k",
     "description": "Grade-school math word problems (openai/gsm8k from the Hugging Face hub; needs the hub or a "
                    "local cache). Reward: the number after '####' matches the reference, plus a format bonus."},
    {"name": "offline-arith", "dataset": "offline-arith",
     "description": "Built-in generated additions without carry ('47+2=' -> '#### 49'), made for the CPU tiny model; "
                    "held-out sums are new combinations of trained parts. Works offline."},
)


def _jsonl_entry(path: Path) -> dict[str, str]:
    return {"name": path.stem.replace("_", "-"), "dataset": path.name,
            "description": f"gsm8k-shaped JSONL rows from configs/{path.name} (1 row in 10 held out by a hash of the "
                           "question). Works offline."}


def list_environments(root: Path) -> list[dict[str, str]]:
    """The built-in environments, then each gsm8k-shaped JSONL file in the project's configs/ folder (the shipped
    word problems of the real-model CPU profile among them). Each: name, class_name, file_path, description,
    dataset (the `[environment] dataset` value selecting it)."""
    entries = [dict(e) for e in BUILT_IN]
    entries += [_jsonl_entry(p) for p in sorted((root / "configs").glob("*.jsonl"))]
    return [{"name": e["name"], "class_name": ENV_CLASS, "file_path": ENV_FILE, "description": e["description"],
             "dataset": e["dataset"]} for e in entries]


def find_environment(root: Path, name: str) -> dict[str, str] | None:
    """The environment called `name` (or whose dataset value is `name`)."""
    return next((e for e in list_environments(root) if name in (e["name"], e["dataset"])), None)

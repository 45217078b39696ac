"""The environments an agent can pick (`rl_list_environments`, `rl_select_environment`).

Two kinds, as the stack runs them:
- the built-in environment (hermes_stack.environment.env.HermesMathEnv) over a dataset: gsm8k, offline-arith, or a
  gsm8k-shaped JSONL file of configs/; selected by `[environment] dataset` (and `name` back to the built-in one);
- the user's own atroposlib `BaseEnv` files in environments/, as hermes_stack.environments_catalog finds them (the
  same listing `hermes-stack environments`, validate and the environment service use); selected by
  `[environment] name`.
Selecting writes those values through the config edit path (validated first). `list_environments` is the one place
the agent's list is made.
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


def _jsonl_entry(path: Path, taken: set[str]) -> dict[str, str]:
    """A JSONL file's entry: named by its stem with - for _ (the file name when that name is taken: `a_b.jsonl` beside
    `a-b.jsonl`, or a `gsm8k.jsonl`), and a `problem` when the environment could not read it (validate's check), so
    an agent sees why before it selects the file rather than after."""
    from hermes_stack.errors import InputError
    from hermes_stack.tasks.datasets import check_jsonl

    name = path.stem.replace("_", "-")
    entry = {"name": path.name if name in taken else name, "dataset": path.name,
             "description": f"gsm8k-shaped JSONL rows from configs/{path.name} (1 row in 10 held out by a hash of the "
                            "question). Works offline."}
    try:
        problems = check_jsonl(path.name, path.parent, f"configs/{path.name}")
    except InputError as exc:  # unreadable (not UTF-8, no permission): the same one line
        problems = list(exc.problems)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        entry["problem"] = problems[0].line() + more
    return entry


def list_environments(root: Path) -> list[dict[str, str]]:
    """The built-in environment's datasets, each gsm8k-shaped JSONL file in the project's configs/ folder (the shipped
    word problems of the real-model CPU profile among them), then the environments/ folder's own environments. Each:
    name, class_name, file_path, description, and what selects it: `dataset` (the built-in one's
    `[environment] dataset`) or `environment_name` (a folder environment's `[environment] name`); a JSONL file the
    environment could not read has a `problem` (validate's line)."""
    from hermes_stack.environments_catalog import list_environments as catalog

    entries = [dict(e) for e in BUILT_IN]
    for path in sorted((root / "configs").glob("*.jsonl")):
        if path.is_file():  # a folder named x.jsonl is no dataset
            entries.append(_jsonl_entry(path, {e["name"] for e in entries}))
    listed = [{"name": e.pop("name"), "class_name": ENV_CLASS, "file_path": ENV_FILE, **e} for e in entries]
    taken = {e["name"] for e in listed}
    for env in catalog(root):
        if env.builtin or env.name in taken and any(e.get("environment_name") == env.name for e in listed):
            continue  # a second class of that name: validate refuses the choice, and lists where
        if env.name in taken:
            # A folder class named like a dataset: `[environment] name = <it>` runs the class (validate, up), so the
            # name is the class's here too, and the dataset's entry says what it is.
            clash = next(e for e in listed if e["name"] == env.name)
            clash["name"] = f"{env.name} (built-in dataset)"
        taken.add(env.name)
        listed.append({"name": env.name, "class_name": env.class_name, "file_path": env.file,
                       "description": env.description or f"atroposlib environment {env.class_name} in {env.file}",
                       "environment_name": env.name})
    return listed


def is_builtin_name(name: str) -> bool:
    """`[environment] name` values that run the built-in environment (environments_catalog.BUILTIN)."""
    from hermes_stack.environments_catalog import BUILTIN

    return any(env.name == name for env in BUILTIN)


def find_environment(listed: list[dict[str, str]], name: str) -> dict[str, str] | None:
    """The environment of `listed` (list_environments') called `name`, else the built-in one whose dataset value is
    `name` (a name first: a folder class may be named like a dataset)."""
    return (next((e for e in listed if e["name"] == name), None)
            or next((e for e in listed if e.get("dataset") == name), None))


def current_name(listed: list[dict[str, str]], name: str, dataset: str) -> str:
    """The listed name of what `[environment] name` and `dataset` select: the built-in one's dataset entry, or the
    folder environment called `name`."""
    if is_builtin_name(name):
        return next((e["name"] for e in listed if e.get("dataset") == dataset), dataset)
    return name

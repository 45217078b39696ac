"""Issue 19: docs/architecture.md opens with a map of the house, and the map matches the tree: every module of
hermes_stack is named in it, under its package, and every file it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()


def the_map() -> str:
    body = DOC[DOC.index("## The house"):]
    return body[body.index("```") + 3: body.index("```", body.index("```") + 3)]


def test_the_doc_opens_with_the_map():
    assert DOC.index("## ") == DOC.index("## The house")


def test_every_module_is_on_the_map_under_its_package():
    text = the_map()
    missing = []
    for path in sorted((ROOT / "hermes_stack").rglob("*.py")):
        rel = path.relative_to(ROOT / "hermes_stack")
        if path.name == "__init__.py":
            continue
        package = rel.parts[-2] + "/" if len(rel.parts) > 1 else None
        if not re.search(rf"\b{re.escape(path.name)}\b", text) or (package and package not in text):
            missing.append(str(rel))
    assert not missing, f"docs/architecture.md's map does not name: {missing}"


def test_every_file_the_map_names_exists():
    names = set(re.findall(r"\b([a-z_]+\.py)\b", the_map()))
    tree = {p.name for p in (ROOT / "hermes_stack").rglob("*.py")} | {p.name for p in (ROOT / "tests").rglob("*.py")}
    assert names - tree == set()

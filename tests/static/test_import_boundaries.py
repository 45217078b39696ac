"""Issue 11: the services don't import each other, and the package has no import cycle.

- No module of one service package (trainer, inference, environment) imports another of them: what they share lives
  in hermes_stack.modelcore (and the config, tasks, errors... modules), which imports no service package either. So
  each image can carry its service with the shared packages, and no file list has to follow a service's imports.
- No cycle in the import graph of hermes_stack, imports inside functions included: a cycle through a lazy import
  still ties the two modules together in the design, and it breaks as soon as someone hoists the import.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from import_graph import ROOT, find_cycles, import_graph

SERVICES = ("trainer", "inference", "environment")
SHARED = ("modelcore",)  # shared by the services: imports none of them


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph()


def test_the_graph_sees_function_level_imports(graph):
    # Guards the walker itself: these imports stand inside functions, so a module-level-only reader would miss them.
    assert "hermes_stack.modelcore.sampling_core" in graph["hermes_stack.modelcore.embedded"]
    assert "hermes_stack.trainer.engine_torch" in graph["hermes_stack.trainer.__main__"]


@pytest.mark.parametrize("package", SERVICES + SHARED)
def test_a_service_package_imports_no_other_service(graph, package):
    crossings = [
        f"{module.replace('.', '/')}.py:{line} imports {target}"
        for module, edges in sorted(graph.items()) if _package(module) == package
        for target, line in sorted(edges.items(), key=lambda e: e[1])
        if _package(target) in SERVICES and _package(target) != package
    ]
    assert not crossings, (
        f"hermes_stack/{package} imports another service package; move what they share into hermes_stack/modelcore "
        "(or another shared module):\n  " + "\n  ".join(crossings))


def test_the_package_has_no_import_cycle(graph):
    cycles = find_cycles(graph)
    shown = []
    for cycle in cycles:
        steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in pairwise(cycle)]
        shown.append("\n    ".join(steps))
    assert not cycles, f"import cycles in {ROOT.name}/hermes_stack:\n  " + "\n  ".join(shown)

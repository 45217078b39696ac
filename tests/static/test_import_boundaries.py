"""Issues 11 and 19: every package of hermes_stack imports only in its allowed directions, and there is no cycle.

The house (docs/architecture.md opens with its map):
- controller/: the host side (the `hermes-stack` command). `hermes_stack/__main__.py` is its `python -m` entry.
- the contract: the top-level modules (errors, service_env, keyfile, secret_files, hub, gateway, health, ...), what
  the controller and the services share.
- config/: the typed configs, their loader and rules; tasks/: datasets, prompts, reward, held-out evaluation;
  modelcore/: the model code two services share.
- trainer/, inference/, environment/: the services. No service imports another, and no shared code (contract, config,
  tasks, modelcore) and not the controller imports a service: each image carries its service with the shared
  packages, and the host never runs service code. Nothing but the controller imports the controller.
- No cycle in the import graph, imports inside functions included: a cycle through a lazy import still ties the two
  modules together in the design, and it breaks as soon as someone hoists the import.
"""

from __future__ import annotations

import textwrap
from itertools import pairwise

import pytest
from import_graph import ALLOWED, ROOT, SERVICES, boundary_violations, find_cycles, import_graph, layer_of


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph()


def test_the_graph_sees_function_level_imports(graph):
    # Guards the walker itself: these imports stand inside functions, so a module-level-only reader would miss them.
    assert "hermes_stack.modelcore.sampling_core" in graph["hermes_stack.modelcore.embedded"]
    assert "hermes_stack.trainer.engine_torch" in graph["hermes_stack.trainer.__main__"]


def test_every_module_belongs_to_a_layer_with_rules(graph):
    # A new package must be placed in the table (import_graph.ALLOWED) before its imports can pass.
    assert {layer_of(m) for m in graph} == set(ALLOWED), sorted({layer_of(m) for m in graph} ^ set(ALLOWED))


def test_the_services_and_shared_code_never_import_in_the_wrong_direction(graph):
    crossings = boundary_violations(graph)
    assert not crossings, ("imports against the house's directions (tests/static/import_graph.py ALLOWED); move "
                           "what two parts share into the contract, config, tasks or modelcore:\n  "
                           + "\n  ".join(crossings))


def test_no_service_is_allowed_another_service():
    for service in SERVICES:
        assert not (ALLOWED[service] & set(SERVICES)) - {service}, service
    for shared in ("contract", "config", "tasks", "modelcore", "controller"):
        assert not ALLOWED[shared] & set(SERVICES), shared
        assert shared == "controller" or "controller" not in ALLOWED[shared], shared


# The four arrows that ran back up before issue 19 (and heldout's), each put back into a tree of its own: the checker
# must refuse every one, naming the file and line.
BACK_ARROWS = [
    ("hermes_stack/controller/commands/test_inference.py", "from hermes_stack.environment.__main__ import run_process",
     "hermes_stack/environment/__main__.py"),
    ("hermes_stack/controller/commands/test_inference.py", "from hermes_stack.environment.runtime import build_configs",
     "hermes_stack/environment/runtime.py"),
    ("hermes_stack/config/profiles.py", "from hermes_stack.controller.preflight import SystemProbe",
     "hermes_stack/controller/preflight.py"),
    ("hermes_stack/config/rules.py", "from hermes_stack.environment import datasets",
     "hermes_stack/environment/datasets.py"),
    ("hermes_stack/tasks/prompting.py", "from hermes_stack.environment.datasets import load_items",
     "hermes_stack/environment/datasets.py"),
    ("hermes_stack/heldout.py", "from hermes_stack.environment.reward import score_completion",
     "hermes_stack/environment/reward.py"),
]


@pytest.mark.parametrize("importer, statement, target", BACK_ARROWS, ids=[a[0].split("/", 1)[1] + ":" + a[2].split(
    "/", 1)[1] for a in BACK_ARROWS])
def test_each_back_arrow_put_back_is_refused(tmp_path, importer, statement, target):
    for path, text in ((importer, f"def lazy():\n    {statement}\n"), (target, "X = 1\n")):
        file = tmp_path / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
        for parent in file.relative_to(tmp_path).parents:
            if str(parent) != ".":
                (tmp_path / parent / "__init__.py").touch()
    found = boundary_violations(import_graph(tmp_path))
    module = importer.removesuffix(".py").replace("/", ".")
    assert len(found) == 1 and found[0].startswith(f"{module} (line 2) imports "), found


def test_an_allowed_import_in_a_tree_is_not_refused(tmp_path):
    # Guards the test above: a tree that imports in an allowed direction passes.
    files = {"hermes_stack/config/rules.py": "from hermes_stack.tasks import datasets\n",
             "hermes_stack/tasks/datasets.py": "X = 1\n", "hermes_stack/config/__init__.py": "",
             "hermes_stack/tasks/__init__.py": "", "hermes_stack/__init__.py": ""}
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(textwrap.dedent(text))
    graph = import_graph(tmp_path)
    assert graph["hermes_stack.config.rules"] == {"hermes_stack.tasks.datasets": 1}
    assert boundary_violations(graph) == []


def test_the_package_has_no_import_cycle(graph):
    cycles = find_cycles(graph)
    shown = []
    for cycle in cycles:
        steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in pairwise(cycle)]
        shown.append("\n    ".join(steps))
    assert not cycles, f"import cycles in {ROOT.name}/hermes_stack:\n  " + "\n  ".join(shown)

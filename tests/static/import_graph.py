"""The import graph of the hermes_stack package, read with `ast` (nothing is imported): every `import x` and
`from x import y`, at module level and inside functions, classes and `if TYPE_CHECKING:` blocks alike.

An import names the module it loads: `from hermes_stack.modelcore import catalog` is an edge to
hermes_stack.modelcore.catalog (a module), `from hermes_stack import ALGOS` one to hermes_stack (the package's
__init__). Parent packages a dotted import loads on the way are not edges: they would make every package with an
__init__ that names a child look like a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "hermes_stack"


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (a package's name maps to its __init__)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The package module `name` loads: itself, or its longest prefix that is a module (`pkg.mod.attr`)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported package module, line) for every import statement in the file, wherever it stands."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import name`: name is a submodule or an attribute of pkg; _resolve settles which.
            names = [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            target = _resolve(name, modules) if name.split(".")[0] == PACKAGE else None
            if target is not None and target != module:
                found.append((target, node.lineno))
    return found


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported package module: first line importing it}."""
    modules = module_files(root)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in imports_of(module, path, modules):
            edges.setdefault(target, line)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (or a module importing itself), as
    the module path `a -> b -> ... -> a`: enough to name each knot; fixing it may reveal another in the same one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm; the package is small enough for recursion
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                connect(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, {}):
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: list[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first inside the component)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node]):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if succ in members and succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    return component  # unreachable for a strongly connected component


def closure(start: str, graph: dict[str, dict[str, int]]) -> set[str]:
    """Every package module `start` imports, directly or not (itself included)."""
    seen, todo = {start}, [start]
    while todo:
        for succ in graph[todo.pop()]:
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


# ---- the house's directions (issue 19) -----------------------------------------------------------------------------

SERVICES = ("trainer", "inference", "environment", "router")
SHARED = ("config", "tasks", "modelcore")
# layer -> the layers its modules may import (its own always included). "contract": the top-level modules.
ALLOWED: dict[str, set[str]] = {
    "contract": {"contract", "config", "modelcore"},  # service_env loads the configs; catalog's default models dir
    "config": {"config", "contract", "tasks", "modelcore"},  # rules check a dataset file; the catalog's names
    "tasks": {"tasks", "contract"},
    "modelcore": {"modelcore", "contract", "tasks"},  # the tiny model's warm start is the offline task's
    "controller": {"controller", "contract", "config", "tasks", "modelcore"},
    **{service: {service, "contract", "config", "tasks", "modelcore"} for service in SERVICES},
}


def layer_of(module: str) -> str:
    """hermes_stack.<package>.x -> the package (a service, a shared package or the controller); a top-level module
    -> "contract"; `python -m hermes_stack` (hermes_stack.__main__) runs the controller's command."""
    parts = module.split(".")
    if module == f"{PACKAGE}.__main__":
        return "controller"
    if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED):
        return parts[1]
    return "contract"


def boundary_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    """`module (line N) imports target (layer -> layer)` for every edge against ALLOWED; a layer not in the table counts
    as a violation of each of its edges (a new package must be given its directions)."""
    out = []
    for module, edges in sorted(graph.items()):
        source = layer_of(module)
        for target, line in sorted(edges.items(), key=lambda e: e[1]):
            if layer_of(target) not in ALLOWED.get(source, set()):
                out.append(f"{module} (line {line}) imports {target} ({source} -> {layer_of(target)})")
    return out

"""The environments a stack can run: the built-in one and the atroposlib `BaseEnv` files of the project's
`environments/` folder, read with `ast` (a user's file is never imported on the host).

Shared code: imports no service package, so the controller (`hermes-stack environments`, `validate`), the MCP helper
(`rl_list_environments`) and the environment service use the same listing.

- An environment is a class that derives from atroposlib's `BaseEnv` (directly, or through another class of the same
  file that does). Its name is the class's `name` attribute (atroposlib's), else the class name.
- `[environment] name` selects one by that name; a name ending in `.py` names a file of the project instead (relative
  to the project root), which must hold exactly one environment.
- The import check compares the selected file's imports with what the environment image installs: the standard
  library, the project's `environment` dependency group and its requirements (read from this machine's installed
  metadata), `environments/requirements.txt`, the folder's own modules and hermes_stack. Where atroposlib is not
  installed (the trainer and inference images load the same configuration) that check is left to the environment
  service's own start.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from hermes_stack.errors import near_miss

FOLDER = "environments"
REQUIREMENTS = f"{FOLDER}/requirements.txt"
BUILTIN_FILE = "hermes_stack/environment/env.py"


@dataclass(frozen=True)
class EnvironmentInfo:
    name: str
    class_name: str
    file: str  # relative to the project root
    description: str
    builtin: bool = False
    line: int = 0


# The built-in environment serves `[environment] dataset` (gsm8k, offline-arith, a JSONL file). "gsm8k" is the name
# the seed's config files give it; "hermes-math" is its class's atroposlib `name`; "gsm8k_tinker" is the blog's name for
# it (its config files, pasted as they are, must keep working: tests/unit/test_blog_files.py).
BUILTIN: tuple[EnvironmentInfo, ...] = tuple(
    EnvironmentInfo(name, "HermesMathEnv", BUILTIN_FILE,
                    "The built-in math environment: serves [environment] dataset (gsm8k, offline-arith or a "
                    "gsm8k-shaped JSONL file), scored by the rule reward and optionally a judge.", builtin=True)
    for name in ("gsm8k", "hermes-math", "gsm8k_tinker"))


@dataclass(frozen=True)
class FileScan:
    """One file of the folder: its environments, or why it could not be read."""

    file: str
    environments: tuple[EnvironmentInfo, ...] = ()
    error: str | None = None  # "syntax error at <file>:<line>: <msg>"
    imports: tuple[tuple[str, int], ...] = ()  # (top-level module, line), guarded imports left out


def _base_names(node: ast.ClassDef) -> list[str]:
    """A class's bases by name; `module.BaseEnv` (atroposlib's, reached through its module) as "module.BaseEnv",
    so that a file's own class called BaseEnv is not mistaken for it."""
    out = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            out.append(base.id)
        elif isinstance(base, ast.Attribute):
            out.append(f"module.{base.attr}" if base.attr == "BaseEnv" else base.attr)
    return out


def _assigned(body: list[ast.stmt]):
    """(name, value node) of each plain `name = value` / `name: T = value` in a body."""
    for stmt in body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) \
            else []
        value = getattr(stmt, "value", None)
        yield from ((t.id, value) for t in targets if isinstance(t, ast.Name))


def _string_constants(body: list[ast.stmt]) -> dict[str, str]:
    """NAME = "text" assignments of a body (a module's constants): `name = NAME` in a class reads one."""
    return {name: value.value for name, value in _assigned(body)
            if isinstance(value, ast.Constant) and isinstance(value.value, str)}


def _name_attribute(node: ast.ClassDef, constants: dict[str, str] | None = None) -> str | None:
    for target, value in _assigned(node.body):
        if target != "name":
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value
        if isinstance(value, ast.Name) and value.id in (constants or {}):
            return (constants or {})[value.id]
    return None


def _base_env_names(tree: ast.Module, classes: dict[str, ast.ClassDef]) -> set[str]:
    """The names atroposlib's BaseEnv goes by in a file: BaseEnv, or what `import BaseEnv as X` binds; not a class
    of the file's own that is called BaseEnv."""
    names = {"module.BaseEnv"} | (set() if "BaseEnv" in classes else {"BaseEnv"})
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names if alias.name == "BaseEnv"}
    return names


def _guarded(tree: ast.Module) -> set[int]:
    """Line numbers of imports inside `try: ... except ImportError` (optional imports: not required)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError", "Exception")
                or h.type is None for h in node.handlers):
            for stmt in node.body:
                for inner in ast.walk(stmt):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        lines.add(inner.lineno)
    return lines


def _imports(tree: ast.Module) -> tuple[tuple[str, int], ...]:
    guarded = _guarded(tree)
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and node.lineno not in guarded:
            out += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.lineno not in guarded:
            out.append((node.module.split(".")[0], node.lineno))
    return tuple(sorted(set(out), key=lambda x: x[1]))


def scan_source(source: str, file: str) -> FileScan:
    """The environments one file defines (pure: the text in, the classes out)."""
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as exc:
        return FileScan(file, error=f"syntax error at {file}:{exc.lineno}: {exc.msg}")
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    bases = _base_env_names(tree, classes)
    constants = _string_constants(tree.body)
    envs: set[str] = set()
    changed = True
    while changed:  # a class deriving from one of this file's environments is one too
        changed = False
        for name, node in classes.items():
            if name not in envs and any(b in bases or b in envs for b in _base_names(node)):
                envs.add(name)
                changed = True
    found = tuple(
        EnvironmentInfo(_name_attribute(node, constants) or name, name, file,
                        (ast.get_docstring(node) or "").strip(), line=node.lineno)
        for name, node in classes.items() if name in envs)
    return FileScan(file, found, imports=_imports(tree))


def folder(project_root: Path) -> Path:
    return Path(project_root) / FOLDER


def scan_folder(project_root: Path) -> list[FileScan]:
    """Every `*.py` file directly in environments/ (sorted), scanned; none when the folder is missing."""
    root = folder(project_root)
    if not root.is_dir():
        return []
    scans = []
    for path in sorted(root.glob("*.py")):
        # Not a file: an editor's lock link (.#my_env.py, dangling), a folder named *.py; neither is an environment.
        if path.name.startswith(("_", ".")) or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            scans.append(FileScan(f"{FOLDER}/{path.name}", error=f"cannot read {FOLDER}/{path.name}: {exc.strerror}"))
            continue
        scans.append(scan_source(text, f"{FOLDER}/{path.name}"))
    return scans


def unreadable(project_root: Path) -> list[str]:
    """Why each file of the folder that Python cannot parse was left out ("syntax error at <file>:<line>: …"): a
    listing without them would hide an environment the user wrote."""
    return [scan.error for scan in scan_folder(project_root) if scan.error]


def list_environments(project_root: Path) -> list[EnvironmentInfo]:
    """The built-in environments, then the folder's (files that do not parse are left out: `validate` names them)."""
    return [*BUILTIN, *(env for scan in scan_folder(project_root) for env in scan.environments)]


def environment_names(project_root: Path) -> list[str]:
    return list(dict.fromkeys(env.name for env in list_environments(project_root)))


# ---------------------------------------------------------------- selecting one


@dataclass(frozen=True)
class Selection:
    """What `[environment] name` selects: an environment, or the one-line reason it selects none."""

    environment: EnvironmentInfo | None
    problem: tuple[str, str, str] | None = None  # (found, expected, hint)
    imports: tuple[tuple[str, int], ...] = ()


def _scan_file(project_root: Path, relative: str) -> FileScan | None:
    path = Path(project_root) / relative
    if not path.is_file():
        return None
    return scan_source(path.read_text(encoding="utf-8", errors="replace"), relative)


def select(project_root: Path, name: str) -> Selection:
    """The environment `name` selects in this project. Pure of side effects; reads the folder's files as text."""
    root = folder(project_root)
    for env in BUILTIN:
        if env.name == name:
            # A file of the project with the same name would be silently ignored (the built-in is found first).
            clash = [e for scan in scan_folder(project_root) for e in scan.environments if e.name == name]
            if clash:
                mine = clash[0]
                found = f"{name!r}, defined by the built-in environment and by {mine.file}:{mine.line} ({mine.class_name})"
                return Selection(None, (found, "one environment with that name",
                                        f"rename yours (its `name` attribute); {name} is the built-in's"))
            return Selection(env)
    if name.endswith(".py"):
        inside = (Path(project_root) / name).resolve()
        if not inside.is_relative_to(root.resolve()):  # only the environments folder is mounted into the services
            return Selection(None, (f"{name!r} (outside {FOLDER}/)", f"a file in {FOLDER}/, e.g. {FOLDER}/my_env.py",
                                    f"move it into {root}: only that folder reaches the containers"))
        scan = _scan_file(project_root, name)
        if scan is None:
            return Selection(None, (repr(name) + f" (no such file: {Path(project_root) / name})",
                                    f"a BaseEnv file of the project, e.g. {FOLDER}/my_env.py",
                                    f"put the file in {root} or name an environment: "
                                    + ", ".join(environment_names(project_root))))
        return _one_of(scan, name, [scan])
    scans = scan_folder(project_root)  # once: the names below come from it, as environment_names would make them
    names = list(dict.fromkeys([e.name for e in BUILTIN] + [env.name for s in scans for env in s.environments]))
    near = near_miss(name, names)
    if near is not None:  # a near miss of a name that exists: say that, not "create a folder" or a list
        return Selection(None, (repr(name), f"an environment's name exactly ({near!r} is one)",
                                f"did you mean {near}? Names are the classes' `name` attributes"))
    if not root.is_dir():
        return Selection(None, (f"{name!r} (no {FOLDER}/ folder: {root})",
                                "a built-in environment (" + ", ".join(e.name for e in BUILTIN)
                                + f") or one defined in {FOLDER}/",
                                f"create {root} and put the environment's .py file there"))
    broken = [s for s in scans if s.error]
    matches = [(s, env) for s in scans for env in s.environments if env.name == name]
    if len(matches) > 1:
        where = ", ".join(f"{env.file}:{env.line} ({env.class_name})" for _, env in matches)
        return Selection(None, (f"{name!r}, defined {len(matches)} times: {where}",
                                "one environment with that name", "rename one of them (its `name` attribute)"))
    if matches:
        scan, env = matches[0]
        return Selection(env, imports=scan.imports)
    if broken:
        return Selection(None, (f"{name!r} (not found; {broken[0].error})", "a file that Python can parse",
                                "fix the syntax error; the environment may be defined in that file"))
    empty = [s.file for s in scans if not s.environments]
    hint = "the names are the classes' `name` attributes"
    if empty:
        hint += "; " + ", ".join(empty) + (" defines" if len(empty) == 1 else " define") + " no BaseEnv subclass"
    return Selection(None, (repr(name), "one of: " + ", ".join(names), hint))


def _one_of(scan: FileScan, name: str, scans: list[FileScan]) -> Selection:
    if scan.error:
        return Selection(None, (f"{name!r} ({scan.error})", "a file that Python can parse", "fix the syntax error"))
    if not scan.environments:
        return Selection(None, (f"{name!r} (the file defines no BaseEnv subclass)",
                                "a file with one class deriving from atroposlib's BaseEnv",
                                "e.g. `class MyEnv(BaseEnv): name = \"my-env\"`"))
    if len(scan.environments) > 1:
        names = ", ".join(f"{e.name} ({e.class_name}, line {e.line})" for e in scan.environments)
        return Selection(None, (f"{name!r} (the file defines {len(scan.environments)} environments: {names})",
                                "a file with one environment", "select one by its name instead of the file"))
    return Selection(scan.environments[0], imports=scan.imports)


# ---------------------------------------------------------------- what the environment image can import


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(project_root: Path) -> list[tuple[int, str]]:
    """(line number, requirement) of environments/requirements.txt, comments and blank lines left out."""
    path = Path(project_root) / REQUIREMENTS
    if not path.is_file():
        return []
    out = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if text:
            out.append((number, text))
    return out


PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")


def unpinned_requirements(project_root: Path) -> list[tuple[int, str]]:
    """Lines of environments/requirements.txt that are not `name==version`: the file is installed like our lock
    (--no-deps, every package pinned), so a range or an option line would make the image's contents float."""
    return [(n, text) for n, text in requirement_lines(project_root) if not PINNED.match(text)]


def _requirement_name(text: str) -> str:
    return canonical(re.split(r"[\s\[<>=!~;]", text, maxsplit=1)[0])


@functools.cache
def _installed_closure(roots: tuple[str, ...]) -> frozenset[str] | None:
    """The distributions `roots` install with their requirements, from this machine's metadata; None when
    atroposlib (the environment image's core) is not installed here."""
    import importlib.metadata as md

    try:
        md.distribution("atroposlib")
    except md.PackageNotFoundError:
        return None
    from packaging.requirements import Requirement  # transformers' dependency, present wherever atroposlib is
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = canonical(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.distribution(name).requires or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return frozenset(seen)


@functools.cache
def _modules_by_distribution() -> dict[str, set[str]]:
    import importlib.metadata as md

    out: dict[str, set[str]] = {}
    for module, dists in md.packages_distributions().items():
        for dist in dists:
            out.setdefault(canonical(dist), set()).add(module)
    return out


# The image's own packages: pyproject.toml's base and environment groups (docker/environment.Dockerfile).
IMAGE_ROOTS = ("pydantic", "python-dotenv", "httpx", "typer", "rich", "PyYAML", "atroposlib", "math-verify")


def image_modules(project_root: Path) -> frozenset[str] | None:
    """Top-level modules importable in the environment image, or None when that cannot be read here."""
    closure = _installed_closure(IMAGE_ROOTS)
    if closure is None:
        return None
    by_dist = _modules_by_distribution()
    modules = set(sys.stdlib_module_names) | {"hermes_stack"}
    for dist in closure:
        modules |= by_dist.get(dist, set())
    for _, text in requirement_lines(project_root):
        name = _requirement_name(text)
        modules |= by_dist.get(name, set()) | {name.replace("-", "_")}
    root = folder(project_root)
    if root.is_dir():
        modules |= {p.stem for p in root.glob("*.py")} | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    return frozenset(modules)


def missing_imports(project_root: Path, imports: tuple[tuple[str, int], ...]) -> list[tuple[str, int]] | None:
    """(module, line) of each import the environment image lacks; None when the image's contents are unknown here."""
    available = image_modules(project_root)
    if available is None:
        return None
    return [(module, line) for module, line in imports if module not in available]

"""environments/requirements.txt against the environment image: the pins pip would refuse, and whether the selected
environment file's imports are importable there (docker/environment.Dockerfile installs the file with `--no-deps -c
requirements.lock`).

- The pins: one Problem per requirements line pip would refuse (not name==version, a version that is not PEP 440,
  two versions of one package, a version other than requirements.lock's).
- The import check compares the selected file's imports with what the image installs: the standard library, the
  project's `environment` dependency group and its requirements (read from this machine's installed metadata),
  environments/requirements.txt, the folder's own modules and hermes_stack. Where atroposlib is not installed (the
  trainer and inference images load the same configuration) that check is left to the environment service's own
  start. A listed requirement that is not installed here has unknown modules (scikit-learn's is sklearn): an import
  it may provide is not refused, only named as unchecked.

Shared code, as environments_catalog (which finds and selects the environment files).
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from hermes_stack.environments_catalog import FOLDER, folder, module_entries
from hermes_stack.errors import Problem
from hermes_stack.textfile import decode_source

REQUIREMENTS = f"{FOLDER}/requirements.txt"
LOCK = "requirements.lock"


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class RequirementsFile:
    """environments/requirements.txt: its requirement lines, or why it cannot be read (then its lines are unknown)."""

    lines: tuple[tuple[int, str], ...] = ()
    problem: Problem | None = None


def read_requirements(project_root: Path) -> RequirementsFile:
    path = Path(project_root) / REQUIREMENTS
    if not path.is_file():
        return RequirementsFile()
    try:
        data = path.read_bytes()
    except OSError as exc:
        return RequirementsFile(problem=Problem(REQUIREMENTS, "(file)", f"a file that cannot be read ({exc.strerror})",
                                                "a readable UTF-8 text file", "the image build copies and reads it"))
    # pip reads it as Python reads source (a BOM skipped, a coding line honoured), a UTF-16/32 file with its byte-order
    # mark too (pip's req_file.auto_decode), else with the image's UTF-8 locale.
    text = decode_source(data, "save it as UTF-8: pip reads it as UTF-8 in the image", wide_boms=True)
    if text.found:
        return RequirementsFile(problem=Problem(f"{REQUIREMENTS}:{text.line}", "(file)", text.found, text.expected,
                                                text.hint))
    out = []
    for number, raw in enumerate(text.text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line:
            out.append((number, line))
    return RequirementsFile(tuple(out))


PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")
UNPINNED_HINT = ("pin every package and each of its dependencies, as requirements.lock does; the file installs with "
                 "--no-deps from the wheelhouse")


def _version(text: str):
    """The version pip compares (1.0 == 1.0.0), or None when pip would refuse it (PEP 440: `latest` is none)."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - matplotlib's dependency, so always here; else compared as written
        return text
    try:
        return Version(text)
    except InvalidVersion:
        return None


def lock_pins(project_root: Path) -> dict[str, tuple[str, str]]:
    """requirements.lock's pins: canonical name -> (version, the line as written). Empty without the file (the
    services' containers have none: the image build, which had it, checked there)."""
    try:
        text = (Path(project_root) / LOCK).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    out = {}
    for line in text.splitlines():
        match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;#]+)", line)
        if match:
            out[canonical(match.group(1))] = (match.group(3), f"{match.group(1)}=={match.group(3)}")
    return out


def requirement_problems(project_root: Path) -> list[Problem]:
    """What pip, installing environments/requirements.txt into the environment image (`--no-deps -c
    requirements.lock`, docker/environment.Dockerfile), would refuse: one Problem per line, in line order; the
    file's one Problem when it cannot be read as text."""
    reqs = read_requirements(project_root)
    if reqs.problem is not None:
        return [reqs.problem]
    lock = lock_pins(project_root)
    first: dict[str, tuple[int, str, object]] = {}  # canonical name -> (line, text, version) of its first pin
    out = []
    for number, text in reqs.lines:
        where = f"{REQUIREMENTS}:{number}"
        if not PINNED.match(text):
            out.append(Problem(where, "requirement", repr(text), "name==version", UNPINNED_HINT))
            continue
        written, version = text.split("==", 1)
        name = _requirement_name(written)
        parsed = _version(version)
        if parsed is None:
            out.append(Problem(where, "requirement", f"{text!r} ({version!r} is not a version)",
                               "name==version with a version pip reads (PEP 440: 1.14.0, 2.0rc1)",
                               "pin the release to install, as requirements.lock does; pip refuses the line"))
            continue
        if name in first and first[name][2] != parsed:  # the same pin twice is harmless: pip installs it once
            out.append(Problem(where, "requirement", f"{text!r} (line {first[name][0]} pins {first[name][1]})",
                               "each package pinned to one version",
                               "keep one of the two lines: pip cannot install both, and the image build stops"))
            continue
        first.setdefault(name, (number, text, parsed))
        if name in lock and _version(lock[name][0]) != parsed:
            out.append(Problem(where, "requirement", f"{text!r} ({LOCK} pins {lock[name][1]})", lock[name][1],
                               f"the image installs this file constrained by {LOCK}, so only the lock's version "
                               "can be installed; the image build stops at any other"))
    return out


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


def _installed_modules(closure: frozenset[str] | None, reqs: RequirementsFile) -> tuple[set[str], list[str]]:
    """(top-level modules the image installs, the folder's own not counted; the requirements whose modules are
    unknown here). `closure` None (no atroposlib here): the standard library and requirements.txt's names only."""
    by_dist = _modules_by_distribution()
    modules = set(sys.stdlib_module_names) | {"hermes_stack"}
    for dist in closure or ():
        modules |= by_dist.get(dist, set())
    unknown = []
    for _, text in reqs.lines:
        name = _requirement_name(text)
        modules.add(name.replace("-", "_"))  # its name as its module (sympy); metadata may list odd ones only
        if name in by_dist:  # installed here too: its modules, read from its metadata
            modules |= by_dist[name]
        else:  # only that guess, which misses the others (scikit-learn: sklearn)
            unknown.append(text)
    return modules, unknown


def image_modules(project_root: Path) -> tuple[frozenset[str], tuple[str, ...]] | None:
    """(top-level modules importable in the environment image, the requirements whose modules are unknown here),
    or None when the image's contents cannot be read here (no atroposlib; requirements.txt not text)."""
    closure = _installed_closure(IMAGE_ROOTS)
    reqs = read_requirements(project_root)
    if closure is None or reqs.problem is not None:
        return None
    modules, unknown = _installed_modules(closure, reqs)
    modules |= set(module_entries(folder(project_root)))
    return frozenset(modules), tuple(unknown)


# Modules of the standard library that nothing imports at run time (CPython's own tests, its easter eggs): a helper
# of the same name imported on purpose is what the import gets, and hides nothing anyone uses.
NEVER_IMPORTED = frozenset({"test", "this", "antigravity", "__hello__", "__phello__"})


@dataclass(frozen=True)
class Shadow:
    """An import that names both a module of the environment's folder and one the image installs."""

    file: str  # the importing file, project-relative
    line: int
    module: str
    entry: str  # the folder's file or package of that name


def shadowed_imports(project_root: Path, environment_file: str,
                     reached: tuple[tuple[str, str, int], ...]) -> tuple[Shadow, ...]:
    """The imports of `reached` (Selection.reached_imports) whose module is both a file or package of the
    environment file's folder and an installed module of the image (the standard library always; its packages when
    atroposlib is installed here). The service puts that folder first on sys.path, so the import gets one of the two
    in place of the other, and every library importing the name is exposed too. One per module, at its first
    import."""
    parent = Path(environment_file).parent
    entries = module_entries(Path(project_root) / parent, parent.as_posix())
    if not entries:
        return ()
    reqs = read_requirements(project_root)
    installed, _ = _installed_modules(_installed_closure(IMAGE_ROOTS), reqs if reqs.problem is None
                                      else RequirementsFile())
    out: dict[str, Shadow] = {}
    for file, module, line in reached:
        if module in entries and module in installed and module not in NEVER_IMPORTED and module not in out:
            out[module] = Shadow(file, line, module, entries[module])
    return tuple(out.values())


@dataclass(frozen=True)
class ImportCheck:
    missing: tuple[tuple[str, int], ...] = ()  # (module, line) nothing in the image provides
    # (module, line) not found, but a requirement of `unknown` may provide it: not refused, as a false refusal of
    # a correct file is worse than an import error at the environment's start.
    unchecked: tuple[tuple[str, int], ...] = ()
    unknown: tuple[str, ...] = ()  # the requirements (as written) not installed here, so with unknown modules


def check_imports(project_root: Path, imports: tuple[tuple[str, int], ...]) -> ImportCheck | None:
    """The selected file's imports against the environment image; None when the image's contents are unknown."""
    known = image_modules(project_root)
    if known is None:
        return None
    available, unknown = known
    absent = tuple((module, line) for module, line in imports if module not in available)
    return ImportCheck(unchecked=absent, unknown=unknown) if unknown and absent else ImportCheck(missing=absent)




# ---------------------------------------------------------------- names a `from module import name` needs


@dataclass(frozen=True)
class MissingName:
    file: str  # the importing file, project-relative
    line: int
    module: str
    name: str
    source: str  # where the module was read: a file of the folder, or "" for this machine's installed copy


# Calls at a module's top level that bind names its text does not show: such a module is not judged.
_DYNAMIC = frozenset({"globals", "setattr", "exec", "vars", "locals"})


def _dynamic(tree) -> bool:
    """Whether the module's top level (not its functions) binds names out of sight: globals()[…] = …, setattr on
    the module, exec, a sys.modules entry replaced (a lazy module)."""
    import ast

    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _DYNAMIC:
                return True
            if isinstance(node, ast.Attribute) and node.attr == "modules" and getattr(node.value, "id", "") == "sys":
                return True
    return False


def _bound(body: list, out: set[str]) -> bool:
    """Add to `out` the names a module body binds at import (through if/try/with/for blocks, not in functions);
    False when it binds ones its text does not show (a star import)."""
    import ast

    def targets(node) -> None:
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name):
                out.add(inner.id)

    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
        elif isinstance(stmt, ast.Import):
            out.update(alias.asname or alias.name.split(".")[0] for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            if any(alias.name == "*" for alias in stmt.names):
                return False
            out.update(alias.asname or alias.name for alias in stmt.names)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                targets(target)
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            targets(stmt.target)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    targets(item.optional_vars)
        for block in ("body", "orelse", "finalbody"):
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and not _bound(getattr(stmt, block, None) or [], out):
                return False
        for handler in getattr(stmt, "handlers", ()):
            if handler.name:
                out.add(handler.name)
            if not _bound(handler.body, out):
                return False
    return True


@functools.lru_cache(maxsize=256)
def _defined_names(path: str, package: bool, mtime: float) -> frozenset[str] | None:
    """The names a module file binds (its submodules too for a package), read with ast, never run; None when its
    text cannot say (a star import, a module __getattr__, names set through globals(), a file that does not parse)."""
    import ast

    try:
        text = decode_source(Path(path).read_bytes(), "").text
        tree = ast.parse(text or "")
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if text is None or _dynamic(tree):
        return None
    names: set[str] = {"__name__", "__file__", "__doc__", "__path__", "__spec__", "__loader__", "__package__"}
    if not _bound(tree.body, names) or "__getattr__" in names:  # a module __getattr__ answers any name
        return None
    if package:
        here = Path(path).parent
        # submodules: source files, folders, and compiled ones (_safetensors_rust.abi3.so: the part before the dot)
        names |= {p.stem for p in here.glob("*.py")} | {p.name for p in here.iterdir() if p.is_dir()}
        names |= {p.name.split(".")[0] for p in here.iterdir() if p.suffix in (".so", ".pyd")}
    return frozenset(names)


def _installed_file(module: str) -> tuple[str, bool] | None:
    """(the source file, whether a package) of an installed module, found as the import system finds it but without
    importing anything (PathFinder, part by part); None when it is not Python source."""
    from importlib.machinery import PathFinder

    spec, path = None, None
    parts = module.split(".")
    for n in range(len(parts)):
        try:
            spec = PathFinder.find_spec(".".join(parts[:n + 1]), path)
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        path = spec.submodule_search_locations
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return spec.origin, spec.submodule_search_locations is not None


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    import importlib.metadata as md

    return md.packages_distributions()  # reads every installed distribution's metadata: once


def _judged_installed(top: str, lock: dict[str, tuple[str, str]]) -> bool:
    """Whether this machine's copy of `top` is the image's: a distribution providing it at the lock's version (the
    image installs the lock), or any when there is no lock (the image itself). The standard library is not judged:
    the image's Python may be another version."""
    import importlib.metadata as md

    dists = _packages_distributions().get(top, [])
    for dist in dists:
        try:
            version = md.version(dist)
        except md.PackageNotFoundError:
            continue
        pinned = lock.get(canonical(dist))
        if not lock or (pinned is not None and _version(pinned[0]) == _version(version)):
            return True
    return False


def missing_names(project_root: Path, environment_file: str,
                  reached: tuple[tuple[str, str, str, int], ...]) -> tuple[MissingName, ...]:
    """`from module import name` lines (Selection.reached_names) whose module, a file of the environment's folder
    or an installed package at the image's version, binds no such name: Python stops there (ImportError). Read from
    the modules' text; a module whose text cannot say which names it binds is not judged."""
    parent = Path(environment_file).parent
    entries = module_entries(Path(project_root) / parent, parent.as_posix())
    lock = lock_pins(project_root)
    out: list[MissingName] = []
    for file, module, name, line in reached:
        top = module.split(".")[0]
        if top in entries:  # the folder is first on sys.path: its file is what the import reads
            if module != top or entries[top].endswith("/"):
                continue  # a package folder of the user's: not judged
            found, source = (str(Path(project_root) / entries[top]), False), entries[top]
        elif top in sys.stdlib_module_names or not _judged_installed(top, lock):
            continue
        else:
            found, source = _installed_file(module), ""
        if found is None:
            continue
        try:
            mtime = Path(found[0]).stat().st_mtime
        except OSError:
            continue
        names = _defined_names(found[0], found[1], mtime)
        if names is not None and name not in names:
            out.append(MissingName(file, line, module, name, source))
    return tuple(out)

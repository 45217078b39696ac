"""The environments a stack can run: the built-in one and the atroposlib `BaseEnv` files of the project's
`environments/` folder, read with `ast` (a user's file is never imported on the host).

Shared code: imports no service package, so the controller (`hermes-stack environments`, `validate`), the MCP helper
(`rl_list_environments`) and the environment service use the same listing.

- An environment is a class that derives from atroposlib's `BaseEnv` (directly, or through another class of the same
  file that does). Its name is the class's `name` attribute (atroposlib's), else the class name.
- `[environment] name` selects one by that name; a name ending in `.py` that no class is called names a file of the
  project instead (relative to the project root), which must hold exactly one environment.
- The built-in environment's names (BUILTIN) always select it: a folder class called so (Atropos' gsm8k_server.py
  says `name = "gsm8k"`) is listed, and selected, by its file's path, so a file the config does not select never
  breaks the config.
- What the selected file imports is checked against the environment image by environments_requirements.
- Files are read as Python reads them (UTF-8, or the encoding a `coding:` line declares); the selected file must
  also load as the service loads it: as a top-level module, so no relative import.
"""

from __future__ import annotations

import ast
import errno
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from hermes_stack.errors import Problem, near_miss
from hermes_stack.textfile import decode_source

FOLDER = "environments"
BUILTIN_FILE = "hermes_stack/environment/env.py"
# Where the project is in the containers (compose.base.yml mounts environments/ at /app/environments).
CONTAINER_ROOT = "/app"

# Files above this size are not parsed. Every command that lists or checks environments parses the whole folder
# (validate, `environments`, each MCP tool), and ast needs ~0.3 s and ~100 MB per MB of source: a 74 MB data module
# took minutes. Hand-written environment files are tens of KB, so a bigger one is data, which a .json/.jsonl file
# read at setup() (or a package folder, which is not parsed) holds as well.
MAX_SCAN_BYTES = 1_000_000


@dataclass(frozen=True)
class EnvironmentInfo:
    name: str
    class_name: str
    file: str  # relative to the project root
    description: str
    builtin: bool = False
    line: int = 0
    # atroposlib's abstract methods the class and its bases of the same file leave undefined: atroposlib cannot
    # create it (TypeError at the environment's start). Empty when they are defined or when a base lies elsewhere.
    abstract: tuple[str, ...] = ()
    bases: tuple[str, ...] = ()  # the names of its bases, as written in the file


# The built-in environment serves `[environment] dataset` (gsm8k, offline-arith, a JSONL file). "gsm8k" is the name
# the seed's config files give it; "hermes-math" is its class's atroposlib `name`; "gsm8k_tinker" is the blog's name for
# it (its config files, pasted as they are, must keep working: tests/unit/test_blog_files.py).
BUILTIN: tuple[EnvironmentInfo, ...] = tuple(
    EnvironmentInfo(name, "HermesMathEnv", BUILTIN_FILE,
                    "The built-in math environment: serves [environment] dataset (gsm8k, offline-arith or a "
                    "gsm8k-shaped JSONL file), scored by the rule reward and optionally a judge.", builtin=True)
    for name in ("gsm8k", "hermes-math", "gsm8k_tinker"))
BUILTIN_NAMES = frozenset(env.name for env in BUILTIN)


SYNTAX_FIX = ("a file that Python can parse", "fix the syntax error")


@dataclass(frozen=True)
class FileScan:
    """One file of the folder: its environments, or why it could not be read."""

    file: str
    environments: tuple[EnvironmentInfo, ...] = ()
    error: str | None = None  # "syntax error at <file>:<line>: <msg>", "<file> cannot be read (…)", …
    imports: tuple[tuple[str, int], ...] = ()  # (top-level module, line), guarded imports left out
    fix: tuple[str, str] = SYNTAX_FIX  # (expected, hint) for `error`
    # `error` in a few words ("a syntax error (invalid syntax)") and its line, for a file the selected one imports;
    # blocks_import False when Python imports the file all the same (one too large to scan here).
    error_what: str = ""
    error_line: int = 0
    blocks_import: bool = True
    # Read here, but the environment service could not import it (a byte Python refuses, a relative import):
    # refused when the file is selected, one Problem each.
    problems: tuple[Problem, ...] = ()
    # (module, name, line) of each `from module import name` the service runs (not guarded, not relative, not *).
    from_names: tuple[tuple[str, str, int], ...] = ()

    @property
    def selectable(self) -> tuple[EnvironmentInfo, ...]:
        """Its environments without the shared bases: a class that leaves atroposlib's abstract methods undefined
        and that another environment of the file derives from (`ArithBase(BaseEnv)` under `Layered(ArithBase)`) is
        a building block, not one to run; it was listed, and selecting the file by its path was refused as
        defining two environments."""
        shared = {base for env in self.environments for base in env.bases}
        return tuple(env for env in self.environments if not (env.abstract and env.class_name in shared))


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


def _text(value: ast.expr | None) -> str | None:
    """The string a value node always is: a literal, or an f-string without placeholders (f'mine' is 'mine')."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.JoinedStr) and all(isinstance(part, ast.Constant) for part in value.values):
        return "".join(part.value for part in value.values)
    return None


def _string_constants(body: list[ast.stmt]) -> dict[str, str]:
    """NAME = "text" assignments of a body (a module's constants): `name = NAME` in a class reads one."""
    return {name: text for name, value in _assigned(body) if (text := _text(value)) is not None}


def _name_attribute(node: ast.ClassDef, constants: dict[str, str] | None = None) -> str | None:
    for target, value in _assigned(node.body):
        if target != "name":
            continue
        if (text := _text(value)) is not None:
            return text
        if isinstance(value, ast.Name) and value.id in (constants or {}):
            return (constants or {})[value.id]
    return None


# atroposlib 0.4.0's BaseEnv.__abstractmethods__ (a test compares them): read from source, so validate need not import
# atroposlib (about a second).
BASE_ENV_ABSTRACT = ("evaluate", "get_next_item")
# What BaseEnv does define, as a body that raises NotImplementedError: the class is created, and the service stops at
# its start ("Setup method must be implemented in subclass") or at its first rollout. collect_trajectories' default
# calls collect_trajectory, so one of the two is enough.
BASE_ENV_STUBS = ("setup",)
BASE_ENV_ONE_OF = ("collect_trajectories", "collect_trajectory")


def _defined(node: ast.ClassDef) -> set[str]:
    """Names a class body binds, however: methods, assignments (tuple targets, walrus), imports, loop targets, match
    captures, in nested blocks too; not inside its methods. Binding more than it does only judges less."""
    names: set[str] = set()
    todo: list[ast.AST] = list(node.body)
    while todo:
        item = todo.pop()
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
            continue
        if isinstance(item, ast.Lambda):
            continue
        if isinstance(item, ast.Name) and isinstance(item.ctx, ast.Store):
            names.add(item.id)
        elif isinstance(item, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in item.names}
        elif isinstance(item, (ast.MatchAs, ast.MatchStar)) and item.name:
            names.add(item.name)
        todo += ast.iter_child_nodes(item)
    return names


def _patched_classes(tree: ast.Module) -> set[str]:
    """Names whose attributes the file sets from outside the class (`E.setup = f`, `setattr(E, ...)`)."""
    out = set()
    for item in ast.walk(tree):
        if isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store) and isinstance(item.value, ast.Name):
            out.add(item.value.id)
        elif (isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and item.func.id == "setattr"
              and item.args and isinstance(item.args[0], ast.Name)):
            out.add(item.args[0].id)
    return out


def _unimplemented(name: str, classes: dict[str, ast.ClassDef], base_env: set[str],
                   patched: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """BASE_ENV_ABSTRACT left undefined by class `name` and its bases, when every base is atroposlib's BaseEnv or a
    class of this file; () when one is not (an import, a sibling's class: it may define them)."""
    defined: set[str] = set()
    todo, seen = [name], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        node = classes[current]
        # A decorator, a metaclass, a base written as an expression (Mixin[str], make_base()), an attribute set
        # from outside (E.setup = f) or a base's __init_subclass__ may supply the methods: not judged, as a base from
        # elsewhere is not (a refused valid file is worse than a late error).
        defined |= _defined(node)
        if (node.decorator_list or node.keywords or len(_base_names(node)) != len(node.bases) or current in patched
                or "__init_subclass__" in defined):
            return ()
        for base in _base_names(classes[current]):
            if base in base_env:
                continue
            if base not in classes:
                return ()
            todo.append(base)
    missing = [method for method in (*BASE_ENV_ABSTRACT, *BASE_ENV_STUBS) if method not in defined]
    if not defined & set(BASE_ENV_ONE_OF):
        missing.append(BASE_ENV_ONE_OF[0])
    return tuple(missing)


def config_init_constant(source: str, class_name: str, key: str) -> tuple[object, int] | None:
    """(value, line) of a constant `key=<value>` keyword in a call inside `class_name.config_init` (pure, read with
    ast: `BaseEnvConfig(group_size=4, ...)`), when the file reads `<x>.<key>` (or getattr(x, "<key>")) nowhere
    outside a config_init: code that reads self.config.group_size, in the class or a base of the file, follows the
    stack's value. None when it sets none, not as a constant, or reads it."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    inits = [item for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
             for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
             and item.name == "config_init"]
    inside = {id(n) for init in inits for n in ast.walk(init)}
    for node in ast.walk(tree):
        if id(node) in inside:
            continue
        if (isinstance(node, ast.Attribute) and node.attr == key) or (
                isinstance(node, ast.Constant) and node.value == key):
            return None
    own = next((item for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name
                for item in node.body if item in inits), None)
    if own is None:
        return None
    return next(((kw.value.value, kw.value.lineno) for call in ast.walk(own) if isinstance(call, ast.Call)
                 for kw in call.keywords if kw.arg == key and isinstance(kw.value, ast.Constant)), None)


def _base_env_names(tree: ast.Module, classes: dict[str, ast.ClassDef]) -> set[str]:
    """The names atroposlib's BaseEnv goes by in a file: BaseEnv, or what `import BaseEnv as X` binds; not a class
    of the file's own that is called BaseEnv."""
    names = {"module.BaseEnv"} | (set() if "BaseEnv" in classes else {"BaseEnv"})
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names if alias.name == "BaseEnv"}
    return names


def _sibling_envs(tree: ast.Module, siblings: dict[str, frozenset[str]]) -> set[str]:
    """The names a file binds to environment classes of the folder's other files (`from common_base import
    MathBase as Base`: Base). The service imports the file with environments/ on sys.path, so they resolve there."""
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in siblings
            for alias in node.names if alias.name in siblings[node.module]}


def _guarded(tree: ast.Module) -> set[int]:
    """Line numbers of imports inside `try: ... except ImportError` (optional imports: not required) or
    `if TYPE_CHECKING:` (never run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        optional = isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError", "Exception")
            or h.type is None for h in node.handlers)
        never_run = isinstance(node, ast.If) and "TYPE_CHECKING" in {getattr(node.test, "id", None),
                                                                      getattr(node.test, "attr", None)}
        if not (optional or never_run):
            continue
        for stmt in node.body:
            for inner in ast.walk(stmt):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    lines.add(inner.lineno)
    return lines


def _imports(tree: ast.Module, guarded: set[int]) -> tuple[tuple[str, int], ...]:
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and node.lineno not in guarded:
            out += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.lineno not in guarded:
            out.append((node.module.split(".")[0], node.lineno))
    return tuple(sorted(set(out), key=lambda x: x[1]))


def _relative_imports(tree: ast.Module, guarded: set[int], file: str) -> tuple[Problem, ...]:
    """`from .helpers import x`: the environment service loads the file as a top-level module
    (environment/user_env.py), so Python stops at it ("no known parent package"). Guarded ones are fallbacks."""
    found = sorted((node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0
                    and node.lineno not in guarded), key=lambda node: node.lineno)
    out = []
    for node in found:
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
        absolute = f"from {node.module} import {names}" if node.module else f"import {names}"
        write = f"write `{absolute}`" if node.level == 1 else f"import modules of {FOLDER}/ by name (`{absolute}`)"
        out.append(Problem(f"{file}:{node.lineno}", "import",
                           f"a relative import (from {'.' * node.level}{node.module or ''} import {names})",
                           "an absolute import",
                           f"{write}: the environment service loads the file as a top-level module, with "
                           f"{FOLDER}/ on sys.path, not as part of a package"))
    return tuple(out)


def _unbound_base_env(tree: ast.Module, classes: dict[str, ast.ClassDef], file: str) -> tuple[Problem, ...]:
    """`class X(BaseEnv)` in a file that never imports BaseEnv: the service's import of the file stops at a
    NameError. Not judged with a star import (it may bind the name)."""
    bound: set[str] = set(classes)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if any(alias.name == "*" for alias in node.names):
                return ()
            bound |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            bound |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
    bound |= {name for name, _ in _assigned(tree.body)}
    if "BaseEnv" in bound:
        return ()
    users = [node for node in classes.values() if "BaseEnv" in _base_names(node)]
    return tuple(Problem(f"{file}:{node.lineno}", "class", f"class {node.name}(BaseEnv) without an import of BaseEnv",
                         "BaseEnv imported from atroposlib",
                         "add `from atroposlib.envs.base import BaseEnv` at the top: Python stops at the class "
                         "otherwise (NameError)") for node in users[:1])


def _syntax_error(file: str, exc: SyntaxError) -> FileScan:
    where = f"{file}:{exc.lineno}" if exc.lineno else file  # a few (null bytes, say) have no line: no ":None"
    return FileScan(file, error=f"syntax error at {where}: {exc.msg}", error_what=f"a syntax error ({exc.msg})",
                    error_line=exc.lineno or 0)


def _from_names(tree: ast.Module, guarded: set[int]) -> tuple[tuple[str, str, int], ...]:
    return tuple((node.module, alias.name, node.lineno) for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                 and node.lineno not in guarded for alias in node.names if alias.name != "*")


def scan_source(source: str, file: str, siblings: dict[str, frozenset[str]] | None = None) -> FileScan:
    """The environments one file defines (pure: the text in, the classes out). `siblings`: the environment classes
    of the folder's other files by module name, so a class deriving from one (`from common_base import MathBase`)
    is an environment too (scan_folder)."""
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as exc:
        return _syntax_error(file, exc)
    except (RecursionError, MemoryError):
        # Thousands of chained `+` or nested `-` exhaust the parser (Python cannot compile the file either): one
        # unreadable file must not end every command.
        split = "split the long expression (thousands of chained or nested operations): Python cannot compile it either"
        return FileScan(file, error=f"{file} cannot be read (too deeply nested)",
                        fix=("a file that Python can parse", split))
    except ValueError as exc:  # what compile() says of a source it refuses outright
        return FileScan(file, error=f"{file} cannot be read ({exc})")
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    base_env = _base_env_names(tree, classes)
    bases = base_env | _sibling_envs(tree, siblings or {})
    constants = _string_constants(tree.body)
    envs: set[str] = set()
    changed = True
    while changed:  # a class deriving from one of this file's environments is one too
        changed = False
        for name, node in classes.items():
            if name not in envs and any(b in bases or b in envs for b in _base_names(node)):
                envs.add(name)
                changed = True
    patched = frozenset(_patched_classes(tree))
    found = tuple(
        EnvironmentInfo(_name_attribute(node, constants) or name, name, file,
                        (ast.get_docstring(node) or "").strip(), line=node.lineno,
                        abstract=_unimplemented(name, classes, base_env, patched), bases=tuple(_base_names(node)))
        for name, node in classes.items() if name in envs)
    guarded = _guarded(tree)
    return FileScan(file, found, imports=_imports(tree, guarded),
                    problems=_relative_imports(tree, guarded, file) + _unbound_base_env(tree, classes, file),
                    from_names=_from_names(tree, guarded))


PY_BYTE_HINT = ("save it as UTF-8, or declare its encoding on its first line (# -*- coding: latin-1 -*-): Python "
                "reads source files as UTF-8")


def scan_bytes(data: bytes, file: str, siblings: dict[str, frozenset[str]] | None = None) -> FileScan:
    """scan_source of a file's bytes, decoded as Python decodes them."""
    text = decode_source(data, PY_BYTE_HINT)
    if text.text is None:
        where = f" on line {text.line}" if text.line > 1 else ""
        return FileScan(file, error=f"{file} cannot be read ({text.found}{where})", fix=(text.expected, text.hint),
                        error_line=text.line)
    scan = scan_source(text.text, file, siblings)
    if text.found and scan.error:  # the byte in code, read as U+FFFD: the byte is the cause, not the syntax
        return FileScan(file, error=f"{file} cannot be read ({text.found} on line {text.line})",
                        fix=(text.expected, text.hint), error_line=text.line)
    if text.found:
        # Listed (the rest of the file reads), but Python in the container stops at the byte: refused if selected.
        byte = Problem(f"{file}:{text.line}", "(file)", text.found, text.expected, text.hint)
        scan = replace(scan, problems=(byte, *scan.problems))
    return scan


def _read(path: Path, file: str) -> bytes | FileScan:
    """The file's bytes, or the FileScan saying why they are not scanned (too large, unreadable)."""
    try:
        size = path.stat().st_size
        if size > MAX_SCAN_BYTES:
            limit = f"{MAX_SCAN_BYTES // 1_000_000} MB"
            data_elsewhere = (f"keep data out of {FOLDER}/*.py, which every command parses: a .json or .jsonl file "
                              f"read in setup(), or a package folder ({FOLDER}/mydata/__init__.py), is not parsed")
            return FileScan(file, error=f"{file} is too large to scan ({size / 1e6:.1f} MB, above the {limit} limit)",
                            fix=(f"an environment file under {limit}", data_elsewhere), blocks_import=False)
        return path.read_bytes()
    except OSError as exc:
        return FileScan(file, error=f"cannot read {file}: {exc.strerror}",
                        fix=("a readable file", "check its permissions: the services read it as another user"))


def _scan_path(path: Path, file: str) -> FileScan:
    data = _read(path, file)
    return data if isinstance(data, FileScan) else scan_bytes(data, file)


def folder(project_root: Path) -> Path:
    return Path(project_root) / FOLDER


def scan_folder(project_root: Path) -> list[FileScan]:
    """Every `*.py` file directly in environments/ (sorted), scanned; none when the folder is missing. A class may
    derive from an environment of another file of the folder: the files importing from one are scanned again with
    the others' environment classes until nothing changes (each round resolves one more link of a chain)."""
    root = folder(project_root)
    if not root.is_dir():
        return []
    # Not a file: an editor's lock link (.#my_env.py, dangling), a folder named *.py; neither is an environment.
    paths = [path for path in sorted(root.glob("*.py")) if not path.name.startswith(("_", ".")) and path.is_file()]
    data = {path: _read(path, f"{FOLDER}/{path.name}") for path in paths}  # each file read once
    scans = {path: got if isinstance(got, FileScan) else scan_bytes(got, f"{FOLDER}/{path.name}")
             for path, got in data.items()}
    for _ in paths:
        siblings = {path.stem: frozenset(e.class_name for e in scan.environments) for path, scan in scans.items()}
        again = {path: scan_bytes(data[path], scan.file, siblings) for path, scan in scans.items()
                 if any(module in siblings and module != path.stem for module, _ in scan.imports)}
        if all(again[path].environments == scans[path].environments for path in again):
            break
        scans.update(again)
    return list(scans.values())


def unreadable(project_root: Path) -> list[str]:
    """Why each file of the folder that could not be read was left out ("syntax error at <file>:<line>: …", "<file>
    is too large to scan …"): a listing without them would hide an environment the user wrote."""
    return [scan.error for scan in scan_folder(project_root) if scan.error]


def _listed(env: EnvironmentInfo) -> EnvironmentInfo:
    """A folder environment as listed: under its file's path when its name is a built-in's (the bare name selects
    the built-in one, the path selects the file)."""
    return replace(env, name=env.file) if env.name in BUILTIN_NAMES else env


def list_environments(project_root: Path) -> list[EnvironmentInfo]:
    """The built-in environments, then the folder's (files that do not parse are left out: `validate` names them),
    each under the name that selects it."""
    return [*BUILTIN, *(_listed(env) for scan in scan_folder(project_root) for env in scan.selectable)]


def environment_names(project_root: Path) -> list[str]:
    return list(dict.fromkeys(env.name for env in list_environments(project_root)))


# ---------------------------------------------------------------- selecting one


@dataclass(frozen=True)
class Selection:
    """What `[environment] name` selects: an environment, or the one-line reason it selects none."""

    environment: EnvironmentInfo | None
    problem: tuple[str, str, str] | None = None  # (found, expected, hint)
    imports: tuple[tuple[str, int], ...] = ()
    problems: tuple[Problem, ...] = ()  # why the environment service could not import the file (FileScan.problems)
    # (file, module, line) of every import the service runs to load it: its file's, and those of the folder's files
    # it imports, transitively (the file's folder is on sys.path, so `import helpers` runs helpers.py).
    reached_imports: tuple[tuple[str, str, int], ...] = ()
    # (file, module, name, line) of every `from module import name` among those.
    reached_names: tuple[tuple[str, str, str, int], ...] = ()
    # The built-in selected by a name that folder environments also have (listed by their paths): validate says so.
    shadowed: tuple[EnvironmentInfo, ...] = ()


def _scan_file(project_root: Path, relative: str) -> FileScan | None:
    path = Path(project_root) / relative
    if not path.is_file():
        return None
    return _scan_path(path, relative)


def _resolved(path: Path) -> Path:
    """The path with its links followed as far as they lead (a loop: as written, made absolute)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # Python < 3.13 says "Symlink loop" with a RuntimeError
        return Path(os.path.abspath(path))


def _link_refusal(project_root: Path, file: str, name: str) -> Selection | None:
    """Why `file` (a path of environments/, project-relative), a link, leads nowhere in the containers, which see
    only the folder (at /app/environments): a link out of it, or one written as this machine's absolute path. None
    when it is no link or one they follow (relative, within the folder)."""
    path = Path(project_root) / file
    if not path.is_symlink():
        return None
    inside_root = _resolved(folder(project_root))
    written, resolved = os.readlink(path), _resolved(path)
    if not resolved.is_relative_to(inside_root):
        copy = f"cp --remove-destination {resolved} {file}"
        return Selection(None, (f"{name!r} ({file}, a link to {written}, outside {FOLDER}/)", f"a file in {FOLDER}/",
                                (f"put the file itself in {FOLDER}/ in place of the link ({copy}): only that folder "
                                "reaches the containers, where the link leads nowhere")))
    hop = path
    for _ in range(40):  # each link of a chain: one absolute target is enough to lead nowhere there
        if not hop.is_symlink():
            return None
        target = os.readlink(hop)
        if os.path.isabs(target):
            relative = f"{FOLDER}/{resolved.relative_to(inside_root).as_posix()}"
            return Selection(None, (f"{name!r} ({file}, a link to the absolute path {target})",
                                    f"a file in {FOLDER}/, or a relative link within it",
                                    (f"link it relative (ln -sfr {relative} {file}): in the containers the project is "
                                    f"at {CONTAINER_ROOT}, so an absolute path of this machine's leads nowhere")))
        hop = hop.parent / target
    return None


def _select_file(project_root: Path, name: str) -> Selection | None:
    """Why a `.py` name selects no file that the services will find, or None when it names one (read next).

    The services run with the project at /app (the folder mounted at /app/environments), on Linux: the path must be
    relative to the project root, with `/`, and lead to a real file inside environments/."""
    root = folder(project_root)
    inside_root = _resolved(root)
    if "\\" in name:  # Windows' separator: on Linux a plain character of one file name
        fixed = name.replace("\\", "/")
        if re.match(r"^([A-Za-z]:)?/", fixed):  # C:\proj\environments\x.py: no drive in the containers
            fixed = f"{FOLDER}/{fixed.rsplit('/', 1)[-1]}"
        slash = "separate folders with /: the services read the path on Linux, where \\ is part of a file name"
        return Selection(None, (f"{name!r} (a Windows path)", f"{fixed!r}, a path from the project root with /", slash))
    path = Path(project_root) / name
    if Path(name).is_absolute():
        for here, there in ((Path(os.path.normpath(name)), Path(os.path.normpath(root.absolute()))),
                            (_resolved(Path(name)), inside_root)):
            if here.is_relative_to(there):
                relative = f"{FOLDER}/{here.relative_to(there).as_posix()}"
                there_not = (f"write it relative: in the containers the project is at {CONTAINER_ROOT}, so a path "
                             "of this machine's does not exist there")
                return Selection(None, (f"{name!r} (an absolute path)", f"{relative!r}, relative to the project root",
                                        there_not))
    try:
        path.resolve(strict=True)
        exists = True
    except FileNotFoundError:
        exists = False
    except (RuntimeError, OSError) as exc:  # Python < 3.13: RuntimeError "Symlink loop"; later: ELOOP
        if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
            exists = False  # a file where a folder should be (not_a_dir/x.py): "no such file" below
        else:
            relink = f"point the link at the file (ls -l {name} shows where it leads), or put the file itself in its place"
            return Selection(None, (f"{name!r} (a symlink that loops)", "a BaseEnv file", relink))
    if not exists and path.is_symlink():  # not "outside environments/": where it points is nowhere
        relink = (f"point the link at an existing file in {FOLDER}/, or put the file itself there: only that folder "
                  "reaches the containers")
        return Selection(None, (f"{name!r} (a link to {os.readlink(path)}, a file that does not exist)",
                                "a BaseEnv file", relink))
    lexical = Path(os.path.normpath(name)).as_posix()
    if lexical.startswith(f"{FOLDER}/") and (link := _link_refusal(project_root, lexical, name)) is not None:
        return link  # said as when the environment is selected by its name
    if not _resolved(path).is_relative_to(inside_root):  # only the environments folder is mounted into the services
        bare = root / name
        if not exists and not Path(name).is_absolute() and bare.is_file() and _resolved(bare).is_relative_to(inside_root):
            # `upstream_sums.py` for environments/upstream_sums.py: the path is read from the project root.
            relative = f"{FOLDER}/{Path(os.path.normpath(name)).as_posix()}"
            envs = _scan_path(bare, relative).environments
            by_name = (f", or use the environment's name {envs[0].name!r}"
                       if len(envs) == 1 and envs[0].name not in BUILTIN_NAMES else "")  # a built-in's: not the file
            return Selection(None, (f"{name!r} (no such file in the project root; {relative} is one)", repr(relative),
                                    f"write the path from the project root{by_name}"))
        return Selection(None, (f"{name!r} (outside {FOLDER}/)", f"a file in {FOLDER}/, e.g. {FOLDER}/my_env.py",
                                f"move it into {root}: only that folder reaches the containers"))
    return None


def users_environment(project_root: Path, name: str) -> EnvironmentInfo | None:
    """The environment `name` selects when it is a file of the user's (not the built-in one), else None."""
    chosen = select(project_root, name).environment
    return None if chosen is None or chosen.builtin else chosen


def select(project_root: Path, name: str) -> Selection:
    """The environment `name` selects in this project. Pure of side effects; reads the folder's files as text."""
    root = folder(project_root)
    if "\x00" in name:  # every os call with it raises ValueError ("embedded null byte")
        return Selection(None, (f"{name!r} (a NUL character)", f"an environment's name or a path of {FOLDER}/",
                                "remove the \\u0000 from [environment] name"))
    if name in BUILTIN_NAMES:
        # The bare name is the built-in's: a folder class called so is selected by its path (listed so), and is no
        # reason to refuse a config that selects the built-in one (validate only points it out).
        shadowed = tuple(e for scan in scan_folder(project_root) for e in scan.environments if e.name == name)
        return Selection(next(e for e in BUILTIN if e.name == name), shadowed=shadowed)
    scans = scan_folder(project_root)  # once: the names below come from it, as environment_names would make them
    matches = [(s, env) for s in scans for env in s.environments if env.name == name]
    if name.endswith(".py") and matches:
        # A class called `sums.py` is listed so: its name selects it. Refused only when the same text is also the
        # path of another file's environment (which one the user means is unknown).
        at_path = {s.file: s for s in scans}.get(Path(os.path.normpath(name)).as_posix())
        if at_path is not None and at_path.environments and any(s.file != at_path.file for s, _ in matches):
            named = ", ".join(f"{env.file}:{env.line} ({env.class_name})" for _, env in matches)
            there = ", ".join(env.class_name for env in at_path.environments)
            return Selection(None, (f"{name!r}, the name of {named} and the path of {at_path.file} ({there})",
                                    "one environment with that name",
                                    "rename the class's `name` (a name ending in .py reads as a path)"))
    elif name.endswith(".py"):
        refused = _select_file(project_root, name)
        if refused is not None:
            return refused
        in_folder = {scan.file: scan for scan in scans}
        scan = in_folder.get(Path(os.path.normpath(name)).as_posix()) or _scan_file(project_root, name)
        if scan is None:
            return Selection(None, (repr(name) + f" (no such file: {Path(project_root) / name})",
                                    f"a BaseEnv file of the project, e.g. {FOLDER}/my_env.py",
                                    f"put the file in {root} or name an environment: "
                                    + ", ".join(environment_names(project_root))))
        return _one_of(scan, name, list(in_folder.values()))
    names = list(dict.fromkeys([e.name for e in BUILTIN]
                               + [_listed(env).name for s in scans for env in s.environments]))
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
    if len(matches) > 1:
        where = ", ".join(f"{env.file}:{env.line} ({env.class_name})" for _, env in matches)
        return Selection(None, (f"{name!r}, defined {len(matches)} times: {where}",
                                "one environment with that name", "rename one of them (its `name` attribute)"))
    if matches:
        scan, env = matches[0]
        # By name as by path: a link the containers cannot follow is refused the same way (_select_file).
        return _link_refusal(project_root, env.file, name) or _chosen(scan, env, scans)
    if broken:
        expected, fix = broken[0].fix
        return Selection(None, (f"{name!r} (not found; {broken[0].error})", expected,
                                f"{fix}; the environment may be defined in that file"))
    empty = [s.file for s in scans if not s.environments]
    hint = "the names are the classes' `name` attributes"
    if empty:
        hint += "; " + ", ".join(empty) + (" defines" if len(empty) == 1 else " define") + " no BaseEnv subclass"
    return Selection(None, (repr(name), "one of: " + ", ".join(names), hint))


def _one_of(scan: FileScan, name: str, scans: list[FileScan]) -> Selection:
    if scan.error:
        return Selection(None, (f"{name!r} ({scan.error})", *scan.fix))
    if not scan.environments:
        return Selection(None, (f"{name!r} (the file defines no BaseEnv subclass)",
                                "a file with one class deriving from atroposlib's BaseEnv",
                                "e.g. `class MyEnv(BaseEnv): name = \"my-env\"`"))
    envs = scan.selectable or scan.environments  # only shared bases: the first one's missing methods are said
    if len(envs) > 1:
        names = ", ".join(f"{e.name} ({e.class_name}, line {e.line})" for e in envs)
        hint = "select one by its name instead of the file"
        builtin_named = [e.name for e in envs if e.name in BUILTIN_NAMES]
        if builtin_named:  # its name selects the built-in one: only a name of its own selects it
            hint += (f"; {', '.join(builtin_named)} is the built-in environment's name: give that class a `name` of "
                     "its own to select it")
        return Selection(None, (f"{name!r} (the file defines {len(envs)} environments: {names})",
                                "a file with one environment", hint))
    return _chosen(scan, envs[0], scans)


def module_entries(directory: Path, relative: str = FOLDER) -> dict[str, str]:
    """The modules a folder on sys.path provides, by name: its `*.py` files and its package folders (with an
    __init__.py; a folder without one never wins over an installed package), as paths under `relative` (the
    folder's path from the project root)."""
    if not directory.is_dir():
        return {}
    out = {p.name: f"{relative}/{p.name}/" for p in sorted(directory.iterdir()) if (p / "__init__.py").is_file()}
    out.update({p.stem: f"{relative}/{p.name}" for p in sorted(directory.glob("*.py")) if p.is_file()})
    return out


def _reached(scan: FileScan, scans: list[FileScan]) -> tuple[list[tuple[str, str, int]], list[FileScan],
                                                          list[tuple[FileScan, str, int]]]:
    """(file, module, line) of `scan`'s imports and, following the ones that name another file of the folder, of
    that file's, and so on (each file once); the files so reached, `scan` first; and each imported file of the
    folder with its first import (file, line)."""
    in_folder = Path(scan.file).parent.as_posix() == FOLDER  # else its own folder is on sys.path, not this one
    by_module = {Path(s.file).stem: s for s in scans if in_folder and Path(s.file).parent.as_posix() == FOLDER}
    out: list[tuple[str, str, int]] = []
    reached: list[FileScan] = []
    imported: dict[str, tuple[FileScan, str, int]] = {}
    todo, seen = [scan], set()
    while todo:
        current = todo.pop(0)
        if current.file in seen:
            continue
        seen.add(current.file)
        reached.append(current)
        for module, line in current.imports:
            out.append((current.file, module, line))
            if module in by_module:
                todo.append(by_module[module])
                imported.setdefault(by_module[module].file, (by_module[module], current.file, line))
    return out, reached, [v for k, v in imported.items() if k != scan.file]


def _imported_problems(imported: list[tuple[FileScan, str, int]]) -> tuple[Problem, ...]:
    """What stops Python in a file of the folder that the selected one imports (the service runs it too): its
    syntax error or unreadable text, or its own problems (a relative import, a byte Python refuses), each as one
    Problem at that file's line, saying who imports it."""
    out: list[Problem] = []
    for scan, importer, line in imported:
        by = f"in a module that {importer}:{line} imports"
        if scan.error and scan.blocks_import:
            where = f"{scan.file}:{scan.error_line}" if scan.error_line else scan.file
            expected, fix = scan.fix
            out.append(Problem(where, "import", f"{scan.error_what or scan.error}, {by}", expected,
                               f"{fix}: the environment service runs {scan.file} when it loads the environment"))
        out += [replace(problem, found=f"{problem.found}, {by}") for problem in scan.problems]
    return tuple(out)


def _chosen(scan: FileScan, env: EnvironmentInfo, scans: list[FileScan] = ()) -> Selection:
    """`env` of `scan` selected, with what would stop the service from loading it: the file's problems, and
    atroposlib's abstract methods it leaves undefined. `scans`: the folder's files, to follow its imports of them."""
    problems = scan.problems
    if env.abstract:
        missing = ", ".join(env.abstract)
        arguments = {"evaluate": ", *args, **kwargs", "collect_trajectories": ", item"}
        stubs = "; ".join(f"async def {m}(self{arguments.get(m, '')}): ..." for m in env.abstract)
        required = ", ".join((*BASE_ENV_ABSTRACT, *BASE_ENV_STUBS)) + " and " + " or ".join(BASE_ENV_ONE_OF)
        problems = (*problems, Problem(f"{env.file}:{env.line}", "class", f"{env.class_name} without {missing}",
                                       f"a class defining what atroposlib's BaseEnv leaves to it ({required})",
                                       f"define them ({stubs}): atroposlib cannot create the class without the first "
                                       "two, and BaseEnv's own setup and collect_trajectory raise "
                                       "NotImplementedError, so the environment would stop at its start"))
    reached_imports, reached, imported = _reached(scan, [*scans, scan])
    return Selection(env, imports=scan.imports, problems=problems + _imported_problems(imported),
                     reached_imports=tuple(reached_imports),
                     reached_names=tuple((s.file, module, name, line) for s in reached
                                         for module, name, line in s.from_names))

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
  service's own start. A listed requirement that is not installed here has unknown modules (scikit-learn's is
  sklearn): an import it may provide is not refused, only named as unchecked.
- Files are read as Python reads them (UTF-8, or the encoding a `coding:` line declares); the selected file must
  also load as the service loads it: as a top-level module, so no relative import.
"""

from __future__ import annotations

import ast
import errno
import functools
import io
import os
import re
import sys
import tokenize
from dataclasses import dataclass, replace
from pathlib import Path

from hermes_stack.errors import Problem, near_miss
from hermes_stack.textfile import BOM, UTF_BOMS

FOLDER = "environments"
REQUIREMENTS = f"{FOLDER}/requirements.txt"
LOCK = "requirements.lock"
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


# The built-in environment serves `[environment] dataset` (gsm8k, offline-arith, a JSONL file). "gsm8k" is the name
# the seed's config files give it; "hermes-math" is its class's atroposlib `name`; "gsm8k_tinker" is the blog's name for
# it (its config files, pasted as they are, must keep working: tests/unit/test_blog_files.py).
BUILTIN: tuple[EnvironmentInfo, ...] = tuple(
    EnvironmentInfo(name, "HermesMathEnv", BUILTIN_FILE,
                    "The built-in math environment: serves [environment] dataset (gsm8k, offline-arith or a "
                    "gsm8k-shaped JSONL file), scored by the rule reward and optionally a judge.", builtin=True)
    for name in ("gsm8k", "hermes-math", "gsm8k_tinker"))


SYNTAX_FIX = ("a file that Python can parse", "fix the syntax error")


@dataclass(frozen=True)
class FileScan:
    """One file of the folder: its environments, or why it could not be read."""

    file: str
    environments: tuple[EnvironmentInfo, ...] = ()
    error: str | None = None  # "syntax error at <file>:<line>: <msg>", "<file> cannot be read (…)", …
    imports: tuple[tuple[str, int], ...] = ()  # (top-level module, line), guarded imports left out
    fix: tuple[str, str] = SYNTAX_FIX  # (expected, hint) for `error`
    # Read here, but the environment service could not import it (a byte Python refuses, a relative import):
    # refused when the file is selected, one Problem each.
    problems: tuple[Problem, ...] = ()


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


def _imports(tree: ast.Module) -> tuple[tuple[str, int], ...]:
    guarded = _guarded(tree)
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and node.lineno not in guarded:
            out += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.lineno not in guarded:
            out.append((node.module.split(".")[0], node.lineno))
    return tuple(sorted(set(out), key=lambda x: x[1]))


def _relative_imports(tree: ast.Module, file: str) -> tuple[Problem, ...]:
    """`from .helpers import x`: the environment service loads the file as a top-level module
    (environment/user_env.py), so Python stops at it ("no known parent package"). Guarded ones are fallbacks."""
    guarded = _guarded(tree)
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


def _syntax_error(file: str, exc: SyntaxError) -> str:
    where = f"{file}:{exc.lineno}" if exc.lineno else file  # a few (null bytes, say) have no line: no ":None"
    return f"syntax error at {where}: {exc.msg}"


def scan_source(source: str, file: str) -> FileScan:
    """The environments one file defines (pure: the text in, the classes out)."""
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as exc:
        return FileScan(file, error=_syntax_error(file, exc))
    except (RecursionError, MemoryError):
        # Thousands of chained `+` or nested `-` exhaust the parser (Python cannot compile the file either): one
        # unreadable file must not end every command.
        split = "split the long expression (thousands of chained or nested operations): Python cannot compile it either"
        return FileScan(file, error=f"{file} cannot be read (too deeply nested)",
                        fix=("a file that Python can parse", split))
    except ValueError as exc:  # what compile() says of a source it refuses outright
        return FileScan(file, error=f"{file} cannot be read ({exc})")
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
    return FileScan(file, found, imports=_imports(tree), problems=_relative_imports(tree, file))


# ---------------------------------------------------------------- bytes to text, as Python and pip read them


@dataclass(frozen=True)
class _Text:
    text: str | None  # None: not text this reader can use (UTF-16, NUL bytes, an unusable coding line)
    line: int = 0
    found: str = ""  # what is wrong; "" when nothing is
    expected: str = ""
    hint: str = ""


def _looks_utf16(data: bytes) -> bool:
    """UTF-16 without a byte-order mark: mostly-ASCII text has a NUL in every other byte."""
    if len(data) < 4:
        return False
    odd, even = data[1::2], data[0::2]
    return max(odd.count(0) / len(odd), even.count(0) / len(even)) > 0.8


def _decode(data: bytes, byte_hint: str) -> _Text:
    """Bytes -> text as Python reads a source file and pip a requirements file: a UTF-8 byte-order mark skipped, a
    `coding:` line (PEP 263) honoured, else UTF-8. A byte the encoding refuses gives the text with U+FFFD in its place
    and the byte's line (the rest of the file can still be read); UTF-16, a NUL byte or an unknown encoding give no
    text."""
    wide = next((label for mark, label in UTF_BOMS if data.startswith(mark)), None)
    if wide is None and b"\x00" in data and _looks_utf16(data):
        wide = "UTF-16"
    if wide is not None:  # Windows' "Unicode", PowerShell 5's `>`
        return _Text(None, 1, f"{wide} text", "UTF-8 text",
                     f'save it as "UTF-8" (not "Unicode"); `iconv -f {wide} -t UTF-8` converts it')
    if b"\x00" in data:
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        return _Text(None, line, "a NUL byte (0x00)", "text without NUL bytes",
                     "the file is binary or damaged: save it again as UTF-8 text")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if "invalid or missing encoding declaration" not in str(exc):  # that one: a non-UTF-8 byte, named below
            return _Text(None, 1, f"a coding line Python cannot use: {exc.msg}", "UTF-8 text",
                         "remove the `coding:` line and save the file as UTF-8")
        encoding = "utf-8"
    start = len(BOM) if data.startswith(BOM) else 0
    encoding = "utf-8" if encoding == "utf-8-sig" else encoding
    try:
        return _Text(data[start:].decode(encoding))
    except UnicodeDecodeError as exc:
        at = start + exc.start
        label = "UTF-8" if encoding == "utf-8" else encoding
        return _Text(data[start:].decode(encoding, errors="replace"), data.count(b"\n", 0, at) + 1,
                     f"a byte that is not {label} (0x{data[at]:02x})", f"{label} text", byte_hint)


PY_BYTE_HINT = ("save it as UTF-8, or declare its encoding on its first line (# -*- coding: latin-1 -*-): Python "
                "reads source files as UTF-8")


def scan_bytes(data: bytes, file: str) -> FileScan:
    """scan_source of a file's bytes, decoded as Python decodes them."""
    text = _decode(data, PY_BYTE_HINT)
    if text.text is None:
        where = f" on line {text.line}" if text.line > 1 else ""
        return FileScan(file, error=f"{file} cannot be read ({text.found}{where})", fix=(text.expected, text.hint))
    scan = scan_source(text.text, file)
    if text.found and scan.error:  # the byte in code, read as U+FFFD: the byte is the cause, not the syntax
        return FileScan(file, error=f"{file} cannot be read ({text.found} on line {text.line})",
                        fix=(text.expected, text.hint))
    if text.found:
        # Listed (the rest of the file reads), but Python in the container stops at the byte: refused if selected.
        byte = Problem(f"{file}:{text.line}", "(file)", text.found, text.expected, text.hint)
        scan = replace(scan, problems=(byte, *scan.problems))
    return scan


def _scan_path(path: Path, file: str) -> FileScan:
    try:
        size = path.stat().st_size
        if size > MAX_SCAN_BYTES:
            limit = f"{MAX_SCAN_BYTES // 1_000_000} MB"
            data_elsewhere = (f"keep data out of {FOLDER}/*.py, which every command parses: a .json or .jsonl file "
                              f"read in setup(), or a package folder ({FOLDER}/mydata/__init__.py), is not parsed")
            return FileScan(file, error=f"{file} is too large to scan ({size / 1e6:.1f} MB, above the {limit} limit)",
                            fix=(f"an environment file under {limit}", data_elsewhere))
        data = path.read_bytes()
    except OSError as exc:
        return FileScan(file, error=f"cannot read {file}: {exc.strerror}",
                        fix=("a readable file", "check its permissions: the services read it as another user"))
    return scan_bytes(data, file)


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
        scans.append(_scan_path(path, f"{FOLDER}/{path.name}"))
    return scans


def unreadable(project_root: Path) -> list[str]:
    """Why each file of the folder that could not be read was left out ("syntax error at <file>:<line>: …", "<file>
    is too large to scan …"): a listing without them would hide an environment the user wrote."""
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
    problems: tuple[Problem, ...] = ()  # why the environment service could not import the file (FileScan.problems)


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
    if not _resolved(path).is_relative_to(inside_root):  # only the environments folder is mounted into the services
        bare = root / name
        if not exists and not Path(name).is_absolute() and bare.is_file() and _resolved(bare).is_relative_to(inside_root):
            # `upstream_sums.py` for environments/upstream_sums.py: the path is read from the project root.
            relative = f"{FOLDER}/{Path(os.path.normpath(name)).as_posix()}"
            envs = _scan_path(bare, relative).environments
            by_name = f", or use the environment's name {envs[0].name!r}" if len(envs) == 1 else ""
            return Selection(None, (f"{name!r} (no such file in the project root; {relative} is one)", repr(relative),
                                    f"write the path from the project root{by_name}"))
        return Selection(None, (f"{name!r} (outside {FOLDER}/)", f"a file in {FOLDER}/, e.g. {FOLDER}/my_env.py",
                                f"move it into {root}: only that folder reaches the containers"))
    return None


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
        refused = _select_file(project_root, name)
        if refused is not None:
            return refused
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
        return Selection(env, imports=scan.imports, problems=scan.problems)
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
    if len(scan.environments) > 1:
        names = ", ".join(f"{e.name} ({e.class_name}, line {e.line})" for e in scan.environments)
        return Selection(None, (f"{name!r} (the file defines {len(scan.environments)} environments: {names})",
                                "a file with one environment", "select one by its name instead of the file"))
    return Selection(scan.environments[0], imports=scan.imports, problems=scan.problems)


# ---------------------------------------------------------------- what the environment image can import


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
    # pip reads it as Python reads source (a BOM skipped, a coding line honoured), else with the image's UTF-8 locale.
    text = _decode(data, "save it as UTF-8: pip reads it as UTF-8 in the image")
    if text.found:
        return RequirementsFile(problem=Problem(f"{REQUIREMENTS}:{text.line}", "(file)", text.found, text.expected,
                                                text.hint))
    out = []
    for number, raw in enumerate(text.text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line:
            out.append((number, line))
    return RequirementsFile(tuple(out))


def requirement_lines(project_root: Path) -> list[tuple[int, str]]:
    """(line number, requirement) of environments/requirements.txt, comments and blank lines left out (none when the
    file cannot be read: requirement_problems says why)."""
    return list(read_requirements(project_root).lines)


PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+$")
UNPINNED_HINT = ("pin every package and each of its dependencies, as requirements.lock does; the file installs with "
                 "--no-deps from the wheelhouse")


def unpinned_requirements(project_root: Path) -> list[tuple[int, str]]:
    """Lines of environments/requirements.txt that are not `name==version`: the file is installed like our lock
    (--no-deps, every package pinned), so a range or an option line would make the image's contents float."""
    return [(n, text) for n, text in requirement_lines(project_root) if not PINNED.match(text)]


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


def image_modules(project_root: Path) -> tuple[frozenset[str], tuple[str, ...]] | None:
    """(top-level modules importable in the environment image, the requirements whose modules are unknown here),
    or None when the image's contents cannot be read here (no atroposlib; requirements.txt not text)."""
    closure = _installed_closure(IMAGE_ROOTS)
    reqs = read_requirements(project_root)
    if closure is None or reqs.problem is not None:
        return None
    by_dist = _modules_by_distribution()
    modules = set(sys.stdlib_module_names) | {"hermes_stack"}
    for dist in closure:
        modules |= by_dist.get(dist, set())
    unknown = []
    for _, text in reqs.lines:
        name = _requirement_name(text)
        if name in by_dist:  # installed here too: its modules, read from its metadata
            modules |= by_dist[name]
        else:  # its name is a guess at its module (sympy), which misses the others (scikit-learn: sklearn)
            modules.add(name.replace("-", "_"))
            unknown.append(text)
    root = folder(project_root)
    if root.is_dir():
        modules |= {p.stem for p in root.glob("*.py")} | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    return frozenset(modules), tuple(unknown)


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


def missing_imports(project_root: Path, imports: tuple[tuple[str, int], ...]) -> list[tuple[str, int]] | None:
    """(module, line) of each import the environment image lacks; None when the image's contents are unknown here."""
    check = check_imports(project_root, imports)
    return None if check is None else list(check.missing)

"""Load config_<algo>.toml + settings_<algo>.json into a StackConfig, reporting every problem at once.

Syntax errors name file:line:column; pydantic errors become Problems (unknown key -> "did you mean"; wrong type ->
found/expected). Then the profile's overrides are applied and every rule in rules.py runs.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
import tomllib
import unicodedata
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from hermes_stack.algos import algo_problem
from hermes_stack.config import profiles, rules
from hermes_stack.config.models import AlgoConfig, Settings
from hermes_stack.errors import InputError, Problem
from hermes_stack.keyfile import KeyFile
from hermes_stack.modelcore import catalog
from hermes_stack.textfile import decode_text, not_regular, path_unusable

if TYPE_CHECKING:
    from hermes_stack.config.memory import GpuSplit


@dataclass(frozen=True)
class StackConfig:
    algo: str
    config: AlgoConfig  # resolved: the profile's overrides applied
    settings: Settings
    config_path: Path
    settings_path: Path
    profile: str
    overrides: dict[str, object] = field(default_factory=dict)
    # The files as written, before the profile's overrides.
    config_as_written: AlgoConfig | None = None
    settings_as_written: Settings | None = None
    keyfile: KeyFile | None = None
    warnings: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()
    gpu_memory_gib: float | None = None  # the GPU the memory split is planned for (gpu profile)
    model: str | None = None  # the catalog model selected (--model, HERMES_MODEL or inference.model_path), if any

    @cached_property
    def gpu_split(self) -> GpuSplit | None:
        """The GPU memory split this stack runs with (config/memory.py), computed once: `validate` prints it, `up`
        hands its SGLang fraction and micro-batch size to the services. None off the gpu profile, without a GPU size,
        or for a model whose shape is unknown."""
        from hermes_stack.config import memory

        if self.profile != "gpu" or self.gpu_memory_gib is None:
            return None
        return memory.split_for(self.config, self.settings, self.gpu_memory_gib, self.config_path.parent.parent)


def paths(algo: str, config_dir: Path) -> tuple[Path, Path]:
    return config_dir / f"config_{algo}.toml", config_dir / f"settings_{algo}.json"


def check_model(model: str | None) -> None:
    if model is not None and not catalog.is_catalog_name(model):
        raise InputError(Problem("command line", "--model", repr(model), f"one of {', '.join(catalog.names())}",
                                 "another model: set inference.model_path in settings_<algo>.json to a local model "
                                 "directory (or a hub id on GPU)"))


def check_algo(algo: str) -> None:
    problem = algo_problem(algo)
    if problem is not None:
        raise InputError(problem)


# ---------------------------------------------------------------- reading


def _read_text(path: Path) -> tuple[str | None, list[Problem]]:
    """The file as text, or its one problem. A named pipe or a device (a link to /dev/zero) is refused before the
    read, which would wait on a writer or fill the memory, as the key file's reader refuses it (textfile.not_regular)."""
    kind = not_regular(path)
    if kind is not None:
        return None, [Problem(str(path), "(file)", kind, f"a regular {path.suffix.lstrip('.').upper()} file",
                              f"restore it from git (`git checkout -- {path}`); a device or a pipe cannot be read as "
                              "a config file")]
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, [_missing(path)]
    except OSError as exc:
        return None, [_unreadable(path, exc)]
    text, problem = decode_text(str(path), data)
    return text, [problem] if problem else []


def read_toml(path: Path) -> tuple[dict[str, Any] | None, list[Problem]]:
    text, problems = _read_text(path)
    if text is None:
        return None, problems
    if not any(line.strip() and not line.strip().startswith("#") for line in text.splitlines()):
        # One line, not one per missing section.
        return None, [Problem(str(path), "(file)", "an empty file", "the [atropos], [environment], [rollout], "
                              "[algorithm] and [reward] sections", "restore it from git (`git checkout -- "
                              f"{path}`)")]
    try:
        return tomllib.loads(text), []
    except (ValueError, RecursionError) as exc:
        if not isinstance(exc, tomllib.TOMLDecodeError):
            return None, [_unparseable(path, text, exc)]
        msg = str(exc).removeprefix("Found ")  # tomllib's "Found invalid character": the line says "found" itself
        m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", msg)
        if m:
            where, msg = f"{path}:{m.group(1)}:{m.group(2)}", msg[: m.start()]
            number = int(m.group(1))
        else:
            where, msg = f"{path}:{text.count(chr(10)) + 1}:1", re.sub(r"\s*\(at end of document\)$", "", msg)
            number = text.count("\n") + 1
        duplicate = _toml_duplicate(path, text, msg, number)
        if duplicate is not None:
            return None, [duplicate]
        hint = _typing_cause(text, number) or _toml_backslash(text, number) or _lone_carriage_return(text, number) \
            or "fix that line; `git diff configs/` shows what changed"
        if msg.startswith("Expected "):  # "found expected newline…" said as what was found
            msg = f"text where TOML {_lower_first(msg)}"
        return None, [Problem(where, "syntax", _lower_first(msg), "valid TOML", hint)]


def _lone_carriage_return(text: str, number: int) -> str | None:
    """A CR not followed by LF (an old Mac line end, or a stray one) ends no line for TOML; tomllib then reports the
    line it is on."""
    lines = text.split("\n")
    line = lines[number - 1] if 0 < number <= len(lines) else ""
    if "\r" not in line.removesuffix("\r"):
        return None
    return (f"line {number} holds a carriage return (\\r) that ends no line: save the file with LF (or CRLF) line "
            "ends")


def _toml_backslash(text: str, number: int) -> str | None:
    """A Windows path in a "basic string": TOML reads \\U, \\m, … as escapes, as JSON does."""
    lines = text.splitlines()
    line = lines[number - 1] if 0 < number <= len(lines) else ""
    if not re.search(r'"[^"]*\\[^"]*"', line):
        return None
    return ("a backslash in a \"double-quoted\" TOML string starts an escape: write the path in 'single quotes' "
            "(a literal string), double each backslash, or use forward slashes")


# The interpreter's own limit on the digits of an integer it reads (sys.get_int_max_str_digits(), 4300 by default).
_LONG_NUMBER = re.compile(r"\d{1000,}")


def _unparseable(path: Path, text: str, exc: Exception) -> Problem:
    """A file the parser gave up on without a syntax error: a number too long for Python to read (ValueError, no
    line from the parser: the line is found here), or arrays and tables nested past the recursion limit."""
    if isinstance(exc, RecursionError):
        return Problem(str(path), "syntax", "arrays or objects nested about a thousand levels deep",
                       "a settings file a few levels deep", "restore the file from git; `git diff configs/` shows "
                       "what changed")
    long = max(_LONG_NUMBER.finditer(text), key=lambda m: len(m.group()), default=None)
    where = f"{path}:{text.count(chr(10), 0, long.start()) + 1}" if long else str(path)
    digits = f"a number of {len(long.group())} digits" if long else "a number too long to read"
    return Problem(where, "syntax", digits, "a number of at most a few digits (every setting has a range)",
                   "a paste or a held-down key; retype the value")


_TOML_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\s-]+?)\s*\]\]?\s*(#.*)?$")
_TOML_KEY = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*=")


def _toml_duplicate(path: Path, text: str, msg: str, number: int) -> Problem | None:
    """tomllib's "Cannot overwrite a value" / "Cannot declare ('x',) twice" said as what it is: a key or a section
    written twice, both lines named (the same shape as a JSON file's duplicate key)."""
    lines = text.splitlines()
    twice = re.fullmatch(r"Cannot declare \((.*)\) twice", msg)
    if twice:
        section = ".".join(re.findall(r"'([^']*)'", twice.group(1)))
        first = next((n for n, line in enumerate(lines[: number - 1], 1)
                      if (m := _TOML_HEADER.match(line)) and re.sub(r"\s", "", m.group(1)) == section), None)
        dotted = None if first else next((n for n, line in enumerate(lines[: number - 1], 1)
                                          if (k := _TOML_KEY.match(line)) and k.group(1).startswith(section + ".")),
                                         None)
        if dotted:  # `rollout.group_size = 8` above any header made [rollout] already
            return Problem(f"{path}:{number}", f"[{section}]", f"a [{section}] header after the dotted key on line "
                           f"{dotted}, which made [{section}] already", "each section once",
                           f"move line {dotted} under this header, without its {section}. prefix")
        found = f"a second [{section}] section" + (f" (the first is on line {first})" if first else "")
        return Problem(f"{path}:{number}", f"[{section}]", found, "each section once",
                       f"move this section's keys under the first [{section}] and delete this header")
    if msg != "Cannot overwrite a value" or not 0 < number <= len(lines):
        return None
    key = _TOML_KEY.match(lines[number - 1])
    if key is None:
        return None
    section, first = "", None
    for n, line in enumerate(lines[: number - 1], 1):
        if m := _TOML_HEADER.match(line):
            section, first = re.sub(r"\s", "", m.group(1)), None
        elif (k := _TOML_KEY.match(line)) and k.group(1) == key.group(1) and first is None:
            first = n
    if first is None:  # not the same key twice (`x = 1` then `x.y = 2`): tomllib's own words, generic hint
        return None
    name = f"{section}.{key.group(1)}" if section else key.group(1)
    return Problem(f"{path}:{number}", name, f"a second {key.group(1)} (the first is on line {first})",
                   "each key once per section", "delete one of the two; TOML refuses a key written twice")


# Characters a word processor or a chat window types for quotes and dashes; TOML and JSON want ASCII ones.
_TYPOGRAPHIC = {"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'", "\uff02": '"',
                "\u00a0": " ", "\u3000": " "}


def _typing_cause(text: str, number: int) -> str | None:
    """The likely typing cause of a syntax error on line `number`: typographic quotes or non-breaking spaces."""
    lines = text.splitlines()
    line = lines[number - 1] if 0 < number <= len(lines) else ""
    found = sorted({c for c in line if c in _TYPOGRAPHIC})
    if found:
        shown = " ".join(f"U+{ord(c):04X}" for c in found)
        return (f"line {number} has typographic quotes or spaces ({shown}), as an editor or chat window types them; "
                'retype them as plain " \' and spaces')
    # Outside a quoted string the syntax is ASCII: a zero-width space, a minus sign (U+2212), full-width digits or a
    # Cyrillic letter in a key look right on screen and leave only the parser's generic words.
    found = sorted(set(_non_ascii_outside_strings(line)))
    if not found:
        return None
    shown = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in found[:3])
    return (f"line {number} has characters outside quotes that are not ASCII ({shown}); retype its keys, numbers "
            "and punctuation on a plain keyboard")


def _non_ascii_outside_strings(line: str) -> list[str]:
    """Non-ASCII characters of one TOML or JSON line that are not inside a quoted string (a # comment ends it)."""
    out, quote, i = [], None, 0
    while i < len(line):
        c = line[i]
        if quote is None:
            if c == "#":
                break
            if c in "\"'":
                quote = c
            elif ord(c) > 127:
                out.append(c)
        elif c == "\\" and quote == '"':
            i += 1  # the escaped character is the string's
        elif c == quote:
            quote = None
        i += 1
    return out


def read_json(path: Path) -> tuple[dict[str, Any] | None, list[Problem]]:
    text, problems = _read_text(path)
    if text is None:
        return None, problems
    if not text.strip():
        # json would say "expecting value" at 1:1 and the hint would speak of commas.
        return None, [Problem(str(path), "(file)", "an empty file", "a JSON object with sections tinker, inference, "
                              "algorithm, …", f"restore it from git (`git checkout -- {path}`)")]
    duplicates: list[str] = []
    try:
        data = json.loads(text, object_pairs_hook=partial(_no_duplicates, duplicates))
    except RecursionError as exc:
        return None, [_unparseable(path, text, exc)]
    except ValueError as exc:
        if not isinstance(exc, json.JSONDecodeError):  # an integer over the interpreter's digit limit
            return None, [_unparseable(path, text, exc)]
        hint = _typing_cause(text, exc.lineno) or (
            # A Windows path pasted as it is: JSON reads \U, \m, … as escapes.
            "a backslash starts an escape in JSON: write it twice (C:\\\\data) or use forward slashes (C:/data)"
            if exc.msg.startswith("Invalid \\escape") else
            "JSON has no comments and no trailing commas; strings take double quotes")
        return None, [Problem(f"{path}:{exc.lineno}:{exc.colno}", "syntax", _lower_first(exc.msg), "valid JSON",
                              hint)]
    if duplicates:
        return None, [_duplicate(path, text, name) for name in dict.fromkeys(duplicates)]
    if not isinstance(data, dict):
        return None, [Problem(str(path), "(top level)", f"a JSON {_json_kind(data)}", "a JSON object",
                              "the file holds one object with sections tinker, inference, algorithm, …")]
    surrogate = _lone_surrogate(data)
    if surrogate is not None:
        return None, [_surrogate_problem(path, text, surrogate)]
    return data, []


def _json_kind(value: Any) -> str:
    """A JSON name for a value's type, as tasks/datasets.py words it (the line must not say NoneType or str)."""
    return {type(None): "null", bool: "boolean", str: "string", list: "list", int: "number",
            float: "number"}.get(type(value), type(value).__name__)


LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
# A high half not followed by a low one, or a low half not preceded by a high one: a whole pair is a character.
LONE_ESCAPE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                         r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def _lone_surrogate(value: Any, at: str = "") -> str | None:
    """The dotted key of the first key or string holding half a UTF-16 pair (JSON's "\\ud800" parses to one; it
    cannot be printed or written as UTF-8, so every later step would fail on it), or None."""
    if isinstance(value, str):
        return at if LONE_SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{at}.{key}" if at else key
            if LONE_SURROGATE.search(key):
                return here
            found = _lone_surrogate(item, here)
            if found is not None:
                return found
    if isinstance(value, list):
        for n, item in enumerate(value):
            found = _lone_surrogate(item, f"{at}[{n}]")
            if found is not None:
                return found
    return None


def _surrogate_problem(path: Path, text: str, key: str) -> Problem:
    m = LONE_ESCAPE.search(text)
    where = f"{path}:{text.count(chr(10), 0, m.start()) + 1}" if m else str(path)
    shown = key.encode("ascii", "backslashreplace").decode()
    escape = m.group(0) if m else "a \\uD800–\\uDFFF escape"
    return Problem(where, shown, f"{escape}, half of a UTF-16 pair alone", "text made of whole characters",
                   "write the character itself, or both halves of its pair (\\ud83d\\ude00)")


def _no_duplicates(seen: list[str], pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys without a word; the error would then be about the value it kept.
    names = [name for name, _ in pairs]
    seen += [name for i, name in enumerate(names) if name in names[:i]]
    return dict(pairs)


def _keys_by_object(text: str) -> list[tuple[int, str, int]]:
    """(object number, key, offset) of every key of a JSON text that parsed: which object a key belongs to, so a
    key written twice is named at its two places, not at a key of that name in another object ("name" is in
    "algorithm" and in "wandb")."""
    out, stack, count, i, n = [], [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            end = i + 1
            while text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            rest = text[end + 1:end + 40].lstrip()
            if stack and stack[-1] is not None and rest.startswith(":"):
                out.append((stack[-1], json.loads(text[i:end + 1]), i))
            i = end + 1
            continue
        if c == "{":
            count += 1
            stack.append(count)
        elif c == "[":
            stack.append(None)
        elif c in "}]":
            stack.pop()
        i += 1
    return out


def _duplicate(path: Path, text: str, name: str) -> Problem:
    by_object: dict[int, list[int]] = {}
    for number, key, offset in _keys_by_object(text):
        if key == name:
            by_object.setdefault(number, []).append(offset)
    starts = next((offsets for offsets in by_object.values() if len(offsets) > 1), [0, 0])
    line = text.count("\n", 0, starts[1]) + 1
    first = text.count("\n", 0, starts[0]) + 1
    return Problem(f"{path}:{line}", name, f"a second {json.dumps(name)} (the first is on line {first})",
                   "each key once per object", "delete one of the two; JSON would keep the last one silently")


def _missing(path: Path) -> Problem:
    return Problem(str(path), "(file)", "no such file", f"the file {path.name}",
                   "pass --config-dir pointing at the configs/ folder, or restore it from git")


def _unreadable(path: Path, exc: Exception) -> Problem:
    reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
    return Problem(str(path), "(file)", f"a file that cannot be read ({reason})", "a readable UTF-8 text file",
                   "restore it from git")


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


# ---------------------------------------------------------------- pydantic errors -> Problems

_TYPE_NAMES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", dict: "a table",
              datetime.date: "a date", datetime.datetime: "a date and time", datetime.time: "a time",
               list: "an array", type(None): "null"}


def _show(value: Any) -> str:
    if isinstance(value, datetime.date | datetime.time):  # TOML's dates and times, as the file writes them
        return value.isoformat()
    if isinstance(value, str):
        if len(value) > 60:  # a pasted blob: its start and its length, not the whole of it
            return f"{json.dumps(value[:40])[:-1]}…\" ({len(value)} characters)"
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table" if value else "an empty table"
    if isinstance(value, int) and value.bit_length() > 133:  # over 40 digits: its start and its length
        digits = str(abs(value))
        return f"{'-' if value < 0 else ''}{digits[:20]}… ({len(digits)} digits)"
    return repr(value)


def _type_hint(expected: str) -> str:
    """How to write a value of the `expected` type, for a value of another type."""
    if "integer" in expected:
        return "write a whole number without quotes or a decimal point, e.g. 32"
    if "number" in expected:
        return "write a number without quotes, e.g. 0.5"
    if "boolean" in expected:
        return "write true or false, without quotes"
    if "string" in expected:
        return 'write text in quotes, e.g. "name"'
    return ""


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class that owns the last element of `loc`."""
    for part in loc[:-1]:
        field_info = model.model_fields.get(part) if isinstance(part, str) else None
        nested = getattr(field_info, "annotation", None) if field_info else None
        if not (isinstance(nested, type) and issubclass(nested, BaseModel)):
            return None
        model = nested
    return model


def _section_of(model: type[BaseModel], loc: tuple) -> str | None:
    """The other top-level section that has a key named like the misplaced one (`[rollout] kl_coef` -> algorithm)."""
    if len(loc) != 2:
        return None
    for name, info in model.model_fields.items():
        nested = info.annotation
        if name != loc[0] and isinstance(nested, type) and issubclass(nested, BaseModel) \
                and loc[-1] in nested.model_fields:
            return name
    return None


def _nested_section(model: type[BaseModel], loc: tuple, value: Any) -> str | None:
    """A whole top-level section written inside another one (`reward = {…}` after `[algorithm]` in TOML, where a
    key belongs to the section above it): that section's name, else None."""
    if len(loc) != 2 or not isinstance(value, dict) or loc[-1] == loc[0]:
        return None
    info = model.model_fields.get(loc[-1])
    nested = getattr(info, "annotation", None)
    return loc[-1] if isinstance(nested, type) and issubclass(nested, BaseModel) else None


def _inside_hint(loc: tuple, value: Any, sections_label: str) -> str | None:
    """`rollout.batch_size = 32` under `[rollout]` (or a "rollout" object inside "rollout"): the section's name
    written twice. Removing the key, the generic hint, would drop the user's value."""
    if len(loc) < 2 or loc[-1] != loc[-2] or not isinstance(value, dict) or not value:
        return None
    if sections_label == "TOML":
        return (f"inside [{'.'.join(map(str, loc[:-1]))}] write {', '.join(f'{k} = …' for k in value)} without the "
                f"{loc[-1]}. prefix")
    keys = ", ".join(f'"{k}"' for k in value)
    return f'inside the "{loc[-2]}" object write {keys} directly, not in a "{loc[-1]}" object'


def problems_from(exc: ValidationError, model: type[BaseModel], path: Path, sections_label: str) -> list[Problem]:
    out = []
    errors = exc.errors(include_url=False)
    # Sections written inside another section: their "no such section" line would only repeat the same mistake.
    nested = {n for err in errors if err["type"] == "extra_forbidden"
              and (n := _nested_section(model, tuple(err["loc"]), err.get("input")))}
    # [Rollout] for [rollout]: the unknown section's line says "did you mean rollout?"; "no such section" would
    # only repeat it.
    nested |= {str(err["loc"][0]).lower() for err in errors if err["type"] == "extra_forbidden"
               and len(err["loc"]) == 1 and str(err["loc"][0]).lower() in model.model_fields}
    for err in errors:
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in loc) or "(top level)"
        kind = err["type"]
        value = err.get("input")
        owner = _model_at(model, loc)
        if kind == "missing" and len(loc) == 1 and loc[0] in nested:
            continue
        if kind == "extra_forbidden":
            known = sorted(owner.model_fields) if owner else []
            close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            prefix = ".".join(str(p) for p in loc[:-1])
            home = _section_of(model, loc)
            inside = _inside_hint(loc, value, sections_label)
            if inside is not None:
                hint = inside
            elif loc[-1] in nested and len(loc) == 2:
                hint = (f"[{loc[-1]}] is a section of its own: a key belongs to the [section] above it, so write "
                        f"[{loc[-1]}] with its keys under it, or move this line above the first [section]"
                        if sections_label == "TOML" else
                        f'"{loc[-1]}" is an object of its own at the top level, not inside "{loc[0]}"')
            elif home is not None:
                # Removing it would silently change the run; moving it keeps what the user meant.
                where = f"[{home}]" if sections_label == "TOML" else f'the "{home}" object'
                hint = f"{loc[-1]} belongs in {where}; move it there"
            else:
                hint = f"did you mean {prefix + '.' if prefix else ''}{close[0]}?" if close else "remove it"
            out.append(Problem(str(path), key, f"an unknown {'section' if len(loc) == 1 else 'key'}",
                               f"one of {', '.join(known)}", hint))
        elif kind == "missing":
            if len(loc) == 1:
                section = f"a [{key}] section" if sections_label == "TOML" else f'a "{key}" object'
                out.append(Problem(str(path), key, "no such section", section,
                                   "restore it from the shipped file in git"))
            else:
                out.append(Problem(str(path), key, "nothing", _expected_type(owner, loc[-1]),
                                   f"add {loc[-1]} to the {'.'.join(map(str, loc[:-1]))} section"))
        elif kind.endswith("_type") or kind == "model_type" or kind == "dict_type":
            found = ("null" if value is None else _show(value) if isinstance(value, dict)  # "a table" says it
                     else f"{_show(value)} ({_TYPE_NAMES.get(type(value), type(value).__name__)})")
            expected = _expected_type(owner, loc[-1]) if owner else err["msg"].removeprefix("Input should be ")
            hint = ("quotes make a string; write numbers and booleans bare" if isinstance(value, str)
                    else _type_hint(expected))
            if expected == "a table" and isinstance(value, list) and value and isinstance(value[0], dict):
                toml = sections_label == "TOML"
                found = "an array of tables" if toml else "a list of objects"
                hint = (f"[[{key}]] makes an array of tables; write [{key}] with single brackets" if toml
                        else f'write "{loc[-1]}" as one object, not a list of objects')
            if value is None:
                info = owner.model_fields.get(loc[-1]) if owner else None
                hint = ("write a value" if info is None or info.is_required()
                        else f"write a value, or leave {loc[-1]} out for its default")
            if sections_label == "JSON":  # the user's file says object, not TOML's table
                expected = expected.replace("a table", "an object")
                found = found.replace("an empty table", "an empty object").replace("a table", "an object")
            out.append(Problem(str(path), key, found, expected, hint))
        else:
            expected = err["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
            out.append(Problem(str(path), key, _show(value), expected, _range_hint(owner, loc[-1])))
    return out


def _first_clause(text: str) -> str:
    """`text` up to its first "; " or ": " outside parentheses."""
    depth = 0
    for n, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0 and c in ";:" and text[n + 1:n + 2] == " ":
            return text[:n]
    return text


def _range_hint(owner: type[BaseModel] | None, name: Any) -> str:
    """For a value of the right type outside its range or choices: what the setting is (its description's first
    clause), and how to see what was changed. Not the model's default: a field's default is one algorithm's seed
    value (batch_size 32 is GRPO's; the shipped PPO file has 256), so it would mislead the other's user."""
    info = owner.model_fields.get(name) if owner else None
    what = _first_clause(info.description or "") if info is not None else ""
    if engine := re.fullmatch(r"(\w+ engine)", what):  # "torch engine: sequences per …": what it is, then whose
        what = f"{_first_clause(info.description[len(what) + 2:])} ({engine.group(1)})"
    elif " " not in what:  # "auto: …, torch: …": a list of values, not what the setting is
        what = ""
    changed = "`git diff configs/` shows what changed"
    return f"{name}: {what}; {changed}" if what else changed


def _expected_type(owner: type[BaseModel] | None, name: Any) -> str:
    info = owner.model_fields.get(name) if owner else None
    if info is None:
        return "a value"
    ann = info.annotation
    for typ, label in _TYPE_NAMES.items():
        if ann is typ:
            return label
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return "a table"
    args = getattr(ann, "__args__", None)
    if args and all(isinstance(a, str) for a in args):
        return " or ".join(repr(a) for a in args)
    if args and type(None) in args and len(args) == 2:  # `str | None`: the type, or null for its default
        other = next(a for a in args if a is not type(None))
        if other in _TYPE_NAMES:
            return f"{_TYPE_NAMES[other]} (or null)"
    return str(ann).replace("typing.", "")


def _validate(model: type[BaseModel], data: dict | None, path: Path, label: str) -> tuple[Any, list[Problem]]:
    if data is None:
        return None, []
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, problems_from(exc, model, path, label)


# ---------------------------------------------------------------- the entry point


CONFIG_DIR_HINT = ("run from the checkout, where configs/ sits next to the Makefile; validate and test-inference also "
                   "take --config-dir")


def load_files(algo: str, config_dir: Path) -> tuple[AlgoConfig, Settings, Path, Path]:
    """Parse and type-check both files (no rules). Raises InputError with the problems of both files."""
    check_algo(algo)
    config_dir = Path(config_dir)
    unusable = path_unusable(config_dir)  # a name over 255 characters: is_dir() raises instead of answering
    if unusable is not None:
        raise InputError(Problem(str(config_dir), "(folder)", unusable,
                                 f"the folder holding config_{algo}.toml and settings_{algo}.json", CONFIG_DIR_HINT))
    if not config_dir.is_dir():  # one line for the folder, not one per file it should hold
        found = "a file, not a folder" if config_dir.exists() else "no such folder"
        raise InputError(Problem(str(config_dir), "(folder)", found,
                                 f"the folder holding config_{algo}.toml and settings_{algo}.json",
                                 CONFIG_DIR_HINT))
    config_path, settings_path = paths(algo, config_dir)
    if not config_path.exists() and not settings_path.exists():  # the wrong folder (--config-dir ''), one line
        raise InputError(Problem(str(config_dir), "(folder)", f"a folder without {config_path.name} or "
                                 f"{settings_path.name}", f"the folder holding config_{algo}.toml and "
                                 f"settings_{algo}.json", CONFIG_DIR_HINT))
    config_data, p1 = read_toml(config_path)
    settings_data, p2 = read_json(settings_path)
    config, p3 = _validate(AlgoConfig, config_data, config_path, "TOML")
    settings, p4 = _validate(Settings, settings_data, settings_path, "JSON")
    problems = p1 + p3 + p2 + p4
    if problems:
        raise InputError(problems)
    return config, settings, config_path, settings_path


def fill_mirrors(config: AlgoConfig, settings: Settings) -> tuple[AlgoConfig, Settings]:
    """A MIRRORED value written in only one of the two files is used for both (the blog's PPO TOML has no kl_coef,
    its settings.json has 0.04; its PPO settings have no group_size). Written in both, the rules compare them."""
    c_updates: dict[str, dict] = {}
    s_updates: dict[str, object] = {}
    for toml_key, settings_key in profiles.MIRRORED.items():
        section, name = toml_key.split(".")
        s_name = settings_key.split(".")[1]
        in_toml = name in getattr(config, section).model_fields_set
        in_settings = getattr(settings.algorithm, s_name)
        if in_settings is None:
            s_updates[s_name] = getattr(getattr(config, section), name)
        elif not in_toml:
            c_updates.setdefault(section, {})[name] = in_settings
    if c_updates:
        config = config.model_copy(update={sec: getattr(config, sec).model_copy(update=vals)
                                           for sec, vals in c_updates.items()})
    if s_updates:
        settings = settings.model_copy(update={"algorithm": settings.algorithm.model_copy(update=s_updates)})
    return config, settings


def resolve(config: AlgoConfig, settings: Settings, overrides: dict[str, object]) -> tuple[AlgoConfig, Settings]:
    """The files with `overrides` applied, type-checked again."""
    if not overrides:
        return config, settings
    # exclude_unset: a value the files leave out stays "not set" after the overrides (rules.grpo_gamma_lam asks).
    c, s = config.model_dump(exclude_unset=True), settings.model_dump(exclude_unset=True)
    profiles.apply(c, s, overrides)
    return AlgoConfig.model_validate(c), Settings.model_validate(s)


def load_stack(
    algo: str,
    config_dir: Path | str = Path("configs"),
    profile: str = "gpu",
    unlock: bool = False,
    keyfile: KeyFile | None = None,
    gpu_memory_gib: float | None = None,
    model: str | None = None,
) -> StackConfig:
    """Load, resolve and check. Raises InputError with every problem; warnings/notices are in the result."""
    stack, errors = evaluate_stack(algo, config_dir, profile, unlock, keyfile, gpu_memory_gib, model)
    if errors:
        raise InputError(errors)
    return stack


def evaluate_stack(
    algo: str,
    config_dir: Path | str = Path("configs"),
    profile: str = "gpu",
    unlock: bool = False,
    keyfile: KeyFile | None = None,
    gpu_memory_gib: float | None = None,
    model: str | None = None,
) -> tuple[StackConfig, list[Problem]]:
    """Like load_stack, but returns the (resolved) configuration together with the rule errors, so `validate` can
    show both. Unreadable or mistyped files still raise InputError (there is nothing to show).

    `model`: a catalog model name (--model); without one, inference.model_path selects it when it is a name."""
    check_model(model)
    config, settings, config_path, settings_path = load_files(algo, Path(config_dir))
    config, settings = fill_mirrors(config, settings)
    if model is None and catalog.is_catalog_name(settings.inference.model_path):
        model = settings.inference.model_path
    overrides = {**profiles.defaults_for(profile, algo, model, config, settings),
                 **profiles.overrides_for(profile, algo, settings.trainer.engine, model)}
    r_config, r_settings = resolve(config, settings, overrides)
    fitted = profiles.fitted_to_batch(overrides, r_config.rollout.sequences_per_step)
    if fitted is not overrides:  # resolved once more only when the batch is smaller than the profile's minibatches
        overrides = fitted
        r_config, r_settings = resolve(config, settings, overrides)
    errors, cautions = check_all(algo, config, settings, r_config, r_settings, config_path, settings_path,
                                 profile=profile, unlock=unlock, keyfile=keyfile, gpu_memory_gib=gpu_memory_gib)
    notices = list(keyfile.notices if keyfile else ())
    if profile == "gpu" and gpu_memory_gib is None:
        notices.append("GPU memory unknown (no nvidia-smi, no --gpu-memory): the memory budget was not checked")
    stack = StackConfig(
        algo=algo, config=r_config, settings=r_settings, config_path=config_path, settings_path=settings_path,
        profile=profile, overrides=overrides, config_as_written=config, settings_as_written=settings,
        keyfile=keyfile, warnings=tuple(keyfile.warnings if keyfile else ()) + tuple(p.line() for p in cautions),
        notices=tuple(notices), gpu_memory_gib=gpu_memory_gib if profile == "gpu" else None,
        model=model,
    )
    return stack, errors


def check_all(algo: str, config: AlgoConfig, settings: Settings, r_config: AlgoConfig, r_settings: Settings,
              config_path: Path, settings_path: Path, *, profile: str, unlock: bool, keyfile: KeyFile | None,
              gpu_memory_gib: float | None) -> tuple[list[Problem], list[Problem]]:
    """Every rule on the files as written (what the user can fix); the agreement rules once more on the resolved
    configuration, so a profile override cannot break what the files got right."""
    inputs = partial(rules.Inputs, algo=algo, config_file=str(config_path), settings_file=str(settings_path),
                     keyfile=keyfile, unlock=unlock, gpu_memory_gib=gpu_memory_gib,
                     base_dir=config_path.parent.parent, profile=profile)
    resolving = (r_config, r_settings) != (config, settings)
    # The Tinker key matters for the engine actually used, and the checkpoint interval for the run's actual length
    # (the profile may set num_steps): both are checked after the overrides only.
    after_only = (rules.tinker_key, rules.checkpoint_interval_reached)
    written_rules = tuple(r for r in rules.RULES if not (resolving and r in after_only))
    errors, cautions = rules.check(inputs(config=config, settings=settings), written_rules)
    if resolving:
        e2, c2 = rules.check(inputs(config=r_config, settings=r_settings), RESOLVED_RULES)
        errors += [p for p in e2 if p not in errors]
        cautions += [p for p in c2 if p not in cautions]
    return errors, cautions


# The rules that must also hold after a profile's overrides (not the GPU-path ones: locked LoRA fields, memory).
RESOLVED_RULES = tuple(r for r in rules.RULES if r not in (rules.locked_fields, rules.memory_budget))

""".env.taotoken: the one key file. Load it, check it, default TINKER_API_KEY, and redact every secret it holds.

Decisions (documented in the README's key-file section):
- Missing default file = offline mode: a notice says gateway checks are skipped; not an error. A path given with
  --keyfile or $HERMES_KEYFILE that does not exist, a directory, or a dangling or looping symlink is an error.
- Every value in the file is secret except NON_SECRET_NAMES (base URLs, model names): redaction replaces the values,
  whatever characters they hold, wherever they appear.
- A key that is the example's or the blog's placeholder, or holds characters no real key has (non-ASCII, spaces), is
  an error naming its line: the gateway would answer 401 only after the stack started.
- Quotes around a value (`KEY="sk-…"`) are accepted: python-dotenv and `docker compose` both strip them. A notice
  asks to drop them because `docker run --env-file` keeps them literally.
- Whitespace or quote characters left *inside* the value after dotenv's own unquoting are an error, not normalised:
  compose would hand the containers the padded value while the controller used a trimmed one.
- A trailing slash on TAOTOKEN_BASE_URL is normalised with a notice; a trailing /v1 is an error (clients add it).
"""

from __future__ import annotations

import difflib
import errno
import io
import logging
import os
import re
import shlex
import stat
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit, urlunsplit

from hermes_stack import keyfile_vars
from hermes_stack.errors import InputError, Problem

# The only key-file values that are not secret (printed in clear by validate and render): redaction.NON_SECRET_NAMES.
from hermes_stack.redaction import (
    NON_SECRET_NAMES,
    _redact_url,
    is_keyfile_secret,
    is_secret_name,
    looks_like_a_key,
    redact,
    register_secrets,
)
from hermes_stack.textfile import decode_text, not_regular

DEFAULT_PATH = Path(".env.taotoken")
PATH_ENV = keyfile_vars.PATH_ENV  # overrides the default path (so does --keyfile)

REQUIRED = ("TAOTOKEN_API_KEY", "TAOTOKEN_BASE_URL")
TINKER_KEY_PREFIXES = ("tml-", "eyJ")
# Shortest Tinker key body after its prefix: "tml-" alone is the prefix, not a key.
TINKER_KEY_MIN_BODY = 8
PLACEHOLDER_KEYS = ("sk-replace-me", "tml-replace-me")
# The blog's ".env.taotoken" says TAOTOKEN_API_KEY=sk-你的实际key ("your actual key").
_PLACEHOLDER_WORDS = ("replace-me", "你的", "your-key", "your_key", "yourkey", "<", ">", "...", "…", "xxxxxx")
BASE_URL_EXAMPLE = "https://taotoken.net/api"

# The names hermes-stack reads from the key file; a name close to one of these gets a "did you mean".
KNOWN_NAMES = tuple(v.name for v in keyfile_vars.READ)
# The only words of a line python-dotenv cannot read that are shown (_clip): the table's names.
_SHOWN_NAMES = frozenset(v.name for v in keyfile_vars.VARIABLES)


@dataclass(frozen=True)
class KeyFile:
    path: Path
    values: Mapping[str, str] = field(default_factory=dict)
    offline: bool = False
    notices: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # True when TINKER_API_KEY was not in the file and took TAOTOKEN_API_KEY's value.
    tinker_key_defaulted: bool = False

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def redacted(self) -> dict[str, str]:
        """The values as they may be shown: secrets as `sk-…abcd`."""
        return {k: redact(v) if is_keyfile_secret(k) else v for k, v in self.values.items()}


# ---------------------------------------------------------------- loading


def resolve_path(path: str | Path | None = None) -> Path:
    """The key file's path; a leading ~ is the home folder, as a shell would have made it (a quoted '~/k.env', or
    the Makefile's or a compose file's variable, reaches us unexpanded)."""
    if path is not None:
        return Path(path).expanduser()
    return Path(os.environ.get(PATH_ENV) or DEFAULT_PATH).expanduser()


def path_is_explicit(path: str | Path | None = None) -> bool:
    """True when the user named the key file (--keyfile or $HERMES_KEYFILE): then it must exist."""
    return path is not None or bool(os.environ.get(PATH_ENV))


def load_keyfile(path: str | Path | None = None, *, register: bool = True, must_exist: bool = False) -> KeyFile:
    """Load and check the key file. Raises InputError with every problem; returns notices/warnings otherwise.

    Only an absent file at a path the user did not name (`must_exist` False) is offline mode."""
    path = resolve_path(path)
    name = str(path)
    problem = _path_problem(path, must_exist)
    if problem is not None:
        raise InputError(problem)
    if not os.path.lexists(path):
        return KeyFile(
            path=path,
            offline=True,
            notices=(
                (f"no key file at {name}: offline mode, gateway checks are skipped "
                f"(to enable them: cp .env.taotoken.example {name} && chmod 600 {name}, then put your keys in it)"),
            ),
        )
    text = _read(path)
    raw, problems, notices, warnings, lines = _parse(name, text)
    if not raw and not problems:  # one line for the file, not "no such line" for each required name
        found = "an empty file" if not text.strip() else "only comments and blank lines"
        raise InputError(Problem(name, "(file)", found, "NAME=value lines (TAOTOKEN_API_KEY, TAOTOKEN_BASE_URL)",
                                 f"cp .env.taotoken.example {name} and fill it in; to run offline, "
                                 + (f"leave out --keyfile and ${PATH_ENV}" if must_exist else "remove the file")))
    if register:
        register_secrets(raw, secret=is_keyfile_secret)
    # A name that already has its line (shell syntax) gets no second one about what dotenv made of it.
    values, more = _check_values(name, raw, notices, warnings, lines, skip={p.key for p in problems})
    problems += more
    mode = path.stat().st_mode
    if mode & stat.S_IROTH:
        warnings.append(f"{name} is readable by every user on this machine; run `chmod 600 {name}`")
    if problems:
        raise InputError(problems)
    defaulted = not values.get("TINKER_API_KEY")
    if defaulted:
        values["TINKER_API_KEY"] = values["TAOTOKEN_API_KEY"]
    return KeyFile(
        path=path,
        values=MappingProxyType(values),
        offline=False,
        notices=tuple(notices),
        warnings=tuple(warnings),
        tinker_key_defaulted=defaulted,
    )


def _path_problem(path: Path, must_exist: bool) -> Problem | None:
    """What is wrong with the key file's path itself, if anything (absent and not named by the user is fine)."""
    name = str(path)
    # Quoted for the shell: a path with a space (one pasted with a trailing blank) must copy to where we will look.
    hint = f"point --keyfile or ${PATH_ENV} at your key file (cp .env.taotoken.example {shlex.quote(name)} makes one)"
    try:
        st = path.lstat()
    except FileNotFoundError:
        if not must_exist:
            return None
        blank = " (the path starts or ends with a blank)" if name != name.strip() else ""
        return Problem(name, "(file)", f"no such file{blank}", "the key file you named", hint + "; without one, "
                       f"leave out --keyfile and ${PATH_ENV} for offline mode")
    except OSError as exc:
        return Problem(name, "(file)", f"a path that cannot be read ({exc.strerror})", "a readable key file", hint)
    if stat.S_ISLNK(st.st_mode):
        try:
            path.stat()
        except OSError as exc:
            found = ("a symlink that loops" if exc.errno == errno.ELOOP
                     else f"a symlink to nothing ({os.readlink(path)})")
            return Problem(name, "(file)", found, "a key file (or a link to one)", hint)
    if path.is_dir():
        # `cp .env.taotoken.example <folder>` would copy the example under its own name, which is not a key file.
        inside = path / DEFAULT_PATH.name
        hint = (f"name the key file itself: --keyfile {inside}" if inside.is_file() else
                f"name a file, not a folder: cp .env.taotoken.example {inside} makes one; then --keyfile {inside}")
        return Problem(name, "(file)", "a directory", "a key file of NAME=value lines", hint)
    kind = not_regular(path)
    if kind is not None:
        # Copying the example over a device or pipe makes no sense: ask for a regular file instead.
        return Problem(name, "(file)", kind, "a regular key file of NAME=value lines",
                       f"point --keyfile or ${PATH_ENV} at a regular file such as .env.taotoken; without one, leave "
                       f"both out for offline mode")
    return None


def _read(path: Path) -> str:
    """The file as text; a byte that is not UTF-8 or a byte-order mark is an error naming its line."""
    name = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(Problem(name, "(file)", f"a file that cannot be read ({exc.strerror})",
                                 "a readable text file", f"check its owner and run `chmod 600 {name}`")) from exc
    text, problem = decode_text(name, data)
    if problem is not None:
        raise InputError(problem)
    return text


def _near_name(key: str) -> str | None:
    """The known name `key` was probably meant to be (lower case, a look-alike letter, a typo), else None."""
    if key in KNOWN_NAMES:
        return None
    folded = unicodedata.normalize("NFKD", key).upper()
    folded = "".join(_LOOKALIKES.get(c, c) for c in folded)
    if folded in KNOWN_NAMES:
        return folded
    close = difflib.get_close_matches(folded, KNOWN_NAMES, n=1, cutoff=0.85)
    return close[0] if close else None


# Cyrillic and Greek capitals that look like Latin ones, and digits typed for letters.
_LOOKALIKES = {"А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
               "Х": "X", "І": "I", "Α": "A", "Β": "B", "Ε": "E", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O", "Ρ": "P",
               "Τ": "T", "Χ": "X", "Ι": "I", "0": "O", "1": "I"}


# What an input method or a word processor types for "=": the line then has no "=" at all.
LOOKALIKE_EQUALS = ("\uff1d", "\ufe66", "\u2550")


def _line_name(text: str) -> str | None:
    """The known variable a line that cannot be read begins with (so the problem names it, and no second "no such
    line" follows); None for anything else, which may be part of a key and is never shown."""
    match = re.match(r"\s*(?:export\s+)?([A-Z][A-Z0-9_]*)", text)
    return match.group(1) if match and match.group(1) in KNOWN_NAMES else None


# NAME=value written in another language's syntax: Windows' `set NAME=value` / PowerShell's `$env:NAME=value`, a
# compose or YAML list item `- NAME=value`, a JSON member `"NAME": "value",`. (name's group, hint)
_WRAPPED = (
    (re.compile(r"\s*(?:set\s+|\$env:)([A-Z][A-Z0-9_]*)\s*=", re.IGNORECASE),
     "write NAME=value: `set NAME=value` is a Windows shell's, and this file is read, not run"),
    (re.compile(r"\s*-\s+([A-Z][A-Z0-9_]*)\s*[=:]"),
     "write NAME=value without the leading `- ` (compose's list form of environment:)"),
    (re.compile(r'\s*"([A-Z][A-Z0-9_]*)"\s*:'),
     "write NAME=value: this is a dotenv file, not JSON (no quotes around the name, no : and no trailing comma)"),
)


def _wrapped_name(text: str) -> tuple[str, str] | None:
    """(the known name, the fix) of a NAME=value line written in another syntax; None otherwise."""
    for pattern, hint in _WRAPPED:
        match = pattern.match(text)
        if match and match.group(1) in KNOWN_NAMES:
            return match.group(1), hint
    return None


def _parse(name: str, text: str) -> tuple[dict[str, str], list[Problem], list[str], list[str], dict[str, int]]:
    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    problems: list[Problem] = []
    notices: list[str] = []
    lines: dict[str, int] = {}
    if text.lstrip().startswith(("{", "[")):
        # One line, not one per physical line: this is a JSON file (settings_<algo>.json?), not a key file.
        raise InputError(Problem(name, "(file)", "a JSON document", "a key file of NAME=value lines",
                                 "the key file is .env.taotoken (cp .env.taotoken.example .env.taotoken); JSON "
                                 "settings belong in configs/settings_<algo>.json"))
    previous: tuple[str, int] | None = None  # the last NAME=value line: a broken value continues it
    for binding in parse_stream(io.StringIO(text)):
        # python-dotenv counts from the blank lines before a binding; the binding itself starts after them.
        original = binding.original.string
        line = binding.original.line + original[: len(original) - len(original.lstrip())].count("\n")
        if binding.key is not None and binding.value is None and not binding.error:
            # python-dotenv reads a lone word as a name without a value and drops it: a key broken over two lines
            # would be accepted shortened. The line's text is never shown (it may be the rest of a key).
            after = f" right after the {previous[0]} line (line {previous[1]})" if previous and \
                previous[1] == line - 1 else ""
            wide = next((mark for mark in LOOKALIKE_EQUALS if mark in original), None)
            hint = (f"type = instead of {wide} (U+{ord(wide):04X}, a full-width equals sign an input method types)"
                    if wide else f"a value broken over two lines? join line {line} to line {line - 1}" if after
                    else "write NAME=value, or start the line with # to make it a comment")
            problems.append(Problem(f"{name}:{line}", _line_name(original) or "(line)", f"a line without ={after}",
                                    "NAME=value on one line", hint))
            continue
        if binding.key is not None and binding.value is not None:
            previous = (binding.key, line)
            if _SHELL_VALUE.match(binding.value) and (binding.key in KNOWN_NAMES or is_secret_name(binding.key)):
                problems.append(Problem(f"{name}:{line}", binding.key, "shell syntax ($…) in the value",
                                        "the key itself", "the key file is read, not run by a shell: paste the key's "
                                        "value, not a variable holding it"))
            elif "${" in binding.value and (binding.key in KNOWN_NAMES or is_secret_name(binding.key)):
                # Not shown: the rest of the value is the key's.
                problems.append(Problem(f"{name}:{line}", binding.key, "${ inside the value",
                                        "the value itself, without ${…}", "the key file is read as it is written: "
                                        "nothing in it is filled in from the environment; write the whole value"))
        if binding.error:
            first = binding.original.string.strip().splitlines()[0] if binding.original.string.strip() else ""
            yaml = re.match(r"(export\s+)?[A-Za-z_][A-Za-z0-9_]*\s*:", first)
            spaced = _line_name(first) and re.match(r"(export\s+)?[A-Za-z_][A-Za-z0-9_]*\s+[^\s=]", first)
            wrapped = _wrapped_name(first)
            problems.append(Problem(
                f"{name}:{line}", _line_name(first) or (wrapped[0] if wrapped else "syntax"),
                f"a line python-dotenv cannot read ({_clip(first)})",
                "NAME=value", "write NAME=value: `NAME: value` is YAML, and this is a dotenv file" if yaml
                else "write NAME=value: a space where the = should be" if spaced
                else wrapped[1] if wrapped
                else "one NAME=value per line, no quotes; `#` starts a comment",
            ))
            continue
        if binding.key is None or binding.value is None:
            continue
        if binding.key in lines:
            problems.append(Problem(f"{name}:{line}", binding.key, f"a second {binding.key} line (the first is line "
                                    f"{lines[binding.key]})", "each name once",
                                    "delete one of the two; the last one would win without a word"))
        lines[binding.key] = line
        near = _near_name(binding.key)
        if near is not None:
            shown = binding.key.encode("ascii", "backslashreplace").decode()
            odd = "" if shown == binding.key else " (non-ASCII letters)"
            problems.append(Problem(f"{name}:{line}", shown, f"an unknown name{odd}", "a name hermes-stack reads",
                                    f"did you mean {near}? Names are upper-case ASCII"))
        elif not binding.key.isascii():
            shown = binding.key.encode("ascii", "backslashreplace").decode()
            problems.append(Problem(f"{name}:{line}", shown, "a name with non-ASCII letters",
                                    "a NAME of ASCII letters, digits and _", "retype the name"))
        after_eq = binding.original.string.split("=", 1)[-1].lstrip()
        if after_eq[:1] in ("'", '"'):
            notices.append(
                f"{name}:{line}: quotes around {binding.key} were removed; write {binding.key}=value without quotes "
                "(`docker run --env-file` would keep them)"
            )
    # python-dotenv logs its own warning for unreadable lines; ours above is clearer.
    logger = logging.getLogger("dotenv.main")
    was_disabled, logger.disabled = logger.disabled, True
    try:
        # interpolate=False: python-dotenv would fill `${VAR}` in from this machine's environment, so a value would
        # silently differ from what the file says (refused above for the names hermes-stack reads).
        loaded = dotenv_values(stream=io.StringIO(text), interpolate=False)
    finally:
        logger.disabled = was_disabled
    raw = {k: v for k, v in loaded.items() if v is not None}
    return raw, problems, notices, [], lines


def _check_values(
    name: str, raw: dict[str, str], notices: list[str], warnings: list[str], lines: dict[str, int],
    skip: set[str] | frozenset[str] = frozenset(),
) -> tuple[dict[str, str], list[Problem]]:
    problems: list[Problem] = []
    values = dict(raw)
    for key, value in raw.items():
        if key in skip:
            continue
        if _padded(value):
            shown = redact(value.strip(" \t'\"")) if is_keyfile_secret(key) else value.strip(" \t'\"")
            problems.append(Problem(
                name, key, "a value with surrounding whitespace or quotes", "the bare value",
                f"write {key}={shown} with nothing around it",
            ))
        elif value and (key in KNOWN_NAMES or is_secret_name(key)) and key not in NON_SECRET_NAMES:
            problem = _key_value_problem(f"{name}:{lines.get(key, 1)}", key, value)
            if problem is not None:
                problems.append(problem)
        elif value and key in NON_SECRET_NAMES and _key_shaped(value.strip(" \t'\"")):
            register_secrets({key: value}, secret=lambda _name: True)
            home = next((k for prefix, k in _KEY_HOMES if key.startswith(prefix)), "TAOTOKEN_API_KEY")
            problems.append(Problem(f"{name}:{lines.get(key, 1)}", key, f"a value shaped like a key ({redact(value)})",
                                    _NON_SECRET_EXPECTED.get(key, "a value that is not a key"),
                                    f"{key} is printed in clear; the key belongs on the {home} line"))
            values.pop(key, None)
    misspelt = {_near_name(k) for k in raw}
    said = {p.found for p in problems}
    for key in REQUIRED:
        if key in skip:
            continue
        if key not in raw and key not in misspelt and f"a value with the name {key} inside" not in said:
            # (a misspelt name already has its "did you mean" line; one pasted inside another line's value, as
            # `A=…;B=…`, that line's "with the name B inside")
            problems.append(Problem(name, key, "no such line", _expected(key), f"add {key}=… to {name}"))
        elif raw.get(key) == "":
            problems.append(Problem(name, key, "an empty value", _expected(key), f"set {key}=… in {name}"))
    if not raw.get("TAOTOKEN_MODEL"):
        warnings.append(f"{name}: TAOTOKEN_MODEL is not set; test-inference and the LLM judge need it")
    if raw.get("TAOTOKEN_BASE_URL") and not _padded(raw["TAOTOKEN_BASE_URL"]) and "TAOTOKEN_BASE_URL" in values:
        url, problem, notice, warning = check_base_url(f"{name}:{lines.get('TAOTOKEN_BASE_URL', 1)}",
                                                       raw["TAOTOKEN_BASE_URL"])
        if problem:
            problems.append(problem)
        if notice:
            notices.append(notice)
        if warning:
            warnings.append(warning)
        values["TAOTOKEN_BASE_URL"] = url
    for key, example in _OTHER_URLS.items():
        if raw.get(key) and not _padded(raw[key]) and key in values:
            problem = check_url(f"{name}:{lines.get(key, 1)}", key, raw[key], f"an http(s) URL, e.g. {example}",
                                f"set {key}={example}, or remove the line for the default", example)
            if problem is not None:
                problems.append(problem)
    model = raw.get("TAOTOKEN_MODEL")
    if model and not _padded(model) and "TAOTOKEN_MODEL" in values:
        problem = _model_problem(f"{name}:{lines.get('TAOTOKEN_MODEL', 1)}", model)
        if problem is not None:
            problems.append(problem)
    return values, problems


# The key file's URLs other than the gateway's (check_base_url), checked by check_url alone: their services want no
# particular path. (name: an example for the hint)
_OTHER_URLS = {"TINKER_BASE_URL": "https://tinker.thinkingmachines.dev/services/tinker-prod",
               "WANDB_BASE_URL": "https://api.wandb.ai"}


def _model_problem(where: str, model: str) -> Problem | None:
    """TAOTOKEN_MODEL as the gateway reads a model name: no blank, no invisible or control character (a zero-width
    space copied with the name: the gateway answers "model not found" after the stack started)."""
    odd = next(((n, c) for n, c in enumerate(model, 1)
                if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Zs")), None)
    if odd is None:
        return None
    n, c = odd
    found = ("a blank" if c == " " else
             f"U+{ord(c):04X} ({unicodedata.name(c, 'a control character')})") + f" at position {n}"
    return Problem(where, "TAOTOKEN_MODEL", found, "a model name without blanks or invisible characters, e.g. "
                   "claude-3-5-sonnet", "copy the model's id from the gateway's model list and retype it on a "
                   "plain keyboard")


# `$VAR`, `${VAR}`, `$(cmd)`: a shell would expand them; python-dotenv and compose do not do so the same way.
_SHELL_VALUE = re.compile(r"^\$(?:\{?[A-Za-z_][A-Za-z0-9_]*\}?|\()")


def _key_value_problem(where: str, key: str, value: str) -> Problem | None:
    """A key value that cannot be a real key: a placeholder, non-ASCII or whitespace. The value is never shown."""
    hint = f"paste the key from your account page over the whole value of {key}"
    half = len(value) // 2
    if len(value) >= 16 and len(value) % 2 == 0 and value[:half] == value[half:]:
        return Problem(where, key, f"the same {half} characters twice (a doubled paste)", "the key once",
                       hint + ", once")
    inside = next((n for n in (key, *KNOWN_NAMES) if n in value), None)
    if inside is not None:
        return Problem(where, key, f"a value with the name {inside} inside", "the key itself",
                       f"write {key}=<key> on one line; the value starts after the first =")
    if value in PLACEHOLDER_KEYS or any(word in value.lower() for word in _PLACEHOLDER_WORDS):
        return Problem(where, key, "the example's placeholder, not a key", "your real key",
                       hint + "; until then, remove the file to run offline")
    if not value.isascii():
        return Problem(where, key, "a value with non-ASCII characters", KEY_CHARACTERS,
                       hint)
    if any(c.isspace() or not c.isprintable() for c in value):
        return Problem(where, key, "a value with a space or a control character inside",
                       KEY_CHARACTERS, hint)
    # A quote left inside after dotenv's unquoting: a provider's key has none (a paste with its code around it). Not
    # for a password the user chose (HERMES_INFERENCE_KEY) or a name the stack does not know: those may hold one.
    quote = next((c for c in value if c in "\"'`"), None)
    if quote and key in KNOWN_NAMES and key != "HERMES_INFERENCE_KEY":
        return Problem(where, key, f"a value with a {quote} inside", KEY_CHARACTERS,
                       "quotes may surround the whole value (KEY=\"...\"), not stand inside it; " + hint)
    if "#" in value and key != "HERMES_INFERENCE_KEY":  # a provider's key has no "#"; a chosen password may
        return Problem(where, key, "a value with # inside (a comment typed right after the key?)", KEY_CHARACTERS,
                       "python-dotenv keeps a # that follows the value without a space as part of it; put a space "
                       "before # to start a comment")
    if value[-1] in _PASTE_TAILS:  # copied from code or a shell line along with its key: the gateway says only 401
        return Problem(where, key, f"a value ending in {value[-1]!r}", KEY_CHARACTERS,
                       f"remove the trailing {value[-1]!r}; " + hint)
    return None


KEY_CHARACTERS = "a key of ASCII letters, digits, '-', '_' and '.'"  # (no bare "." to end a sentence on)
# What a key copied out of code, a shell line or prose ends with, and no key does (not brackets: a password the user
# chose for HERMES_INFERENCE_KEY may end with one).
_PASTE_TAILS = frozenset(";,\\`")


_NON_SECRET_EXPECTED = {"TAOTOKEN_BASE_URL": f"the gateway root, e.g. {BASE_URL_EXAMPLE}",
                        "TINKER_BASE_URL": "the Tinker service URL", "WANDB_BASE_URL": "the wandb server URL",
                        "TAOTOKEN_MODEL": "a model name, e.g. claude-3-5-sonnet"}


# The secret line a key pasted on a non-secret one belongs on.
_KEY_HOMES = (("WANDB_", "WANDB_API_KEY"), ("TINKER_", "TINKER_API_KEY"))
# A token of 32 or more hex digits in one case (a wandb key is 40 lower-case ones): no URL or model name looks like
# it. Only for the values of non-secret lines: elsewhere such a token may be a commit or an image digest.
_HEX_TOKEN = re.compile(r"(?=.*\d)(?=.*[a-f])[0-9a-f]{32,}|(?=.*\d)(?=.*[A-F])[0-9A-F]{32,}")


def _key_shaped(value: str) -> bool:
    return looks_like_a_key(value) or bool(_HEX_TOKEN.fullmatch(value))


def _padded(value: str) -> bool:
    return bool(value) and (value != value.strip() or value[0] in "'\"" or value[-1] in "'\"")


def _expected(key: str) -> str:
    return f"the gateway root, e.g. {BASE_URL_EXAMPLE}" if key == "TAOTOKEN_BASE_URL" else "your gateway key"


def _clip(text: str, width: int = 40) -> str:
    # The line could not be parsed, so its value was never registered as a secret: show only the names of the key
    # file's table (keyfile_vars) and redact every other piece whatever characters it holds (/, +, = included). Any
    # upper-case word is not enough: a key of capitals and digits, or a piece of one cut at a blank, is one.
    # Quotes, colons and commas split pieces too, so a name typed YAML- or JSON-style ("NAME": value) is still shown.
    pieces = re.split(r"([\s=:,'\"]+)", text)
    text = "".join(p if not p or p in _SHOWN_NAMES or re.fullmatch(r"[\s=:,'\"]+", p) else redact(p) for p in pieces)
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------- base URL


_ENDPOINTS = ("/chat/completions", "/completions", "/messages", "/models", "/embeddings", "/responses")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "host.docker.internal")


def check_base_url(where: str, url: str, key: str = "TAOTOKEN_BASE_URL") -> tuple[str, Problem | None, str | None,
                                                                                  str | None]:
    """-> (normalised URL, problem, notice, warning). The gateway root: an http(s) URL without /v1, an endpoint path,
    a query or a fragment, spaces, or a trailing slash (normalised). Plain http beyond this machine is a warning.
    The one rule for the gateway URL, from the key file or from the environment (gateway.settings_from)."""
    fix = f"set {key}={BASE_URL_EXAMPLE}"
    problem = check_url(where, key, url, f"an http(s) URL of the gateway root, e.g. {BASE_URL_EXAMPLE}", fix,
                        BASE_URL_EXAMPLE)
    if problem is not None:
        return url, problem, None, None
    parts = urlsplit(url)
    if "@" in parts.netloc:
        host = parts.netloc.rsplit("@", 1)[1]
        root = urlunsplit((parts.scheme, host, parts.path, "", "")).rstrip("/")
        return url, Problem(where, key, _redact_url(url), "the gateway root without a user name or password",
                            f"set {key}={root} and put the key in TAOTOKEN_API_KEY"), None, None
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        root = urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")).rstrip("/")
        return url, Problem(where, key, _redact_url(url), "the gateway root without ?query or #fragment",
                            f"set {key}={root}; clients append paths to it"), None, None
    stripped = url.rstrip("/")
    lowered = stripped.lower()
    endpoint = next((e for e in _ENDPOINTS if lowered.endswith(e)), None)
    if endpoint is not None:
        root = re.sub(r"(/v1)+$", "", stripped[: -len(endpoint)], flags=re.IGNORECASE)
        return url, Problem(where, key, url, "the gateway root, not an endpoint",
                            f"set {key}={root}; clients add /v1{endpoint} themselves"), None, None
    if re.search(r"/v1$", stripped, re.IGNORECASE):
        root = re.sub(r"(/v1)+$", "", stripped, flags=re.IGNORECASE)
        return url, Problem(where, key, url, "the gateway root without /v1",
                            f"set {key}={root}; hermes-stack adds /v1 for OpenAI-style clients"), None, None
    notice = f"{where}: trailing slash removed from {key} (using {stripped})" if stripped != url else None
    warning = None
    if parts.scheme == "http" and (parts.hostname or "") not in _LOCAL_HOSTS:
        warning = (f"{where}: {key} is plain http to {parts.hostname}: the gateway key would cross the network "
                   "unencrypted; use https")
    return stripped, None, notice, warning


def check_url(where: str, key: str, url: str, expected: str, fix: str, example: str) -> Problem | None:
    """What makes `url` no URL an HTTP client can call, if anything: not http(s)://host, a character that is not
    printable ASCII (a zero-width space copied with it: httpx raises InvalidURL at the first call, with a
    traceback), a blank, a port the parser refuses or port 0. The one rule for every URL of the key file
    (TAOTOKEN_BASE_URL, through check_base_url; TINKER_BASE_URL, WANDB_BASE_URL)."""
    odd = next(((n, c) for n, c in enumerate(url, 1) if not c.isascii() or (not c.isprintable() and not c.isspace())),
               None)
    if odd is not None and _idna_host(url):
        odd = None  # an internationalised host name (bücher.example), which clients send IDNA-encoded
    if odd is not None:
        n, c = odd
        return Problem(where, key, f"U+{ord(c):04X} ({unicodedata.name(c, 'a control character')}) at position {n}",
                       "an ASCII URL", f"retype the URL on a plain keyboard (an invisible character came with a "
                       f"copy); {fix}")
    if not re.match(r"^https?://[^/\s]+", url):
        return Problem(where, key, url, expected, fix)
    if any(c.isspace() for c in url):
        return Problem(where, key, f"a URL with a space inside ({url!r})", "a URL without spaces",
                       f"retype it, e.g. {example}")
    try:  # the parser's own refusals (an unclosed [IPv6 address, a port that is no number or beyond 65535)
        port = urlsplit(url).port  # httpx refused it only at the first call, with a traceback
    except ValueError as exc:
        return Problem(where, key, f"{_redact_url(url)} ({exc})", expected, f"retype the host and port; {fix}")
    if port == 0:
        return Problem(where, key, f"{_redact_url(url)} (port 0)", "a port from 1 to 65535, or none for the "
                       "scheme's own", f"write the port the service listens on, or leave :0 out; {fix}")
    return None


def _idna_host(url: str) -> bool:
    """Every non-ASCII character of `url` lies in its host, which is printable letters and encodes as IDNA 2008 (as
    httpx sends it); an invisible character (U+200B, U+00A0) never does."""
    match = re.match(r"^https?://(?:[^@/\s]*@)?([^/:?#\s]+)", url)
    if match is None or any(not c.isascii() for c in url[match.end(1):] + url[:match.start(1)]):
        return False
    host = match.group(1)
    if any(not c.isascii() and (not c.isprintable() or unicodedata.category(c)[0] not in "LMN") for c in host):
        return False
    try:
        import idna  # the IDNA 2008 rules httpx encodes a host with (Python's own codec is IDNA 2003, laxer)

        idna.encode(host.lower())
    except (ImportError, UnicodeError, ValueError):  # idna.IDNAError is a UnicodeError
        return False
    return True


def openai_base_url(root: str) -> str:
    """OpenAI-style clients want <root>/v1."""
    return root.rstrip("/") + "/v1"


def anthropic_base_url(root: str) -> str:
    """Anthropic-style clients want the root itself (they add /v1/messages)."""
    return root.rstrip("/")


# ---------------------------------------------------------------- rules used by config validation


def check_tinker_key(keyfile: KeyFile) -> list[Problem]:
    """Tinker accepts only keys starting `tml-` (or a JWT, `eyJ`); a gateway key is refused by Tinker."""
    if keyfile.offline:
        return [Problem(str(keyfile.path), "TINKER_API_KEY", "no key file", "a Tinker key starting with tml-",
                        f"create {keyfile.path} with TINKER_API_KEY=tml-… (the Tinker engine needs it)")]
    value = keyfile.values.get("TINKER_API_KEY", "")
    prefix = next((p for p in TINKER_KEY_PREFIXES if value.startswith(p)), None)
    if keyfile.tinker_key_defaulted and prefix is not None:
        # The default is a validation aid only: compose_env keeps it out of the trainer (it is the gateway's line),
        # so a Tinker key written on TAOTOKEN_API_KEY's line would pass here and the trainer would start without one.
        return [Problem(str(keyfile.path), "TINKER_API_KEY", "no TINKER_API_KEY line (the Tinker key is on "
                        "TAOTOKEN_API_KEY's line)", "the Tinker key on its own TINKER_API_KEY line",
                        f"move it to a line TINKER_API_KEY=tml-… in {keyfile.path}: only that line reaches the "
                        "trainer; TAOTOKEN_API_KEY is the gateway's key")]
    if prefix is not None and len(value) < len(prefix) + TINKER_KEY_MIN_BODY:
        return [Problem(str(keyfile.path), "TINKER_API_KEY", f"only the prefix {prefix} and {len(value) - len(prefix)}"
                        " more characters", f"a whole Tinker key ({prefix} followed by the key itself)",
                        "copy the whole key from the Tinker console")]
    if prefix is not None:
        return []
    defaulted = keyfile.tinker_key_defaulted
    fix = (f"add a line TINKER_API_KEY=tml-… to {keyfile.path}" if defaulted
           else "put the Tinker key from the Tinker console on that line")
    return [Problem(
        str(keyfile.path), "TINKER_API_KEY", f"{redact(value)}{' (defaulted from TAOTOKEN_API_KEY)' if defaulted else ''}",
        "a Tinker key starting with tml- (or a JWT starting with eyJ)", f"Tinker refuses other keys; {fix}",
    )]

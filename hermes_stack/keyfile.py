""".env.taotoken: the one key file. Load it, check it, default TINKER_API_KEY, and redact every secret it holds.

Decisions (documented in the README's key-file section):
- Missing file = offline mode: a notice says gateway checks are skipped; not an error.
- Quotes around a value (`KEY="sk-…"`) are accepted: python-dotenv and `docker compose` both strip them. A notice
  asks to drop them because `docker run --env-file` keeps them literally.
- Whitespace or quote characters left *inside* the value after dotenv's own unquoting are an error, not normalised:
  compose would hand the containers the padded value while the controller used a trimmed one.
- A trailing slash on TAOTOKEN_BASE_URL is normalised with a notice; a trailing /v1 is an error (clients add it).
"""

from __future__ import annotations

import io
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from hermes_stack.errors import InputError, Problem

DEFAULT_PATH = Path(".env.taotoken")
PATH_ENV = "HERMES_KEYFILE"  # overrides the default path (so does --keyfile)

REQUIRED = ("TAOTOKEN_API_KEY", "TAOTOKEN_BASE_URL")
TINKER_KEY_PREFIXES = ("tml-", "eyJ")
PLACEHOLDER_KEYS = ("sk-replace-me", "tml-replace-me")
BASE_URL_EXAMPLE = "https://taotoken.net/api"

# A name is secret when one of its underscore-separated words is one of these (TAOTOKEN_BASE_URL is not).
_SECRET_WORDS = {"KEY", "TOKEN", "SECRET", "PASSWORD", "PASS", "PASSWD"}
# Shorter values are not redacted inside free text: replacing "1" or "true" everywhere would garble output.
_MIN_SECRET_LEN = 8
_KEYLIKE = re.compile(r"[A-Za-z0-9_.\-]{12,}")


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
        return {k: redact(v) if is_secret_name(k) else v for k, v in self.values.items()}


# ---------------------------------------------------------------- redaction


def is_secret_name(name: str) -> bool:
    return any(word in _SECRET_WORDS for word in name.upper().split("_"))


def redact(value: str) -> str:
    """`sk-abcdefgh1234abcd` -> `sk-…abcd`. Short values reveal nothing."""
    if len(value) < 12:
        return "…"
    return f"{value[:3]}…{value[-4:]}"


_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_environ_scanned = False


def register_secrets(values: Mapping[str, str | None]) -> None:
    """Remember the secret values among `values` so every later output line has them replaced."""
    global _pattern
    new = {v for k, v in values.items() if v and is_secret_name(k) and len(v) >= _MIN_SECRET_LEN}
    if new - _secrets:
        _secrets.update(new)
        # Longest first, so a key that contains another key is replaced whole.
        ordered = sorted(_secrets, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))


def forget_secrets() -> None:
    """For tests: drop every registered secret."""
    global _pattern, _environ_scanned
    _secrets.clear()
    _pattern = None
    _environ_scanned = True


def redact_known_secrets(text: str) -> str:
    """Replace every loaded secret value in `text`. Cheap when nothing is loaded (one check, no regex)."""
    global _environ_scanned
    if not _environ_scanned:
        # Inside containers the keys arrive as environment variables (compose env_file), not as a file.
        _environ_scanned = True
        register_secrets(os.environ)
    if _pattern is None:
        return text
    return _pattern.sub(lambda m: redact(m.group(0)), text)


# ---------------------------------------------------------------- loading


def resolve_path(path: str | Path | None = None) -> Path:
    if path is not None:
        return Path(path)
    return Path(os.environ.get(PATH_ENV) or DEFAULT_PATH)


def load_keyfile(path: str | Path | None = None, *, register: bool = True) -> KeyFile:
    """Load and check the key file. Raises InputError with every problem; returns notices/warnings otherwise."""
    path = resolve_path(path)
    name = str(path)
    if not path.is_file():
        return KeyFile(
            path=path,
            offline=True,
            notices=(
                (f"no key file at {name}: offline mode, gateway checks are skipped "
                f"(cp .env.taotoken.example {name} to enable them)"),
            ),
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InputError(Problem(name, "(file)", f"a file that cannot be read ({reason})", "a readable text file",
                                 f"check its owner and run `chmod 600 {name}`")) from exc
    raw, problems, notices, warnings = _parse(name, text)
    if register:
        register_secrets(raw)
    values, more = _check_values(name, raw, notices, warnings)
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


def _parse(name: str, text: str) -> tuple[dict[str, str], list[Problem], list[str], list[str]]:
    from dotenv import dotenv_values
    from dotenv.parser import parse_stream

    problems: list[Problem] = []
    notices: list[str] = []
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            first = binding.original.string.strip().splitlines()[0] if binding.original.string.strip() else ""
            problems.append(Problem(
                f"{name}:{line}", "syntax", f"a line python-dotenv cannot read ({_clip(first)})", "NAME=value",
                "one NAME=value per line, no quotes; `#` starts a comment",
            ))
            continue
        if binding.key is None or binding.value is None:
            continue
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
        loaded = dotenv_values(stream=io.StringIO(text))
    finally:
        logger.disabled = was_disabled
    raw = {k: v for k, v in loaded.items() if v is not None}
    return raw, problems, notices, []


def _check_values(
    name: str, raw: dict[str, str], notices: list[str], warnings: list[str]
) -> tuple[dict[str, str], list[Problem]]:
    problems: list[Problem] = []
    values = dict(raw)
    for key, value in raw.items():
        if _padded(value):
            shown = redact(value.strip(" \t'\"")) if is_secret_name(key) else value.strip(" \t'\"")
            problems.append(Problem(
                name, key, "a value with surrounding whitespace or quotes", "the bare value",
                f"write {key}={shown} with nothing around it",
            ))
    for key in REQUIRED:
        if key not in raw:
            problems.append(Problem(name, key, "no such line", _expected(key), f"add {key}=… to {name}"))
        elif raw[key] == "":
            problems.append(Problem(name, key, "an empty value", _expected(key), f"set {key}=… in {name}"))
    if raw.get("TAOTOKEN_API_KEY") in PLACEHOLDER_KEYS:
        warnings.append(f"{name}: TAOTOKEN_API_KEY is the example's placeholder; gateway calls will answer 401")
    if not raw.get("TAOTOKEN_MODEL"):
        warnings.append(f"{name}: TAOTOKEN_MODEL is not set; test-inference and the LLM judge need it")
    if raw.get("TAOTOKEN_BASE_URL") and not _padded(raw["TAOTOKEN_BASE_URL"]):
        url, problem, notice = check_base_url(name, raw["TAOTOKEN_BASE_URL"])
        if problem:
            problems.append(problem)
        if notice:
            notices.append(notice)
        values["TAOTOKEN_BASE_URL"] = url
    return values, problems


def _padded(value: str) -> bool:
    return bool(value) and (value != value.strip() or value[0] in "'\"" or value[-1] in "'\"")


def _expected(key: str) -> str:
    return f"the gateway root, e.g. {BASE_URL_EXAMPLE}" if key == "TAOTOKEN_BASE_URL" else "your gateway key"


def _clip(text: str, width: int = 40) -> str:
    # The line could not be parsed, so its key was never registered: hide anything that looks like one (long
    # lower/mixed-case tokens; variable names are upper case and stay readable).
    text = _KEYLIKE.sub(lambda m: m.group(0) if m.group(0).isupper() else redact(m.group(0)), text)
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------- base URL


def check_base_url(name: str, url: str) -> tuple[str, Problem | None, str | None]:
    """-> (normalised URL, problem, notice). The gateway root has no /v1 and no trailing slash."""
    key = "TAOTOKEN_BASE_URL"
    if not re.match(r"^https?://[^/\s]+", url):
        return url, Problem(name, key, url, f"an http(s) URL of the gateway root, e.g. {BASE_URL_EXAMPLE}",
                            f"set {key}={BASE_URL_EXAMPLE}"), None
    stripped = url.rstrip("/")
    if re.search(r"/v1$", stripped):
        root = re.sub(r"(/v1)+$", "", stripped)
        return url, Problem(name, key, url, "the gateway root without /v1",
                            f"set {key}={root}; hermes-stack adds /v1 for OpenAI-style clients"), None
    if stripped != url:
        return stripped, None, f"{name}: trailing slash removed from {key} (using {stripped})"
    return url, None, None


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
    if value.startswith(TINKER_KEY_PREFIXES):
        return []
    origin = " (defaulted from TAOTOKEN_API_KEY)" if keyfile.tinker_key_defaulted else ""
    return [Problem(
        str(keyfile.path), "TINKER_API_KEY", f"{redact(value)}{origin}",
        "a Tinker key starting with tml- (or a JWT starting with eyJ)",
        f"Tinker refuses other keys; add a line TINKER_API_KEY=tml-… to {keyfile.path}",
    )]

"""Redaction: no secret is ever printed. A process-wide registry of secret values (the key file's, the environment's,
the generated inference key) that every output line passes through, and the rules that say which names are secret.

- In the key file every value is secret except the table's plain names (hermes_stack.keyfile_vars).
- Elsewhere (environment, `compose config` output) a name is secret when it contains KEY, TOKEN, SECRET, PASS,
  CREDENTIAL or AUTH anywhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from hermes_stack.keyfile_vars import PATH_ENV, VARIABLES

NON_SECRET_NAMES = frozenset(v.name for v in VARIABLES if not v.secret)
# Shorter values are not redacted inside free text: replacing "1" or "true" everywhere would garble output.
_MIN_SECRET_LEN = 8
# Outside the key file (process environment, `compose config` output) a name is secret when it contains one of
# these, anywhere: TINKER_APIKEY and WANDB_APIKEY are secrets too.
_SECRET_PARTS = ("KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL", "AUTH")


def is_keyfile_secret(name: str) -> bool:
    """In the key file every value is secret except a short list of known names (base URLs, model names)."""
    return name not in NON_SECRET_NAMES


def is_secret_name(name: str) -> bool:
    """For names from elsewhere (environment, compose config): secret when the name contains KEY, TOKEN, … anywhere.
    The key file's own path variable is not."""
    upper = name.upper()
    return upper not in NON_SECRET_NAMES and upper != PATH_ENV and any(part in upper for part in _SECRET_PARTS)


def redact(value: str) -> str:
    """A value of 20 characters or more shows its first three and last four (`sk-…wxyz`), enough to tell which key
    it is. A shorter one shows nothing: seven characters of a 12-character password would be most of it."""
    if len(value) < 20:
        return "…"
    return f"{value[:3]}…{value[-4:]}"


_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
_environ_scanned = False


def register_secrets(values: Mapping[str, str | None], secret=is_secret_name) -> None:
    """Remember the values among `values` whose name is `secret` so every later output line has them replaced."""
    global _pattern
    new = {v for k, v in values.items() if v and secret(k) and len(v) >= _MIN_SECRET_LEN}
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


# A credential can hide where no name says "secret": in a URL (user:password@, ?token=…) or as a key pasted on the
# wrong line. Known key prefixes, then long unbroken mixed-case-and-digit tokens (no path, word or number looks like
# that; a hub id such as NousResearch/DeepHermes-3-Llama-3-3B-Preview is words joined by '-', not one token).
_KEY_PREFIXES = r"(?:sk-|tml-|eyJ|ghp_|gho_|github_pat_|hf_|xox[abprs]-|AKIA|glpat-)"
_SHAPED = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:" + _KEY_PREFIXES + r"[A-Za-z0-9_\-.]{8,}"
    r"|(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[a-z])(?=[A-Za-z0-9]*[A-Z])[A-Za-z0-9]{24,}(?![A-Za-z0-9]))")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>(),]+")


def looks_like_a_key(value: str) -> bool:
    """A value shaped like a credential (a known key prefix, or a long token of mixed case and digits)."""
    return bool(_SHAPED.fullmatch(value))


def _redact_url(url: str) -> str:
    """`https://user:pw@host/p?token=abc&x=1` -> `https://…@host/p?token=…&x=…`: userinfo and every query value."""
    scheme, _, rest = url.partition("://")
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        authority = "…@" + authority.rsplit("@", 1)[1]
    if "?" in tail:
        path, _, query = tail.partition("?")
        query, hash_, fragment = query.partition("#")
        query = "&".join(f"{part.split('=', 1)[0]}=…" if "=" in part else ("…" if part else "")
                         for part in query.split("&"))
        tail = f"{path}?{query}{hash_}{fragment}"
    return f"{scheme}://{authority}{tail}"


def redact_known_secrets(text: str) -> str:
    """Replace every loaded secret value in `text`, every URL's userinfo and query values, and every value shaped like
    a key wherever it stands (`redact` form). The registry part is one check when nothing is loaded."""
    global _environ_scanned
    if not _environ_scanned:
        # Inside containers the keys arrive as environment variables (compose env_file), not as a file.
        _environ_scanned = True
        register_secrets(os.environ)
    if _pattern is not None:
        text = _pattern.sub(lambda m: redact(m.group(0)), text)
    if "://" in text:
        text = _URL.sub(lambda m: _redact_url(m.group(0)), text)
    return _SHAPED.sub(lambda m: redact(m.group(0)), text)


def redact_config(text: str) -> str:
    """`compose config` inlines env_file values: hide every value whose name looks secret, plus known secrets."""

    def hide(match: re.Match) -> str:
        name, value = match.group(2), match.group(3)
        if not is_secret_name(name) or not value.strip('"\' '):
            return match.group(0)
        return f"{match.group(1)}{name}: {redact(value.strip(chr(34) + chr(39)))}"

    text = re.sub(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*): (.+)$", hide, text, flags=re.MULTILINE)
    return redact_known_secrets(text)

"""Output helpers: one red line per problem on stderr; every line goes through the key redactor."""

from __future__ import annotations

import sys
import traceback

from rich.console import Console

out = Console(highlight=False, soft_wrap=True, emoji=False)  # ":x:" is what was typed, not an emoji
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def _redact(text: str) -> str:
    from hermes_stack.redaction import redact_known_secrets

    return redact_known_secrets(text)


# Characters that would break a problem's one line or hide in it: control characters (a newline or NUL in a path,
# key or value the user typed), Unicode's line and paragraph separators, and the zero-width ones (a key that reads
# like a known one but is not). Shown escaped, as Python writes them.
_ESCAPED = {**{c: f"\\x{c:02x}" for c in (*range(32), 127)}, 9: "\\t", 10: "\\n", 13: "\\r",
            **{c: f"\\u{c:04x}" for c in (0x85, 0x200B, 0x200C, 0x200D, 0x2028, 0x2029, 0x2060, 0xFEFF)}}


def one_line(text: str) -> str:
    """`text` with the characters above escaped: an error, warning or notice stays one visible line. Applied after
    redaction, so a secret holding such a character is still found whole."""
    return text.translate(_ESCAPED)


def info(text: str) -> None:
    out.print(_redact(text), markup=False)


def notice(text: str) -> None:
    err.print(one_line(_redact(f"notice: {text}")), style="yellow", markup=False)


def warn(text: str) -> None:
    err.print(one_line(_redact(f"warning: {text}")), style="yellow", markup=False)


def report_error(lines: list[str], debug: bool) -> None:
    for line in lines:
        err.print(one_line(_redact(f"error: {line}")), style="bold red", markup=False)  # redacted, then escaped
    if debug:
        err.print(_redact(traceback.format_exc()), markup=False)
    sys.stderr.flush()

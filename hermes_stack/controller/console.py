"""Output helpers: one red line per problem on stderr; every line goes through the key redactor."""

from __future__ import annotations

import sys
import traceback

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _redact(text: str) -> str:
    from hermes_stack.redaction import redact_known_secrets

    return redact_known_secrets(text)


def info(text: str) -> None:
    out.print(_redact(text), markup=False)


def notice(text: str) -> None:
    err.print(_redact(f"notice: {text}"), style="yellow", markup=False)


def warn(text: str) -> None:
    err.print(_redact(f"warning: {text}"), style="yellow", markup=False)


def report_error(lines: list[str], debug: bool) -> None:
    for line in lines:
        err.print(_redact(f"error: {line}"), style="bold red", markup=False)
    if debug:
        err.print(_redact(traceback.format_exc()), markup=False)
    sys.stderr.flush()

"""The one log format of every service (trainer, inference, environment), at the level HERMES_LOG_LEVEL names, with
every line passed through the redactor. The trainer's per-step metric lines (trainer/metrics.py) are data, not logs,
and keep their own shape."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Literal

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def level_from(environ: Mapping[str, str]) -> str:
    """HERMES_LOG_LEVEL before the typed environment is read (ServiceEnv refuses a bad value, in this format)."""
    value = environ.get("HERMES_LOG_LEVEL", "").strip().upper()
    return value if value in LEVELS else "INFO"


class _Redact(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from hermes_stack.redaction import redact_known_secrets

        record.msg = redact_known_secrets(record.getMessage())
        record.args = ()
        return True


def setup_logging(level: str, quiet: Iterable[str] = ()) -> None:
    """Root logger to stdout in FORMAT at `level`; the `quiet` loggers (chatty libraries) at WARNING or above."""
    logging.basicConfig(level=level, format=FORMAT, stream=sys.stdout, force=True)
    for name in quiet:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Redact())

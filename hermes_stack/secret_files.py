"""Compose secret files -> a service's own process environment (README, "The key file"; docs/architecture.md).

Compose copies each secret into the container as /run/secrets/<name> before it starts (absent from `docker inspect`).
Each service calls `load_secrets()` first thing, which copies its secret files into its own process environment, so
the SDKs that read variables (tinker, wandb) and our own code read them as before. Which service gets which secret:
hermes_stack.keyfile_vars.VARIABLES.

Stdlib only, apart from this package's __init__ and keyfile_vars (stdlib too): the healthcheck (hermes_stack.health) imports it on every probe,
which must stay light (the typed service environment, hermes_stack.service_env, imports pydantic).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from hermes_stack.keyfile_vars import READ

SECRETS_DIR = Path("/run/secrets")
INFERENCE_KEY_ENV = "HERMES_INFERENCE_KEY"

# Compose secret name -> the variable it carries: every secret of the key-file table, its name in lower case.
SECRETS = {v.name.lower(): v.name for v in READ if v.secret}


def load_secrets(environ: MutableMapping[str, str] | None = None, directory: Path | None = None) -> list[str]:
    """Copy this container's secret files into `environ` (os.environ by default); the names copied.

    A value already in the environment wins (tests and host runs set variables directly)."""
    environ = os.environ if environ is None else environ
    directory = SECRETS_DIR if directory is None else directory
    loaded = []
    for name, variable in SECRETS.items():
        path = directory / name
        if environ.get(variable) or not path.is_file():
            continue
        value = path.read_text(encoding="utf-8").strip()
        if value:
            environ[variable] = value
            loaded.append(variable)
    return loaded

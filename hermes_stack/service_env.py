"""Which key-file variables reach which service, and how (README, "The key file"; docs/architecture.md, Runtime).

The controller reads the one key file ($HERMES_KEYFILE, --keyfile, else .env.taotoken) and hands compose its values
in compose's own process environment (never on the argv, never in a compose file). Compose then gives each service
only what it needs:
- secrets as Compose secrets (`secrets: {environment: VAR}`): compose copies the value into the container as
  /run/secrets/<name> before it starts, so it is not in `docker inspect` (Engine 20.10 + Compose v2.40.3, tested);
- the non-secret names (base URLs, the gateway model) as plain `environment:` entries.
Each service calls `load_secrets()` first thing, which copies its secret files into its own process environment, so
the SDKs that read variables (tinker, wandb) and our own code read them as before.

Stdlib only: the healthcheck (hermes_stack.health) imports it in the atropos image too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from hermes_stack.errors import InputError, Problem

SECRETS_DIR = Path("/run/secrets")
INFERENCE_KEY_ENV = "HERMES_INFERENCE_KEY"
UNLOCK_ENV = "HERMES_UNLOCK"

# Compose secret name -> the variable it carries. Names are the variables in lower case.
SECRETS = {
    "hermes_inference_key": INFERENCE_KEY_ENV,
    "taotoken_api_key": "TAOTOKEN_API_KEY",
    "tinker_api_key": "TINKER_API_KEY",
    "wandb_api_key": "WANDB_API_KEY",
}
# Key-file variables that are not secret and travel as plain environment entries.
PLAIN = ("TAOTOKEN_BASE_URL", "TAOTOKEN_MODEL", "TINKER_BASE_URL")

# Variable -> the services that receive it (compose.base.yml must agree: tests/static checks it).
# The gateway key goes only to gateway-check (the layer-1 check) and the environment (the LLM judge); test-inference
# runs on the host and reads the key file itself. Atropos never calls the gateway nor the inference service.
RECEIVERS: dict[str, tuple[str, ...]] = {
    INFERENCE_KEY_ENV: ("inference", "trainer", "environment"),
    "TAOTOKEN_API_KEY": ("gateway-check", "environment"),
    "TAOTOKEN_BASE_URL": ("gateway-check", "environment"),
    "TAOTOKEN_MODEL": ("gateway-check", "environment"),
    "TINKER_API_KEY": ("trainer",),
    "TINKER_BASE_URL": ("trainer",),
    "WANDB_API_KEY": ("trainer", "environment"),
}


def compose_environment(values: Mapping[str, str], inference_key: str, unlock: bool) -> dict[str, str]:
    """The variables compose's process needs: every name above (empty when the key file lacks it: compose then
    creates no secret file, and a plain `docker compose up` without them stops at once), plus HERMES_UNLOCK.

    `values` are the key file's own lines (a defaulted TINKER_API_KEY is a validation construct, not a line)."""
    env = {name: values.get(name) or "" for name in RECEIVERS}
    env[INFERENCE_KEY_ENV] = inference_key
    env[UNLOCK_ENV] = "1" if unlock else "0"
    return env


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


def unlock_from(environ: Mapping[str, str]) -> bool:
    """HERMES_UNLOCK: "1" when the controller ran with --unlock, so the services accept what the controller did."""
    value = environ.get(UNLOCK_ENV, "").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise InputError(Problem("(environment)", UNLOCK_ENV, repr(value), "0 or 1",
                             "hermes-stack up sets it: 1 with --unlock, else 0"))

"""Compose's process environment for the stack: what the controller hands every service through compose."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hermes_stack.secret_files import SECRETS

if TYPE_CHECKING:
    from hermes_stack.config.loader import StackConfig


# The label every service carries (compose.base.yml, x-service): a digest of the secrets, so a changed one recreates
# the containers that hold the old.
SECRETS_DIGEST = "HERMES_SECRETS_DIGEST"
SECRETS_LABEL = "io.hermes-stack.secrets"


def secrets_digest(env: Mapping[str, str], salt: bytes) -> str:
    """16 hex digits of HMAC-SHA256 over every secret variable in `env` (pure). Salted with a random value kept in
    .hermes/ (0600): the label is in `docker inspect`, and a short user-chosen key must not be guessable from it."""
    material = json.dumps({name: env.get(name, "") for name in sorted(SECRETS.values())}).encode()
    return hmac.new(salt, material, hashlib.sha256).hexdigest()[:16]


def compose_env(stack: StackConfig | None, key: str, base_image: str | None, unlock: bool = False,
                salt: bytes | None = None) -> dict[str, str]:
    """Compose's process environment: the key file's variables for the services that need them (secrets become
    Compose secrets), the service environment `up` hands every service (hermes_stack.service_env: the inference key,
    HERMES_UNLOCK, the GPU memory split, names, the user's tuning knobs), and the controller's own selectors; with
    `salt`, the secrets' digest (SECRETS_DIGEST)."""
    from hermes_stack.service_env import ServiceEnv, compose_environment

    keyfile = getattr(stack, "keyfile", None)
    values = {} if keyfile is None or keyfile.offline else dict(keyfile.values)
    if keyfile is not None and keyfile.tinker_key_defaulted:
        values.pop("TINKER_API_KEY", None)  # the default is a validation aid; the gateway key stays out of the trainer
    env = compose_environment(values, ServiceEnv.for_stack(stack, key, unlock))
    if stack is not None:
        env["HERMES_ATROPOS_PORT"] = str(stack.config.atropos.api_port)  # compose.base.yml's ports and run-api
    if base_image:
        env["HERMES_BASE_IMAGE"] = base_image
    if salt is not None:
        env[SECRETS_DIGEST] = secrets_digest(env, salt)
    return env

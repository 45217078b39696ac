"""Compose's process environment for the stack: what the controller hands every service through compose."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hermes_stack.config.loader import StackConfig


def compose_env(stack: StackConfig | None, key: str, base_image: str | None, unlock: bool = False) -> dict[str, str]:
    """Compose's process environment: the key file's variables for the services that need them (secrets become
    Compose secrets), the service environment `up` hands every service (hermes_stack.service_env: the inference key,
    HERMES_UNLOCK, the GPU memory split, names, the user's tuning knobs), and the controller's own selectors."""
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
    return env

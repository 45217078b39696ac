"""Compose's process environment for the stack: what the controller hands every service through compose."""

from __future__ import annotations


def compose_env(stack, key: str, base_image: str | None, unlock: bool = False) -> dict[str, str]:
    """Compose's process environment: the key file's variables for the services that need them (secrets become
    Compose secrets, see hermes_stack.service_env), the inference key, HERMES_UNLOCK, ports and names."""
    from hermes_stack.service_env import compose_environment

    keyfile = getattr(stack, "keyfile", None)
    values = {} if keyfile is None or keyfile.offline else dict(keyfile.values)
    if keyfile is not None and keyfile.tinker_key_defaulted:
        values.pop("TINKER_API_KEY", None)  # the default is a validation aid; the gateway key stays out of the trainer
    env = compose_environment(values, key, unlock)
    if stack is not None:
        env["HERMES_ATROPOS_PORT"] = str(stack.config.atropos.api_port)
        env["HERMES_INFERENCE_PORT"] = str(stack.settings.inference.port)
        # One name for the inference service, its healthcheck and the trainer's dry-run.
        env["HERMES_SERVED_MODEL_NAME"] = stack.settings.inference.model_path
        env.update(split_env(stack))
        # Every service resolves the same configuration: the catalog model selected by --model, if any.
        env["HERMES_MODEL"] = getattr(stack, "model", None) or ""
    if base_image:
        env["HERMES_BASE_IMAGE"] = base_image
    return env


def split_env(stack) -> dict[str, str]:
    """The GPU memory split `validate` printed, for the services: SGLang's --mem-fraction-static and the torch
    engine's micro-batch size (empty off the gpu profile or when the GPU size is unknown)."""
    from hermes_stack.commands.validate import gpu_split

    split = gpu_split(stack)
    if split is None:
        return {}
    return {"HERMES_SGLANG_MEM_FRACTION": f"{split.mem_fraction_static:.2f}",
            "HERMES_MICRO_BATCH_SIZE": str(split.micro_batch)}

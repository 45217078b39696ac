"""What the inference service needs from the environment and the config files (docs/architecture.md, Runtime).

Reads HERMES_CONFIG_DIR, HERMES_ALGO, HERMES_PROFILE, HERMES_UNLOCK, HERMES_INFERENCE_KEY (required: the service
refuses to start without it), HERMES_EMBEDDED_MODEL, HERMES_DATA_DIR (and HERMES_INFERENCE_PORT /
HERMES_INFERENCE_DEVICE / HERMES_SGLANG_* to override). The key is never printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hermes_stack.config.profiles import EMBEDDED_MODEL
from hermes_stack.errors import InputError, Problem
from hermes_stack.modelcore import catalog

DEFAULT_EMBEDDED_MODEL = "/opt/hermes/embedded-model"


@dataclass(frozen=True)
class ServiceConfig:
    server: str  # "builtin" | "sglang"
    port: int
    model_path: str  # resolved to a directory or hub id
    served_model: str
    api_key: str | None
    data_dir: Path | None
    device: str = "cpu"
    engine: str = "auto"
    lora_rank: int | None = None
    sglang_port: int = 30000
    sglang_tp: int = 1
    sglang_mem_fraction: float | None = None
    context_length: int | None = None
    online: bool = False  # the gpu profile with a hub id: Hugging Face access on (hermes_stack.hub)

    def describe(self) -> str:
        return (f"backend {self.server}, model {self.model_path} (served as {self.served_model}), port {self.port}, "
                f"device {self.device}, auth {'on' if self.api_key else 'OFF'}")


def _settings_dict(env: Mapping[str, str]) -> tuple[dict, str]:
    """Resolved settings (profile overrides applied, through the one config loader) as a plain dict, and their file."""
    from hermes_stack.config.loader import load_stack
    from hermes_stack.service_env import unlock_from

    # HERMES_UNLOCK: the same locked-field rule as the controller (`up --unlock`), not a blanket unlock.
    stack = load_stack(env.get("HERMES_ALGO", "grpo"), Path(env.get("HERMES_CONFIG_DIR", "configs")),
                       profile=env.get("HERMES_PROFILE", "gpu"), unlock=unlock_from(env),
                       model=env.get("HERMES_MODEL") or None)
    return stack.settings.model_dump(), str(stack.settings_path)


def _int_env(env: Mapping[str, str], key: str, default: int) -> int:
    value = env.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise InputError(Problem("(environment)", key, repr(value), "an integer")) from exc


def load_service_config(env: Mapping[str, str]) -> ServiceConfig:
    if not env.get("HERMES_INFERENCE_KEY"):
        # Refused before the model loads: a service without a key would leave every route open.
        raise InputError(Problem("(environment)", "HERMES_INFERENCE_KEY", "no value",
                                 "the key that protects the inference service",
                                 "start the stack with `hermes-stack up`, which generates one; by hand, set the "
                                 "Compose secret hermes_inference_key (variable HERMES_INFERENCE_KEY)"))
    settings, source = _settings_dict(env)
    inference = settings.get("inference", {})
    server = env.get("HERMES_INFERENCE_SERVER") or inference.get("server", "builtin")
    if server not in ("builtin", "sglang"):
        raise InputError(Problem(source, "inference.server", repr(server), '"builtin" or "sglang"'))
    model_path = inference.get("model_path", EMBEDDED_MODEL)
    if model_path == EMBEDDED_MODEL:
        model_path = env.get("HERMES_EMBEDDED_MODEL", DEFAULT_EMBEDDED_MODEL)
    model_path = catalog.local_dir(model_path, env)
    engine = settings.get("trainer", {}).get("engine", "auto")
    tinker = settings.get("tinker", {})
    data_dir = env.get("HERMES_DATA_DIR")
    from hermes_stack.hub import needs_hub

    return ServiceConfig(
        server=server,
        port=_int_env(env, "HERMES_INFERENCE_PORT", int(inference.get("port", 8001))),
        model_path=model_path,
        served_model=env.get("HERMES_SERVED_MODEL_NAME") or inference.get("model_path", model_path),
        api_key=env.get("HERMES_INFERENCE_KEY") or None,
        data_dir=Path(data_dir) if data_dir else None,
        device=env.get("HERMES_INFERENCE_DEVICE", "cpu"),
        engine=engine,
        # LoRA serving enabled at launch whenever the trainer pushes adapters: SGLang refuses /load_lora_adapter
        # otherwise, and the flag cannot be turned on later.
        lora_rank=int(tinker.get("lora_rank", 32)) if server == "sglang" and policy_is_lora(engine, model_path) else None,
        sglang_port=_int_env(env, "HERMES_SGLANG_PORT", 30000),
        sglang_tp=_int_env(env, "HERMES_SGLANG_TP", 1),
        sglang_mem_fraction=_fraction_env(env, "HERMES_SGLANG_MEM_FRACTION"),
        online=needs_hub(env.get("HERMES_PROFILE", "gpu"), model_path),
    )


def policy_is_lora(engine: str, model_path: str) -> bool:
    """Tinker always trains a LoRA adapter; the torch engine does for every model but the embedded tiny one (it
    is fully fine-tuned: hermes_stack.trainer.engine_torch, `use_lora`). `auto` may become either: LoRA."""
    if engine in ("tinker", "auto"):
        return True
    from hermes_stack.modelcore.embedded import is_embedded_model

    return not is_embedded_model(model_path)


def _fraction_env(env: Mapping[str, str], key: str) -> float | None:
    value = env.get(key)
    if not value:
        return None
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction < 1:
        raise InputError(Problem("(environment)", key, repr(value), "a fraction between 0 and 1",
                                 "hermes-stack validate computes it from the GPU memory"))
    return fraction


def build_backend(cfg: ServiceConfig):
    if cfg.server == "builtin":
        from hermes_stack.inference.builtin import BuiltinBackend

        if not Path(cfg.model_path).is_dir():
            raise InputError(Problem("settings", "inference.model_path", cfg.model_path,
                                     "a local model directory for the builtin backend",
                                     "the embedded profile uses $HERMES_EMBEDDED_MODEL; no hub downloads offline"))
        return BuiltinBackend(cfg.model_path, served_model=cfg.served_model, device=cfg.device)
    from hermes_stack.inference.sglang import SGLangBackend, SGLangLaunch

    spec = SGLangLaunch(model_path=cfg.model_path, served_model=cfg.served_model, port=cfg.sglang_port,
                        tp=cfg.sglang_tp, mem_fraction_static=cfg.sglang_mem_fraction, max_lora_rank=cfg.lora_rank)
    return SGLangBackend(spec, cfg.api_key)

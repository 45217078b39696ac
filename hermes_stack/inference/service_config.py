"""What the inference service needs from its environment (hermes_stack.service_env.ServiceEnv) and the config files
(docs/architecture.md, Runtime).

The configuration comes from service_env.load_service_stack, like every service's; its typed inference section is
the one source of the backend, port and model (ServiceEnv's HERMES_INFERENCE_SERVER / HERMES_INFERENCE_PORT override
them when set). HERMES_INFERENCE_KEY is required: the service refuses to start without it. The key is never printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hermes_stack.errors import InputError, Problem
from hermes_stack.modelcore.location import model_location, trains_lora
from hermes_stack.secret_files import INFERENCE_KEY_ENV


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
    host: str = "0.0.0.0"
    log_level: str = "INFO"

    def describe(self) -> str:
        return (f"backend {self.server}, model {self.model_path} (served as {self.served_model}), port {self.port}, "
                f"device {self.device}, auth {'on' if self.api_key else 'OFF'}")


def load_service_config(environ: Mapping[str, str] | None = None) -> ServiceConfig:
    """The inference service's settings from `environ` (os.environ by default) and the config files."""
    from hermes_stack.hub import needs_hub
    from hermes_stack.service_env import ServiceEnv, load_service_stack

    env = ServiceEnv.from_environ(environ)
    if not env.key:
        # Refused before the model loads: a service without a key would leave every route open.
        raise InputError(Problem("(environment)", INFERENCE_KEY_ENV, "no value",
                                 "the key that protects the inference service",
                                 "start the stack with `make up`, which generates one; by hand, set the "
                                 f"Compose secret hermes_inference_key (variable {INFERENCE_KEY_ENV})"))
    stack = load_service_stack(env)
    inference, engine = stack.settings.inference, stack.settings.trainer.engine
    server = env.inference_server or inference.server
    configured = inference.model_path
    model_path = model_location(configured, env.embedded_model, env.models_dir)
    return ServiceConfig(
        server=server,
        port=env.inference_port or inference.port,
        model_path=model_path,
        served_model=env.served_model_name or configured,
        api_key=env.key,
        data_dir=env.data_dir,
        device=env.inference_device,
        engine=engine,
        # LoRA serving enabled at launch whenever the trainer pushes adapters: SGLang refuses /load_lora_adapter
        # otherwise, and the flag cannot be turned on later.
        lora_rank=stack.settings.tinker.lora_rank if server == "sglang" and trains_lora(engine, model_path, stack.settings.tinker.lora_rank) else None,
        sglang_port=env.sglang_port,
        sglang_tp=env.sglang_tp,
        sglang_mem_fraction=env.sglang_mem_fraction,
        # A rollout never exceeds max_token_length (prompt + completion): SGLang's context is cut to it rather than
        # the model's own (40,960 for Qwen3-8B), so a longer request is refused, not served past the trainer's limit.
        context_length=stack.config.rollout.max_token_length,
        online=needs_hub(env.profile, model_path),
        host=env.inference_host,
        log_level=env.log_level,
    )


def build_backend(cfg: ServiceConfig):
    if cfg.server == "builtin":
        from hermes_stack.inference.builtin import BuiltinBackend

        if not Path(cfg.model_path).is_dir():
            raise InputError(Problem("settings", "inference.model_path", cfg.model_path,
                                     "a local model directory for the builtin backend",
                                     "the embedded profile uses $HERMES_EMBEDDED_MODEL; no hub downloads offline"))
        # The sampler in its own process: the front's requests and streamed answers would otherwise hold the
        # interpreter lock the sampler needs between torch ops (child_host.py, issue 22).
        return BuiltinBackend(cfg.model_path, served_model=cfg.served_model, device=cfg.device, sampler="process",
                              log_level=cfg.log_level)
    from hermes_stack.inference.sglang import SGLangBackend, SGLangLaunch

    spec = SGLangLaunch(model_path=cfg.model_path, served_model=cfg.served_model, port=cfg.sglang_port,
                        tp=cfg.sglang_tp, mem_fraction_static=cfg.sglang_mem_fraction, max_lora_rank=cfg.lora_rank,
                        context_length=cfg.context_length)
    return SGLangBackend(spec, cfg.api_key)

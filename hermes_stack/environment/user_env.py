"""A user's atroposlib BaseEnv file (environments/*.py), run unchanged with the stack's values where a laptop
config gets them wrong.

The file is imported here, in the environment container, and nowhere else (the host reads it with ast:
hermes_stack/environments_catalog.py). Its `config_init()` gives its own (env config, server configs); the stack
then replaces, and logs one line per replaced value (found, used):

- every server config: base_url, api_key, model_name, server_type -> our inference service, its internal key, the
  served model name, "sglang" (the service speaks SGLang's API, built-in or real: atroposlib's SGLangServer sends
  completion/chat_completion to the same OpenAI routes its OpenAIServer would, and managed_server, which Atropos'
  own environments use for token ids and log-probs, refuses an "openai" server); health_check off (compose's
  healthcheck gates the inference service; atroposlib's probe would cost one generation a second);
- tokenizer_name -> the served model's tokenizer; rollout_server_url -> our Atropos;
- use_wandb -> the stack's [wandb] setting (and a key); wandb_name -> settings' wandb.name when set;
- group_size, batch_size (sequences per step), max_token_length -> our [rollout] (the memory plan and the trainer
  use the same values); total_steps -> [trainer] num_steps; ensure_scores_are_not_same -> on for groups (GRPO),
  off for PPO's groups of one; max_batches_offpolicy -> trainer.max_staleness (at least 1; runtime.py says why).

The class then runs with the stack's behaviour mixed in (stack_behaviour.StackBehaviour: readiness marker,
registering again, None groups counted). When atroposlib would pick its SGLangServer (server_type "sglang", the
class names no server_cls of its own), it gets pooled_http.PooledSGLangServer instead: the same /generate
requests over kept-alive connections.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_stack.environment.pooled_http import PooledSGLangServer, uses_upstream_sglang
from hermes_stack.environment.stack_behaviour import StackBehaviour
from hermes_stack.environments_catalog import EnvironmentInfo
from hermes_stack.errors import StackError

log = logging.getLogger("hermes_stack.environment")

# Env config fields the stack sets, and where our value comes from (runtime.build_configs' HermesEnvConfig).
ENV_FIELDS = ("tokenizer_name", "rollout_server_url", "use_wandb", "group_size", "batch_size", "max_token_length",
              "total_steps", "ensure_scores_are_not_same", "max_batches_offpolicy")
SERVER_FIELDS = ("base_url", "api_key", "model_name", "tokenizer_name", "health_check", "server_type")
SECRET_FIELDS = {"api_key"}


@dataclass(frozen=True)
class Replaced:
    key: str
    found: Any
    used: Any

    def line(self) -> str:
        found, used = (("(hidden)", "(the stack's internal key)") if self.key.rsplit(".", 1)[-1] in SECRET_FIELDS
                       else (repr(self.found), repr(self.used)))
        return f"{self.key}: found {found}, used {used}"


def load_class(project_root: Path, info: EnvironmentInfo) -> type:
    """Import the environment's file (its folder on sys.path, so sibling modules import) and return its class."""
    path = Path(project_root) / info.file
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"hermes_user_env_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise StackError(f"{info.file}: importing it failed: {type(exc).__name__}: {exc}") from exc
    cls = getattr(module, info.class_name, None)
    if cls is None:
        raise StackError(f"{info.file}: has no class {info.class_name} once imported")
    return cls


def with_stack_behaviour(cls: type) -> type:
    """The environment's class with the stack's behaviour before it in the MRO (its name and module kept)."""
    return type(cls.__name__, (StackBehaviour, cls), {"__module__": cls.__module__, "__doc__": cls.__doc__})


def apply_overrides(env_config, server_configs, ours_env, ours_server) -> tuple[Any, list, list[Replaced]]:
    """(env config, server configs, what was replaced): the file's configs with the stack's values (pure)."""
    from atroposlib.envs.base import APIServerConfig

    replaced: list[Replaced] = []
    update = {}
    for key in ENV_FIELDS:
        found, used = getattr(env_config, key, None), getattr(ours_env, key)
        if found != used:
            update[key] = used
            replaced.append(Replaced(key, found, used))
    if ours_env.use_wandb is False and getattr(env_config, "wandb_name", None) is None:
        update["wandb_name"] = ours_env.wandb_name  # /register-env refuses None
    elif ours_env.use_wandb:
        update["wandb_name"] = getattr(env_config, "wandb_name", None) or ours_env.wandb_name
    env_config = env_config.model_copy(update=update)
    if not isinstance(server_configs, list):  # ServerBaseline (atroposlib's default config_init): ours instead
        replaced.append(Replaced("server_configs", type(server_configs).__name__, "[our inference service]"))
        return env_config, [ours_server], replaced
    servers = []
    for n, server in enumerate(server_configs):
        if not isinstance(server, APIServerConfig):
            servers.append(server)
            continue
        change = {}
        for key in SERVER_FIELDS:
            found, used = getattr(server, key), getattr(ours_server, key)
            if found != used:
                change[key] = used
                replaced.append(Replaced(f"server_configs[{n}].{key}", found, used))
        servers.append(server.model_copy(update=change))
    return env_config, servers, replaced


def prepare(project_root: Path, info: EnvironmentInfo, ours_env, ours_server, served_model: str):
    """(the runnable class, env config, server configs) for the selected environment, the replacements logged."""
    cls = load_class(project_root, info)
    try:
        env_config, server_configs = cls.config_init()
    except Exception as exc:
        raise StackError(f"{info.file}: {info.class_name}.config_init() failed: {type(exc).__name__}: {exc}") from exc
    ours_server = ours_server.model_copy(update={"model_name": served_model})
    env_config, server_configs, replaced = apply_overrides(env_config, server_configs, ours_env, ours_server)
    log.info("environment %s (%s, %s): the file's config_init() is used; the stack replaced %d value(s)",
             info.name, info.class_name, info.file, len(replaced))
    for item in replaced:
        log.info("replaced %s", item.line())
    run = with_stack_behaviour(cls)
    run.ready_dir = ours_env.data_dir
    if inspect.isabstract(getattr(cls, "server_cls", None)) and uses_upstream_sglang(server_configs):
        run.server_cls = PooledSGLangServer
        log.info("its sglang servers use kept-alive connections (pooled_http.PooledSGLangServer)")
    return run, env_config, server_configs

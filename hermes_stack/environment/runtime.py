"""Build the atroposlib configs of the environment from our configs and the container's environment variables.

Decisions (the variables: hermes_stack.service_env.ServiceEnv, docs/architecture.md):
- rollout_server_url = HERMES_ATROPOS_URL, base_url = HERMES_INFERENCE_URL, api_key = HERMES_INFERENCE_KEY (falling
  back to the config files' URLs when run outside compose), server_type "sglang": atroposlib then POSTs
  `<base_url without /v1>/generate` and gets token ids and logprobs back.
- tokenizer_name is a LOCAL path: $HERMES_EMBEDDED_MODEL for the embedded tiny model, $HERMES_MODELS_DIR/<name>
  for a catalog model (hermes_stack/modelcore/catalog.py; the environment image holds its tokenizer),
  inference.model_path when it is a directory, the shared models cache's folder for a hub id the inference service
  downloaded. A hub name is accepted only online (offline it would hang ~49 s). The Hugging Face libraries are
  online only for the gpu profile with a hub tokenizer or gsm8k, with or without a key file (the key file is
  the gateway's, hub access is not: hermes_stack.hub.needs_hub); HF_HUB_OFFLINE=1 etc. otherwise.
- Atropos counts sequences: BaseEnvConfig.batch_size = [rollout] sequences_per_step (batch_size prompts x
  group_size).
- ensure_scores_are_not_same: off for group_size 1 (PPO: a "group" of one always has equal scores and would be
  dropped every time); on for GRPO (a group whose completions all score the same has zero advantage), and the
  environment counts and logs every group dropped that way so a flat reward curve is explainable.
- atroposlib's inference health probe (a 1-token chat completion every second) is off: compose's healthcheck gates
  the inference service, and the probe would cost one generation per second on the CPU tiny model.
- wandb: only with [wandb] enabled AND WANDB_API_KEY set. wandb_name is always set (None makes /register-env 422):
  settings' wandb.name (the blog's key) or hermes-<algo>-<environment>.
- max_batches_offpolicy = settings trainer.max_staleness (at least 1; default 1): at most that many batches wait in
  Atropos, so rollouts are about that many policy updates old at most; the trainer drops a group staler than the
  bound (each group carries the policy step it was generated with: env.py, trainer/staleness.py).
- steps_per_eval 0: an environment eval would stop rollouts meanwhile. The trainer evaluates the offline task's
  held-out split itself (every 10 steps, `eval_accuracy` in metrics.jsonl); `python -m hermes_stack.environment
  evaluate` covers other datasets on demand.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from atroposlib.envs.base import APIServerConfig, BaseEnvConfig
from pydantic import Field

from hermes_stack.errors import InputError, Problem, StackError
from hermes_stack.modelcore import catalog
from hermes_stack.modelcore.location import EMBEDDED_MODEL
from hermes_stack.service_env import ServiceEnv
from hermes_stack.tasks.datasets import ROLLOUT_SEED

if TYPE_CHECKING:
    from hermes_stack.config.loader import StackConfig


# Sequences (rows: a prompt once per completion) one rollout worker samples in one batched /generate at most
# (env.py chunk_prompts): the shipped PPO batch (256 prompts) and GRPO's (32 prompts x 8) are one chunk, and a GRPO
# chunk may draw up to 512 / group_size prompts (64 for 8) while the share of groups kept is low. One request and one
# post to Atropos per prompt cost the inference service's HTTP layer more CPU than its sampling (py-spy, issue 22:
# docs/benchmarks.md).
# The built-in server's rate grows with its batch (tiny model: 64 rows ~1800/s, 128 ~2500, 256 ~3000, 512 ~3500):
# at 512 (was 256) GRPO's rollout rate in loopback rose from 2243 / 2427 to 2547 / 2827 sequences/s. SGLang batches a
# long list as it batches concurrent requests.
CHUNK_ROWS = 512


def rollout_workers(prompts_per_batch: int, group_size: int, rows: int = CHUNK_ROWS, replicas: int = 1) -> int:
    """atroposlib's max_num_workers: one per `rows` sequences of a batch, and at least one per inference replica (a
    chunk is one request, which SGLang's router gives to one replica); GRPO one more, because the groups it drops
    for equal scores leave a chunk short of its share, and a second chunk in flight keeps the server sampling while
    the first is scored and posted."""
    needed = max(1, -(-prompts_per_batch * group_size // rows), replicas)
    return needed + 1 if group_size > 1 else needed


class HermesEnvConfig(BaseEnvConfig):
    """atroposlib's BaseEnvConfig plus what our environment needs (all from config_<algo>.toml / settings)."""

    dataset: str = "offline-arith"
    split: Literal["train", "test"] = "train"
    max_samples: int = 1000
    system_prompt: str | None = None
    fewshot: int = 0
    enable_thinking: bool = False  # [environment] enable_thinking: the chat template's switch (tasks/prompting.py)
    seed: int = ROLLOUT_SEED
    correctness_weight: float = 1.0
    format_weight: float = 0.1
    judge: bool = False
    judge_style: Literal["auto", "openai", "anthropic"] = "auto"
    judge_timeout_s: float = 20.0
    offline: bool = True  # no key file: no gateway (the judge); says nothing about the hub
    # Hugging Face hub access for the dataset: the profile and the dataset decide (hermes_stack.hub.needs_hub), not
    # the key file. A GPU user without a key file still loads gsm8k from the hub, as inference and trainer do.
    hub_access: bool = False
    # "inference": token ids + logprobs from the inference service (/generate); "gateway": text from the gateway
    # model (test-inference online), tokenised locally for the record, no logprobs.
    rollout_source: Literal["inference", "gateway"] = "inference"
    temperature: float = 1.0
    top_p: float = 1.0
    prompts_per_batch: int = Field(default=1, description="[rollout] batch_size: prompts (groups) per training step")
    data_dir: str | None = None  # $HERMES_DATA_DIR: readiness marker
    # Rollout chunks as streamed /generate requests (env.py _stream_scored): on for the built-in server, which sends
    # each row whole as it ends. Off for SGLang, whose stream also sends every row's progress (a token's worth of
    # events per row, each repeating the row's whole output so far), and behind its router.
    stream_rollouts: bool = False
    config_file: str = "config"
    config_dir: str = "configs"
    algo: str = "grpo"


def is_offline(environ: Mapping[str, str], keyfile_path: str | Path | None = None) -> bool:
    from hermes_stack.gateway import settings_from

    return settings_from(environ, keyfile_path) is None


def resolve_tokenizer(stack: StackConfig, env: ServiceEnv, offline: bool, override: str | None = None) -> str:
    """A local tokenizer directory (or, online only, a hub name)."""
    if override:
        return override
    model_path = stack.settings.inference.model_path
    if catalog.is_catalog_name(model_path):
        directory = catalog.local_dir(model_path, env.models_dir)
        if not Path(directory).is_dir():
            raise StackError(f"the tokenizer of {model_path} is not at {directory}; the environment image builds it "
                             "(docker/environment.Dockerfile), or set HERMES_MODELS_DIR to a folder holding "
                             f"`python -m hermes_stack.modelcore.catalog build {model_path} <folder>/{model_path}`")
        return directory
    if model_path == EMBEDDED_MODEL or stack.profile == "embedded":
        if env.embedded_model.is_dir():
            return str(env.embedded_model)
        # The tiny model is baked into the trainer image only; its character tokenizer is deterministic and built
        # from nothing, so the environment (another image, or the host for test-inference) builds its own copy.
        return str(embedded_tokenizer_dir())
    if Path(model_path).is_dir():
        return model_path
    from hermes_stack.hub import cached_model, is_hub_id

    if is_hub_id(model_path) and (cached := cached_model(model_path)) is not None:
        return str(cached)  # the inference service downloaded it into the shared cache (hermes-models)
    if offline:
        raise InputError(Problem(
            str(stack.settings_path), "inference.model_path", repr(model_path), "a local model directory offline",
            "the environment loads its tokenizer from the model; only the gpu profile uses the hub "
            "(use --profile gpu, or a local model path)",
        ))
    return model_path


def embedded_tokenizer_dir() -> Path:
    """A local copy of the embedded model's tokenizer (hermes_stack.modelcore.embedded.build_tokenizer)."""
    import logging
    import tempfile

    from hermes_stack.modelcore.embedded import build_tokenizer

    directory = Path(tempfile.gettempdir()) / f"hermes-embedded-tokenizer-{os.getuid()}"
    if not (directory / "tokenizer_config.json").is_file():
        try:
            build_tokenizer().save_pretrained(str(directory))
        except Exception as exc:
            raise StackError(f"cannot build the embedded tokenizer in {directory}: {type(exc).__name__}: {exc}; set "
                             "HERMES_EMBEDDED_MODEL to the embedded model directory") from exc
        logging.getLogger("hermes_stack.environment").info(
            "HERMES_EMBEDDED_MODEL is not a directory here: built the embedded tokenizer in %s", directory)
    return directory


def run_name(stack: StackConfig) -> str:
    """The wandb run name: settings' wandb.name when given, else one derived from the algorithm and the task."""
    return stack.settings.wandb.name or f"hermes-{stack.algo}-{stack.config.environment.name}"


def build_configs(
    stack: StackConfig,
    environ: Mapping[str, str] | None = None,
    *,
    tokenizer: str | None = None,
    inference_url: str | None = None,
    rollout_source: str = "inference",
    offline: bool | None = None,
) -> tuple[HermesEnvConfig, APIServerConfig]:
    """(env config, inference server config) for `stack` (a hermes_stack.config.loader.StackConfig)."""
    environ = os.environ if environ is None else environ
    env = ServiceEnv.from_environ(environ)
    offline = is_offline(environ) if offline is None else offline
    cfg, settings = stack.config, stack.settings
    # Before any Hugging Face library reads them. Online only when the gpu profile needs the hub (a hub tokenizer, or
    # gsm8k); offline otherwise: fail fast instead of retrying an unreachable hub. The image bakes neither.
    from hermes_stack.hub import needs_hub, set_hub_access

    hub_dataset = "openai/gsm8k" if cfg.environment.dataset == "gsm8k" else None
    hub_access = needs_hub(stack.profile, settings.inference.model_path, hub_dataset)
    set_hub_access(hub_access)
    rollout = cfg.rollout
    tokenizer_path = resolve_tokenizer(stack, env, not hub_access, tokenizer)
    use_wandb = bool(settings.wandb.enabled and environ.get("WANDB_API_KEY"))
    env_config = HermesEnvConfig(
        group_size=rollout.group_size,
        batch_size=rollout.sequences_per_step,
        prompts_per_batch=rollout.batch_size,
        max_token_length=rollout.max_token_length,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        total_steps=settings.trainer.num_steps,
        tokenizer_name=tokenizer_path,
        rollout_server_url=env.atropos_url or settings.atropos.rollout_server_url,
        use_wandb=use_wandb,
        wandb_name=run_name(stack),
        ensure_scores_are_not_same=rollout.group_size > 1,
        # The queue's bound follows the trainer's staleness bound (trainer/staleness.py): a batch waiting behind k
        # others is about k policy updates old when trained on.
        max_batches_offpolicy=max(1, settings.trainer.max_staleness),
        # One rollout worker per CHUNK_ROWS sequences of a batch (GRPO one more), each sampling its chunk in one
        # batched request (env.py). atroposlib's default is 8 per inference server, one request each: a PPO batch of
        # 256 one-completion groups then filled in 32 rounds of 8 small requests, and SGLang (which batches whatever
        # is in flight) never saw more than 8 requests at once.
        max_num_workers=rollout_workers(rollout.batch_size, rollout.group_size,
                                        replicas=max(1, len(env.replica_urls))),  # REPLICAS=N: the router's workers
        steps_per_eval=0,
        include_messages=False,
        dataset=cfg.environment.dataset,
        split=cfg.environment.split,
        max_samples=cfg.environment.max_samples,
        system_prompt=cfg.environment.system_prompt,
        fewshot=cfg.environment.fewshot,
        enable_thinking=cfg.environment.enable_thinking,
        correctness_weight=cfg.reward.correctness_weight,
        format_weight=cfg.reward.format_weight,
        judge=cfg.reward.judge,
        judge_style=cfg.reward.judge_style,
        judge_timeout_s=cfg.reward.judge_timeout_s,
        offline=offline,
        hub_access=hub_access,
        rollout_source=rollout_source,
        data_dir=str(env.data_dir) if env.data_dir else None,
        stream_rollouts=settings.inference.server == "builtin" and not env.replica_urls,
        config_file=str(stack.config_path),
        config_dir=str(Path(stack.config_path).parent),
        algo=stack.algo,
    )
    server_config = APIServerConfig(
        server_type="sglang",
        base_url=inference_url or env.inference_url or settings.inference.base_url,
        # openai.AsyncClient (built by atroposlib even for sglang) refuses an empty key; "none" is sent only as
        # a Bearer placeholder to an inference service that has no key.
        api_key=env.key or "none",
        model_name=settings.inference.model_path,
        tokenizer_name=tokenizer_path,
        health_check=False,
        timeout=600,
    )
    return env_config, server_config

"""Typed, strict models of the four config files. Field names follow the seed's files exactly.

Units worth knowing:
- `[rollout] batch_size` counts prompts (groups) per training step; one step consumes
  `batch_size * group_size` sequences, which is what the trainer registers with Atropos (Atropos counts sequences).
- `[rollout] max_token_length` is the per-sequence limit for rollouts (prompt + completion).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from hermes_stack.algos import Algo


class Strict(BaseModel):
    # extra="forbid": an unknown key is an error (with a "did you mean" hint added by the loader).
    # strict=True: "8" is not silently read as 8.
    # allow_inf_nan=False: TOML's inf/nan and JSON's Infinity/NaN are refused for every float field.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


LOG_LEVELS = ("debug", "info", "warning", "error")


def _known_level_any_case(value: Any) -> Any:
    # "INFO" means info (the blog writes it so); only the case is forgiven, and an unknown word is reported as written.
    return value.lower() if isinstance(value, str) and value.lower() in LOG_LEVELS else value


LogLevel = Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(_known_level_any_case)]


# ---------------------------------------------------------------- config_<algo>.toml


class AtroposSection(Strict):
    api_host: str = Field("localhost", description="kept from the seed's and the blog's files, with no effect here: "
                          "Atropos listens on every interface of its container (compose.base.yml) and is published "
                          "on 127.0.0.1:<api_port> only")
    api_port: int = Field(8000, ge=1, le=65535, description="Atropos's API port (settings atropos.rollout_server_url "
                                                           "must use the same)")
    log_level: LogLevel = Field("info", description="Atropos's log level (any case)")


class EnvironmentSection(Strict):
    name: str = Field("gsm8k", description="the environment's name (wandb run names use it)")
    dataset: str = Field("gsm8k", description='"gsm8k" (Hugging Face datasets, needs the hub), "offline-arith" (the '
                                              "built-in generated task for the CPU tiny model), or a path to a JSONL "
                                              'file in gsm8k\'s shape (question, answer ending in "#### N")')
    split: Literal["train", "test"] = Field("train", description="which split the environment serves")
    max_samples: int = Field(1000, ge=1, le=10_000_000, description="rows taken from the split (shuffled by seed)")
    system_prompt: str | None = Field(None, description="unset: the question plus a step-by-step instruction; set: "
                                                        "this system message, then `fewshot` solved train rows as "
                                                        "chat turns, then the question (tasks/prompting.py); \"\": "
                                                        "the bare question, no instruction (a model warm-started on "
                                                        "bare questions)")
    fewshot: int = Field(0, ge=0, le=8, description="solved train rows shown before the question (with system_prompt)")
    enable_thinking: bool = Field(
        False, description="thinking chat templates (the Qwen3 family, whose template reads `enable_thinking`): false "
                           "renders the prompt with enable_thinking=False so the model answers at once; true lets it "
                           "reason in <think>...</think> first (thousands of tokens: validate then wants "
                           "rollout.max_token_length >= 4096, rules.thinking_budget); templates without it ignore it")


class RolloutSection(Strict):
    group_size: int = Field(8, ge=1, le=1024, description="completions per prompt (GRPO's group)")
    batch_size: int = Field(32, ge=1, le=65_536, description="prompts (groups) per training step; a step consumes "
                                                             "batch_size x group_size sequences")
    max_token_length: int = Field(2048, ge=16, le=1_048_576,
                                  description="per-sequence limit for rollouts (prompt + completion)")
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="sampling temperature (OpenAI-style servers cap it "
                                                                "at 2); the engines use it for the ratio and the KL")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling's probability mass")

    @property
    def sequences_per_step(self) -> int:
        """What one training step consumes, and what Atropos counts: batch_size prompts x group_size completions."""
        return self.batch_size * self.group_size


class AlgorithmSection(Strict):
    name: Algo = Field(description="ppo or grpo")
    advantage_estimator: Literal["gae", "group_relative"] = Field(
        description="gae (PPO, with a value head) or group_relative (GRPO)")
    # Ranges for gamma/lam are rules (PPO: (0, 1]; GRPO ignores them), so the message can say why.
    gamma: float = Field(1.0, description="discount (PPO's GAE; GRPO ignores it)")
    lam: float = Field(0.95, description="GAE's lambda (PPO; GRPO ignores it)")
    clip_epsilon: float = Field(0.2, gt=0.0, lt=1.0, description="the clipped ratio's epsilon")
    entropy_coef: float = Field(0.0, ge=0.0, le=1.0, description="weight of the entropy bonus")
    value_loss_coef: float = Field(0.0, ge=0.0, le=100.0, description="critic learning rate / policy learning rate")
    kl_coef: float = Field(0.1, ge=0.0, le=100.0, description="weight of the KL regulariser to the reference model")
    kl_penalty: Literal["k3_loss", "k1_reward"] = Field(
        "k3_loss", description="the KL regulariser, the same in both engines (trainer/algorithms.py): k3 as a loss "
                               "term (log-ratio clamped), or k1 in the per-token reward")

    @property
    def uses_critic(self) -> bool:
        """GAE needs a value head (PPO); group-relative advantages do not (GRPO)."""
        return self.advantage_estimator == "gae"


class RewardSection(Strict):
    correctness_weight: float = Field(1.0, ge=0.0, le=1000.0, description="reward for a correct answer")
    format_weight: float = Field(0.1, ge=0.0, le=1000.0, description="reward for the `#### N` answer format")
    judge: bool = Field(False, description="an LLM judge through the gateway (off by default: it costs money)")
    judge_style: Literal["auto", "openai", "anthropic"] = Field(
        "auto", description="the judge's API shape; auto: Anthropic's for claude* models, OpenAI's otherwise")
    judge_timeout_s: float = Field(20.0, gt=0.0, le=3600.0, description="seconds one judge call may take")


class AlgoConfig(Strict):
    """config_<algo>.toml"""

    atropos: AtroposSection = Field(description="[atropos]: the rollout API")
    environment: EnvironmentSection = Field(description="[environment]: the task")
    rollout: RolloutSection = Field(description="[rollout]: sampling and batch shape")
    algorithm: AlgorithmSection = Field(description="[algorithm]: PPO or GRPO and their coefficients")
    reward: RewardSection = Field(description="[reward]: the rule reward and the optional judge")


# ---------------------------------------------------------------- settings_<algo>.json


class TinkerSection(Strict):
    lora_rank: int = Field(32, ge=1, le=4096, description="the LoRA adapter's rank (locked: the seed's value)")
    learning_rate: float = Field(4e-5, gt=0.0, le=1.0, description="the policy's learning rate (locked)")
    max_token_trainer_length: int = Field(9000, ge=16, le=1_048_576,
                                          description="the trainer's sequence limit, registered with Atropos (locked)")
    checkpoint_dir: str = Field("./temp/", description="relative to the data volume (<data>/checkpoints/...); "
                                                       "rules.checkpoint_dir_on_volume keeps it there")
    save_checkpoint_interval: int = Field(25, ge=1, le=10_000_000, description="steps between checkpoints")


# At most 64 inference replicas: a machine with more GPUs than that is not one compose stack; on CPU there was no bound
# at all, and `render --replicas 100000` wrote a 1.5 MB override and died on the argument list. --replicas too.
MAX_REPLICAS = 64


class InferenceSection(Strict):
    server: Literal["sglang", "builtin"] = Field("sglang", description="SGLang (GPU) or the built-in torch server")
    port: int = Field(8001, ge=1, le=65535, description="the inference service's port")
    replicas: int = Field(1, le=MAX_REPLICAS, description="inference servers behind SGLang's router (1: one server, no "
                                                      "router); on a GPU, one GPU per replica, the first on GPU 0 "
                                                      "(`make up REPLICAS=N`, docs/scaling.md)")
    model_path: str = Field("Qwen/Qwen3-8B", description='a hub id, a local model folder, a catalog name '
                                                         '(smollm2-135m) or "embedded" (the CPU tiny model)')
    api_key_env: str = Field(
        "HERMES_INFERENCE_KEY", description="the key-file variable holding the key that protects the inference "
                                            "service (no such line: the controller generates one; the paid gateway "
                                            "key must not double as it)")
    base_url_env: str = Field(
        "TAOTOKEN_BASE_URL", description="the blog's key: the variable holding the gateway's base URL; only "
                                         "TAOTOKEN_BASE_URL is read (compose hands that name to the gateway's "
                                         "callers), so rules.base_url_env_names_the_gateway_root accepts only it")
    base_url: str = Field("http://localhost:8001/v1", description="the URL the environment calls for rollouts "
                                                                  "(OpenAI style, ends in /v1; its port must equal "
                                                                  "`port`; absent: derived from `port`)")

    @model_validator(mode="before")
    @classmethod
    def _base_url_from_port(cls, data: Any) -> Any:
        if isinstance(data, dict) and "base_url" not in data and isinstance(data.get("port"), int):
            return {**data, "base_url": f"http://localhost:{data['port']}/v1"}
        return data


class AtroposLink(Strict):
    rollout_server_url: str = Field("http://localhost:8000", description="the URL the environment and the trainer "
                                                                         "use to reach Atropos (its port must equal "
                                                                         "[atropos] api_port)")


class SettingsAlgorithm(Strict):
    """Mirrors of config_<algo>.toml values (profiles.MIRRORED). Each may be left out; the loader fills a value set in
    only one of the two files into the other, and rules.settings_agree_with_config compares the rest."""

    name: Algo = Field(description="ppo or grpo (the same as the TOML's)")
    group_size: int | None = Field(None, ge=1, le=1024, description="mirror of [rollout] group_size (absent: the "
                                                                    "TOML's; PPO: 1)")
    kl_coef: float | None = Field(None, ge=0.0, le=100.0, description="mirror of [algorithm] kl_coef")
    value_loss_coef: float | None = Field(None, ge=0.0, le=100.0, description="mirror of [algorithm] value_loss_coef "
                                                                              "(the blog's PPO settings carry it)")


class TrainerSection(Strict):
    engine: Literal["auto", "torch", "tinker"] = Field(
        "auto", description="auto: tinker on a GPU VM with a Tinker key, torch otherwise")
    num_steps: int = Field(200, ge=1, le=10_000_000, description="training steps")
    micro_batch_size: int | None = Field(
        None, ge=1, le=1_000_000, description="torch engine: sequences per forward/backward pass; gradients "
                                              "accumulate over a minibatch's micro-batches (the result equals one "
                                              "full pass). null: the GPU memory split's value on gpu, else the "
                                              "whole minibatch")
    epochs: int = Field(2, ge=1, le=64, description="torch engine: passes over each batch, one optimiser step per "
                                                   "minibatch each (PPO's epochs); the Tinker engine takes one")
    minibatches: int = Field(1, ge=1, le=4096, description="torch engine: minibatches each pass splits a batch "
                                                          "into (batch_size x group_size sequences, drawn at "
                                                          "random), one optimiser step each; 1: the whole batch. The "
                                                          "Tinker engine takes one step per batch")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="the learning rate over the run: constant, or cosine from tinker.learning_rate "
                                "down to min_lr_ratio of it at num_steps (both engines; a resumed run continues it)")
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0, description="cosine: the learning rate at num_steps, as a share "
                                                                 "of tinker.learning_rate")
    lr_decay_start: float = Field(0.0, ge=0.0, lt=1.0, description="cosine: the share of num_steps trained at the full "
                                                                   "rate before the decay begins (0: from step 1)")
    max_staleness: int = Field(
        1, ge=0, le=64, description="policy updates a rollout group may lag the policy it trains (overlap of "
                                    "rollouts with training); a staler group is not trained on, and Atropos queues "
                                    "at most this many batches (at least 1). The ratio uses the behaviour log-probs")


class WandbSection(Strict):
    enabled: bool = Field(False, description="log to Weights & Biases (needs WANDB_API_KEY in the key file)")
    project: str = Field("hermes-stack", description="the wandb project")
    group: str | None = Field(None, description="the wandb group")
    name: str | None = Field(None, description="the wandb run name (the blog's key); absent: "
                                               "hermes-<algo>-<environment>")


class Settings(Strict):
    """settings_<algo>.json"""

    tinker: TinkerSection = Field(description="tinker: the seed's training values (three are locked)")
    inference: InferenceSection = Field(description="inference: the server, its model and its key")
    atropos: AtroposLink = Field(AtroposLink(), description="atropos: where the services reach Atropos")
    algorithm: SettingsAlgorithm = Field(description="algorithm: mirrors of the TOML's values")
    trainer: TrainerSection = Field(TrainerSection(), description="trainer: engine, steps, micro-batch")
    wandb: WandbSection = Field(WandbSection(), description="wandb: optional experiment tracking")


# The seed's values that tinker-atropos hard-coded (TinkerSection's defaults); changing them needs --unlock.
LOCKED = ("lora_rank", "learning_rate", "max_token_trainer_length")
LOCKED_FIELDS: dict[str, object] = {f"tinker.{name}": TinkerSection.model_fields[name].default for name in LOCKED}

"""Typed, strict models of the four config files. Field names follow the seed's files exactly.

Units worth knowing:
- `[rollout] batch_size` counts prompts (groups) per training step; one step consumes
  `batch_size * group_size` sequences, which is what the trainer registers with Atropos (Atropos counts sequences).
- `[rollout] max_token_length` is the per-sequence limit for rollouts (prompt + completion).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator


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
    api_host: str = "localhost"
    api_port: int = Field(8000, ge=1, le=65535)
    log_level: LogLevel = "info"


class EnvironmentSection(Strict):
    name: str = "gsm8k"
    # "gsm8k" (Hugging Face datasets, needs the hub), "offline-arith" (built-in generated task for the CPU tiny
    # model), or a path to a JSONL file in gsm8k's shape (question, answer ending in "#### N").
    dataset: str = "gsm8k"
    split: Literal["train", "test"] = "train"
    max_samples: int = Field(1000, ge=1, le=10_000_000)
    # The prompt (hermes_stack/tasks/prompting.py): unset, the question plus a step-by-step instruction; set, this
    # system message, then `fewshot` solved train rows as chat turns, then the question.
    system_prompt: str | None = None
    fewshot: int = Field(0, ge=0, le=8)
    # Thinking chat templates (the Qwen3 family: the template reads `enable_thinking`): false (the default) renders
    # the prompt with enable_thinking=False, so the model answers at once; true lets it reason in <think>...</think>
    # first, which takes thousands of tokens: validate then wants rollout.max_token_length >= 4096
    # (config/rules.py thinking_budget). Templates without the switch ignore it.
    enable_thinking: bool = False


class RolloutSection(Strict):
    group_size: int = Field(8, ge=1, le=1024)
    batch_size: int = Field(32, ge=1, le=65_536)
    max_token_length: int = Field(2048, ge=16, le=1_048_576)
    # OpenAI-style servers cap sampling temperature at 2.
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)

    @property
    def sequences_per_step(self) -> int:
        """What one training step consumes, and what Atropos counts: batch_size prompts x group_size completions."""
        return self.batch_size * self.group_size


class AlgorithmSection(Strict):
    name: Literal["ppo", "grpo"]
    advantage_estimator: Literal["gae", "group_relative"]
    # Ranges for gamma/lam are rules (PPO: (0, 1]; GRPO ignores them), so the message can say why.
    gamma: float = 1.0
    lam: float = 0.95
    clip_epsilon: float = Field(0.2, gt=0.0, lt=1.0)
    entropy_coef: float = Field(0.0, ge=0.0, le=1.0)
    value_loss_coef: float = Field(0.0, ge=0.0, le=100.0)
    kl_coef: float = Field(0.1, ge=0.0, le=100.0)
    # The KL regulariser, the same in both engines (trainer/algorithms.py): k3 as a loss term (log-ratio clamped),
    # or k1 in the per-token reward.
    kl_penalty: Literal["k3_loss", "k1_reward"] = "k3_loss"

    @property
    def uses_critic(self) -> bool:
        """GAE needs a value head (PPO); group-relative advantages do not (GRPO)."""
        return self.advantage_estimator == "gae"


class RewardSection(Strict):
    correctness_weight: float = Field(1.0, ge=0.0, le=1000.0)
    format_weight: float = Field(0.1, ge=0.0, le=1000.0)
    # Optional LLM judge through the gateway (environment issue). Off by default: it costs money.
    judge: bool = False
    judge_style: Literal["auto", "openai", "anthropic"] = "auto"
    judge_timeout_s: float = Field(20.0, gt=0.0, le=3600.0)


class AlgoConfig(Strict):
    """config_<algo>.toml"""

    atropos: AtroposSection
    environment: EnvironmentSection
    rollout: RolloutSection
    algorithm: AlgorithmSection
    reward: RewardSection


# ---------------------------------------------------------------- settings_<algo>.json


class TinkerSection(Strict):
    lora_rank: int = Field(32, ge=1, le=4096)
    learning_rate: float = Field(4e-5, gt=0.0, le=1.0)
    max_token_trainer_length: int = Field(9000, ge=16, le=1_048_576)
    # Relative to the data volume (<data>/checkpoints/...); rules.checkpoint_dir_on_volume keeps it there.
    checkpoint_dir: str = "./temp/"
    save_checkpoint_interval: int = Field(25, ge=1, le=10_000_000)


class InferenceSection(Strict):
    server: Literal["sglang", "builtin"] = "sglang"
    port: int = Field(8001, ge=1, le=65535)
    model_path: str = "Qwen/Qwen3-8B"
    # The name of a variable in the key file: the key that protects the inference service (when the key file has
    # no such line, the controller generates one: the paid gateway key must not double as it). The gateway root is
    # always TAOTOKEN_BASE_URL (it is the variable compose hands the gateway's callers).
    api_key_env: str = "HERMES_INFERENCE_KEY"
    # The URL the environment calls for rollouts (OpenAI style, ends in /v1). Its port must equal `port`.
    # Absent (the blog's file has none): derived from `port`.
    base_url: str = "http://localhost:8001/v1"

    @model_validator(mode="before")
    @classmethod
    def _base_url_from_port(cls, data: Any) -> Any:
        if isinstance(data, dict) and "base_url" not in data and isinstance(data.get("port"), int):
            return {**data, "base_url": f"http://localhost:{data['port']}/v1"}
        return data


class AtroposLink(Strict):
    # The URL the environment and the trainer use to reach Atropos. Its port must equal [atropos] api_port.
    rollout_server_url: str = "http://localhost:8000"


class SettingsAlgorithm(Strict):
    """Mirrors of config_<algo>.toml values (profiles.MIRRORED). Each may be left out; the loader fills a value set in
    only one of the two files into the other, and rules.settings_agree_with_config compares the rest."""

    name: Literal["ppo", "grpo"]
    group_size: int | None = Field(None, ge=1, le=1024)  # absent: the TOML's (PPO: 1)
    kl_coef: float | None = Field(None, ge=0.0, le=100.0)
    value_loss_coef: float | None = Field(None, ge=0.0, le=100.0)  # the blog's PPO settings carry it


class TrainerSection(Strict):
    # "auto": tinker when TINKER engine is usable on a GPU VM with a Tinker key, torch otherwise.
    engine: Literal["auto", "torch", "tinker"] = "auto"
    num_steps: int = Field(200, ge=1, le=10_000_000)
    # Torch engine: sequences per forward/backward pass; gradients accumulate over a minibatch's micro-batches (the
    # result equals one full pass). null: the whole minibatch at once (the CPU tiny model's choice).
    micro_batch_size: int | None = Field(None, ge=1, le=1_000_000)


class WandbSection(Strict):
    enabled: bool = False
    project: str = "hermes-stack"
    group: str | None = None
    name: str | None = None  # the wandb run name (the blog's key); absent: hermes-<algo>-<environment>


class Settings(Strict):
    """settings_<algo>.json"""

    tinker: TinkerSection
    inference: InferenceSection
    atropos: AtroposLink = AtroposLink()
    algorithm: SettingsAlgorithm
    trainer: TrainerSection = TrainerSection()
    wandb: WandbSection = WandbSection()


# The seed's values that tinker-atropos hard-coded; changing them needs --unlock.
LOCKED_FIELDS: dict[str, object] = {
    "tinker.lora_rank": 32,
    "tinker.learning_rate": 4e-5,
    "tinker.max_token_trainer_length": 9000,
}

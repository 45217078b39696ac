"""Profiles: dotted-key overrides applied on top of the loaded files.

`gpu` uses the files as written. `embedded` (CPU, offline; the default when there is no GPU) swaps in the offline
task, the built-in inference server, the tiny model baked into the trainer image and the torch engine, plus the tiny
model's tuned hyper-parameters. A catalog model (`--model smollm2-135m`, or that name as inference.model_path)
replaces the tiny model's overrides with CATALOG_CPU on CPU, and stands for its hub id on GPU.

To tune the tiny model, add keys to EMBEDDED (both algorithms) or EMBEDDED_BY_ALGO[algo] — nothing else; a key the
user should still be able to set in the files goes to EMBEDDED_DEFAULTS (applied only where the files keep the
model's default).
A key is `<section>.<field>` of either file: it goes to config_<algo>.toml when that file has the field, else to
settings_<algo>.json; write `settings.<section>.<field>` to force the JSON file. The MIRRORED keys
(group_size, kl_coef, value_loss_coef) are copied into settings' `algorithm` section so the two files keep agreeing.
"""

from __future__ import annotations

from typing import Any

from hermes_stack.config.models import AlgoConfig, Settings
from hermes_stack.modelcore.location import EMBEDDED_MODEL

PROFILES = ("gpu", "embedded")

EMBEDDED: dict[str, object] = {
    "environment.dataset": "offline-arith",
    "inference.server": "builtin",
    "inference.model_path": EMBEDDED_MODEL,
    "trainer.engine": "torch",
    # The tiny model's tuned hyper-parameters go here (trainer owner), measured with bench/learn.py.
    # GRPO: lr 5e-4 (1e-3 destabilised one seed of two: KL 0.7, held-out 0.00 at step 170).
    "tinker.learning_rate": 5e-4,
    # bench/learn.py (issue 22): 2 passes of 4 minibatches (8 optimiser steps of 64 sequences a batch) for both.
    # GRPO: 0.8 held-out at step 170 / 140 / 220 (seeds 0-2; 84 / 66 / 112 CPU s) where 4 whole-batch passes needed
    # 200 / 250 / 300 (138-203 CPU s); 4 passes of 4 minibatches: seed 1 stalled at 0.73 by step 300. PPO: at step
    # 260 / 160 / 250 (100 / 62 / 94 s), ending its 400 steps at 0.88 / 0.99 / 0.98, where 4 whole-batch passes
    # reached it at 180 / 330 / never (best 0.73) and swung late in the stack's runs (0.98 -> 0.66 in ten steps).
    "trainer.epochs": 2,
    "trainer.minibatches": 4,
    # prompt (<bos> + "47+2=": 6 tokens) + "#### 49" + eos (8) fits, with a token to spare: the environment's budget
    # is 9-10 new tokens. At 32 (25 new tokens) PPO's entropy bonus fed on the room: entropy 0.5 -> 0.9 and KL
    # 1.1-1.5 by step 20-100, held-out 0.00-0.13 at step 100-180 in the stack (issue 22), as in-process with 25.
    "rollout.max_token_length": 16,
}
EMBEDDED_BY_ALGO: dict[str, dict[str, object]] = {
    # PPO: lr 1e-3 reached 0.8 held-out at step 390 where 5e-4 needed ~600 (seed 0, same task).
    # value_loss_coef 1.0: the critic's learning rate is value_loss_coef x lr (trainer/algorithms.py), and this run
    # was tuned with the critic at the policy's rate, 1e-3.
    # KL weight 0.02 (issue 22, with 4 whole-batch passes): 0.8 held-out at step 290 / 200 (seeds 0 / 1) where 0.1
    # and 2 passes needed 530 / 460. Not for GRPO: at 0.02 its entropy collapsed (0.05-0.08) and seeds 1 and 2
    # stalled at held-out 0.69 and 0.32 by step 460-500 (seed 0: 0.8 at 310); GRPO keeps the shipped 0.1.
    "ppo": {"tinker.learning_rate": 1e-3, "algorithm.value_loss_coef": 1.0, "algorithm.kl_coef": 0.02},
}

# Keys the embedded profile (tiny model) sets only where the files leave them at the settings model's default, so
# a value the user wrote wins: how long the run is. Through the stack GRPO passes held-out 0.8 at steps 120-190 and
# PPO at 220-380 (bench/stack_learning.py, issue 22), so 200 steps stopped PPO before its rise. PPO runs 500, so that
# a late riser still has steps after 0.8 (at 400 steps its stack runs ended 0.83 / 0.83 / 0.94).
# PPO's schedule: the full rate for the first half of the run, then a cosine to 0.1x (issue 22; docs/benchmarks.md).
# Held-out accuracy plateaus below 1 in some runs once the trained sums are solved (in-process too). In-process with
# the stack's one-update lag (bench/learn.py --lag 1), a decay from half-way ended 1.00 / 1.00 / 0.94 / 0.99 / 1.00
# / 0.89 (seeds 0-5), from 3/4 0.99 / 1.00 / 0.83 / 0.95 / 0.96 (seeds 0-4). Through the stack, from half-way 6 runs
# ended 0.98 / 0.93 / 0.96 / 0.99 / 0.93 / 0.89 (0.8 after 107-155 s of training); from 3/4, 3 runs earlier the same
# day ended 0.83 / 0.87 / 0.89, and 3 runs the session before 0.96 / 0.95 / 0.94. A constant rate kept moving a
# solved policy (stack: 0.99 / 0.72 / 0.88 at 400 steps). A defaults key, so a decay start the user writes is kept,
# unless it is the settings' own default (0.0, "constant"), which reads as unset as 200 steps does: the shipped
# settings write num_steps 200. A constant rate: "min_lr_ratio": 1.0 (docs/configuration.md).
EMBEDDED_DEFAULTS: dict[str, object] = {"trainer.num_steps": 400}
EMBEDDED_DEFAULTS_BY_ALGO: dict[str, dict[str, object]] = {
    "ppo": {"trainer.num_steps": 500, "trainer.lr_schedule": "cosine", "trainer.lr_decay_start": 0.5}}


def embedded_defaults(algo: str) -> dict[str, object]:
    return {**EMBEDDED_DEFAULTS, **EMBEDDED_DEFAULTS_BY_ALGO.get(algo, {})}


def defaults_for(profile: str, algo: str, model: str | None, config: AlgoConfig,
                 settings: Settings) -> dict[str, object]:
    """embedded_defaults' keys whose value in the files (as written) is still the model's default; {} on the gpu
    profile and for a catalog model."""
    if profile != "embedded" or model:
        return {}
    files = {"config": config, "settings": settings}
    chosen = {}
    for key, value in embedded_defaults(algo).items():
        where, section, name = target_of(key)
        part = getattr(files[where], section)
        if getattr(part, name) == type(part).model_fields[name].default:
            chosen[key] = value
    return chosen


# A real pretrained model of the catalog (hermes_stack/modelcore/catalog.py) on CPU: `--model smollm2-135m` under the
# embedded profile. The built-in server and the torch engine as for the tiny model, but the model's own tokenizer and
# chat template, LoRA through peft, and the generated word problems (configs/word_problems.jsonl, the JSONL path).
# Sized for two CPU cores, where one forward+backward over a few sequences of ~80 tokens takes seconds: short
# prompts (one solved example teaches the format), ~16 new tokens, a few sequences per step (bench/real_model.py).
CATALOG_CPU: dict[str, object] = {
    "environment.dataset": "word_problems.jsonl",
    "environment.system_prompt": "Answer as '#### <number>'.",
    "environment.fewshot": 1,
    "inference.server": "builtin",
    "trainer.engine": "torch",
    "tinker.lora_rank": 8,
    # bench/real_model.py, 30 steps x 3 seeds x GRPO/PPO: at 1e-3 three of six runs lost held-out accuracy (KL per
    # token up to 0.58-2.15); at 3e-4 the runs gained (0.42 -> 0.71-0.79; KL at most 0.21-0.60)
    "tinker.learning_rate": 3e-4,
    # an 80-95-token prompt (digits are one token each) + at least 16 new tokens: the environment's budget is this
    # minus the prompt
    "rollout.max_token_length": 112,
}
CATALOG_CPU_BY_ALGO: dict[str, dict[str, object]] = {
    # Four sequences per step: on two shared cores one step (sampling, two passes, the reference) then costs ~20-40
    # CPU seconds. GRPO's group of 4 is the smallest validate accepts without a warning.
    "ppo": {"rollout.batch_size": 4},
    "grpo": {"rollout.batch_size": 1, "rollout.group_size": 4},
}

# TOML key -> settings key that must carry the same value. A value set in only one of the two files is used for
# both (loader.fill_mirrors); set in both, they must agree (rules.settings_agree_with_config).
MIRRORED = {
    "rollout.group_size": "algorithm.group_size",
    "algorithm.kl_coef": "algorithm.kl_coef",
    "algorithm.value_loss_coef": "algorithm.value_loss_coef",
}


def overrides_for(profile: str, algo: str, engine: str | None = None, model: str | None = None) -> dict[str, object]:
    """The profile's overrides. `engine` is settings' trainer.engine as written: an explicit "tinker" is kept on the
    embedded profile (Tinker trains remotely, e.g. against the local Tinker service of the Docker tests); "auto" and
    "torch" become the torch engine. With a catalog `model`: on CPU its real-model settings, on GPU its hub id."""
    from hermes_stack.modelcore.catalog import CATALOG

    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {PROFILES}")
    if model is not None and model not in CATALOG:
        raise ValueError(f"unknown catalog model {model!r}; expected one of {', '.join(sorted(CATALOG))}")
    if profile == "gpu":
        return {"inference.model_path": CATALOG[model].hub_id} if model else {}
    if model:
        overrides = {**CATALOG_CPU, "inference.model_path": model, **CATALOG_CPU_BY_ALGO.get(algo, {})}
    else:
        overrides = {**EMBEDDED, **EMBEDDED_BY_ALGO.get(algo, {})}
    if engine == "tinker":
        del overrides["trainer.engine"]
    return overrides


def fitted_to_batch(overrides: dict[str, object], rows: int) -> dict[str, object]:
    """The overrides with the profile's trainer.minibatches cut to `rows`, the sequences of the batch the files (with
    these overrides) ask for; the same dict when nothing is cut. The tuned 4 is for the shipped batch; a batch of 2
    the user wrote gets 2 minibatches, not a refusal of a value the user never wrote (rules.minibatches_fit_the_batch
    still refuses a written one)."""
    value = overrides.get("trainer.minibatches")
    if not isinstance(value, int) or value <= rows:
        return overrides
    return {**overrides, "trainer.minibatches": max(1, rows)}


def target_of(key: str) -> tuple[str, str, str]:
    """`section.field` -> ("config"|"settings", section, field). Raises KeyError for a key neither file has."""
    parts = key.split(".")
    if parts[0] in ("config", "settings") and len(parts) == 3:
        where, section, name = parts
        model = AlgoConfig if where == "config" else Settings
        if name in _fields(model, section):
            return where, section, name
        raise KeyError(key)
    if len(parts) != 2:
        raise KeyError(key)
    section, name = parts
    if name in _fields(AlgoConfig, section):
        return "config", section, name
    if name in _fields(Settings, section):
        return "settings", section, name
    raise KeyError(key)


def _fields(model: type, section: str) -> set[str]:
    field = model.model_fields.get(section)
    if field is None or not hasattr(field.annotation, "model_fields"):
        return set()
    return set(field.annotation.model_fields)


def apply(config: dict[str, Any], settings: dict[str, Any], overrides: dict[str, object]) -> None:
    """Apply `overrides` in place to the raw dicts of the two files (validate them again afterwards)."""
    files = {"config": config, "settings": settings}
    for key, value in overrides.items():
        where, section, name = target_of(key)
        files[where].setdefault(section, {})[name] = value
        mirror = MIRRORED.get(f"{section}.{name}") if where == "config" else None
        if mirror:
            m_section, m_name = mirror.split(".")
            settings.setdefault(m_section, {})[m_name] = value

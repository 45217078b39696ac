"""Loader: parse errors with file:line:column, pydantic errors as Problems, profiles, StackConfig."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from hermes_stack.config import profiles
from hermes_stack.config.loader import StackConfig, load_stack
from hermes_stack.controller.device import choose_profile
from hermes_stack.errors import InputError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture
def cdir(tmp_path):
    d = tmp_path / "configs"
    shutil.copytree(CONFIGS, d)
    return d


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def problems(algo, cdir, **kw) -> list[str]:
    with pytest.raises(InputError) as info:
        load_stack(algo, cdir, **kw)
    return info.value.lines()


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
@pytest.mark.parametrize("profile", ["gpu", "embedded"])
def test_shipped_configs_load(algo, profile):
    stack = load_stack(algo, CONFIGS, profile=profile, gpu_memory_gib=141)
    assert isinstance(stack, StackConfig)
    assert stack.algo == algo == stack.config.algorithm.name == stack.settings.algorithm.name
    assert stack.config_path == CONFIGS / f"config_{algo}.toml"


def test_stack_config_is_frozen():
    stack = load_stack("grpo", CONFIGS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stack.algo = "ppo"  # type: ignore[misc]


def test_toml_syntax_error_names_line_and_column(cdir):
    edit(cdir / "config_grpo.toml", "batch_size = 32", "batch_size 32")
    text = (cdir / "config_grpo.toml").read_text().splitlines()
    line_no = next(i for i, l in enumerate(text, 1) if l.startswith("batch_size 32"))
    (line,) = problems("grpo", cdir)
    assert line.startswith(f"{cdir}/config_grpo.toml:{line_no}:12: syntax: found text where TOML expected '=' after a key")
    assert "expected valid TOML" in line


def test_json_syntax_error_names_line_and_column(cdir):
    edit(cdir / "settings_grpo.json", '"port": 8001,', '"port": 8001,,')
    text = (cdir / "settings_grpo.json").read_text().splitlines()
    line_no = next(i for i, l in enumerate(text, 1) if '"port": 8001,,' in l)
    col = text[line_no - 1].index(",,") + 2
    (line,) = problems("grpo", cdir)
    assert line.startswith(f"{cdir}/settings_grpo.json:{line_no}:{col}: syntax: found expecting property name")


def test_problems_of_both_files_reported_together(cdir):
    edit(cdir / "config_grpo.toml", "group_size = 8", "group_sise = 8")
    edit(cdir / "settings_grpo.json", '"lora_rank": 32', '"lora_rank": "32"')
    got = problems("grpo", cdir)
    assert got == [
        (f"{cdir}/config_grpo.toml: rollout.group_sise: found an unknown key, expected one of batch_size, group_size, "
        "max_token_length, temperature, top_p. Hint: did you mean rollout.group_size?"),
        (f'{cdir}/settings_grpo.json: tinker.lora_rank: found "32" (a string), expected an integer. Hint: quotes make '
        "a string; write numbers and booleans bare"),
    ]


def test_unknown_key_without_close_match_lists_known_keys(cdir):
    edit(cdir / "config_grpo.toml", "[reward]\n", "[reward]\nzzz = 1\n")
    (line,) = problems("grpo", cdir)
    assert line.endswith("reward.zzz: found an unknown key, expected one of correctness_weight, format_weight, judge, "
                         "judge_style, judge_timeout_s. Hint: remove it")


def test_grpo_with_gae_refused_by_loader(cdir):
    edit(cdir / "config_grpo.toml", 'advantage_estimator = "group_relative"', 'advantage_estimator = "gae"')
    (line,) = problems("grpo", cdir)
    assert "algorithm.advantage_estimator: found 'gae', expected 'group_relative' for GRPO" in line


def test_embedded_profile_overrides_and_lists_them():
    stack = load_stack("grpo", CONFIGS, profile="embedded")
    assert stack.profile == "embedded"
    assert stack.config.environment.dataset == "offline-arith"
    assert stack.settings.inference.server == "builtin"
    assert stack.settings.trainer.engine == "torch"
    assert stack.overrides == {**profiles.embedded_defaults("grpo"), **profiles.overrides_for("embedded", "grpo")}
    # The files as written are kept beside the resolved configuration.
    assert stack.config_as_written.environment.dataset == "gsm8k"


def test_embedded_profile_keeps_an_explicit_tinker_engine(cdir):
    # Tinker trains remotely, so a CPU box can drive it (the Docker tier does, against the local Tinker service);
    # "auto" still becomes torch there.
    edit(cdir / "settings_grpo.json", '"engine": "auto"', '"engine": "tinker"')
    edit(cdir / "config_grpo.toml", "temperature = 0.8", "temperature = 1.0")  # what the tinker engine accepts
    stack = load_stack("grpo", cdir, profile="embedded")
    assert stack.settings.trainer.engine == "tinker" and "trainer.engine" not in stack.overrides
    assert stack.settings.inference.server == "builtin"  # the rest of the profile still applies


def test_embedded_profile_cuts_its_minibatches_to_a_small_batch_but_a_written_value_is_still_refused(cdir):
    edit(cdir / "config_ppo.toml", "batch_size = 256 ", "batch_size = 2   ")
    stack = load_stack("ppo", cdir, profile="embedded")
    assert profiles.EMBEDDED["trainer.minibatches"] == 4 and stack.settings.trainer.minibatches == 2
    assert stack.overrides["trainer.minibatches"] == 2
    edit(cdir / "settings_ppo.json", '"num_steps": 200', '"num_steps": 200, "minibatches": 4')
    (line,) = problems("ppo", cdir, profile="embedded")
    assert "trainer.minibatches: found 4, expected at most the batch's 2 sequences" in line


def test_gpu_profile_uses_files_as_written():
    stack = load_stack("grpo", CONFIGS, profile="gpu")
    assert stack.overrides == {} and stack.config.environment.dataset == "gsm8k"


def test_embedded_profile_still_checks_locked_fields_on_files(cdir):
    edit(cdir / "settings_grpo.json", '"lora_rank": 32', '"lora_rank": 8')
    (line,) = problems("grpo", cdir, profile="embedded")
    assert "tinker.lora_rank: found 8, expected 32 (locked)" in line


def test_embedded_profile_skips_memory_budget(cdir):
    assert load_stack("grpo", cdir, profile="embedded", gpu_memory_gib=8).profile == "embedded"
    assert any("inference.model_path" in l and "this GPU has 8 GiB" in l
               for l in problems("grpo", cdir, profile="gpu", gpu_memory_gib=8))


def test_profile_keys_all_resolve_to_a_field():
    for algo in ("ppo", "grpo"):
        for key in [*profiles.overrides_for("embedded", algo), *profiles.embedded_defaults(algo)]:
            profiles.target_of(key)  # raises KeyError for a key neither file has


def test_embedded_run_length_applies_only_where_the_files_keep_the_default(cdir):
    """The shipped 200 steps become the tiny model's 400 on CPU (PPO's 500); a number the user wrote is kept; the gpu
    profile and a catalog model keep the files' value."""
    assert load_stack("ppo", cdir, profile="embedded").settings.trainer.num_steps == 500
    assert load_stack("grpo", cdir, profile="embedded").settings.trainer.num_steps == 400
    assert load_stack("ppo", cdir, profile="gpu").settings.trainer.num_steps == 200
    assert load_stack("ppo", cdir, profile="embedded", model="smollm2-135m").settings.trainer.num_steps == 200
    edit(cdir / "settings_ppo.json", '"num_steps": 200', '"num_steps": 120')
    stack = load_stack("ppo", cdir, profile="embedded")
    assert stack.settings.trainer.num_steps == 120 and "trainer.num_steps" not in stack.overrides


def test_embedded_ppo_schedule_is_a_default_the_user_can_change(cdir):
    """The tiny model's PPO decays its rate from half-way; a decay start or floor the user writes is kept, and
    a floor of 1.0 keeps the rate constant (lr_factor is then 1 throughout)."""
    from hermes_stack.trainer import algorithms as alg
    from hermes_stack.trainer.__main__ import lr_schedule

    trainer = load_stack("ppo", cdir, profile="embedded").settings.trainer
    assert (trainer.lr_schedule, trainer.lr_decay_start, trainer.min_lr_ratio) == ("cosine", 0.5, 0.1)
    assert load_stack("grpo", cdir, profile="embedded").settings.trainer.lr_schedule == "constant"
    assert load_stack("ppo", cdir, profile="gpu").settings.trainer.lr_schedule == "constant"
    edit(cdir / "settings_ppo.json", '"num_steps": 200', '"num_steps": 200, "lr_decay_start": 0.6, "min_lr_ratio": 1.0')
    stack = load_stack("ppo", cdir, profile="embedded")
    trainer = stack.settings.trainer
    assert (trainer.lr_schedule, trainer.lr_decay_start, trainer.min_lr_ratio) == ("cosine", 0.6, 1.0)
    assert "trainer.lr_decay_start" not in stack.overrides and stack.overrides["trainer.lr_schedule"] == "cosine"
    schedule = lr_schedule(stack)
    assert schedule == {"lr_decay_steps": 500, "min_lr_ratio": 1.0, "lr_hold_steps": 300}
    assert {alg.lr_factor(s, schedule["lr_decay_steps"], schedule["min_lr_ratio"], schedule["lr_hold_steps"])
            for s in range(trainer.num_steps + 1)} == {1.0}
    # a written default reads as not written on this profile (docs/configuration.md): 0.0 becomes 0.5
    edit(cdir / "settings_ppo.json", '"lr_decay_start": 0.6', '"lr_decay_start": 0.0')
    assert load_stack("ppo", cdir, profile="embedded").settings.trainer.lr_decay_start == 0.5


def test_profile_group_size_is_mirrored_into_settings(monkeypatch):
    monkeypatch.setitem(profiles.EMBEDDED_BY_ALGO, "grpo", {"rollout.group_size": 4, "algorithm.kl_coef": 0.05})
    stack = load_stack("grpo", CONFIGS, profile="embedded")
    assert stack.config.rollout.group_size == stack.settings.algorithm.group_size == 4
    assert stack.config.algorithm.kl_coef == stack.settings.algorithm.kl_coef == 0.05


def test_profile_key_targets():
    assert profiles.target_of("environment.dataset") == ("config", "environment", "dataset")
    assert profiles.target_of("inference.server") == ("settings", "inference", "server")
    assert profiles.target_of("settings.algorithm.kl_coef") == ("settings", "algorithm", "kl_coef")
    with pytest.raises(KeyError):
        profiles.target_of("rollout.nonsense")


def test_unlock_turns_locked_refusal_into_warning(cdir):
    edit(cdir / "settings_grpo.json", '"lora_rank": 32', '"lora_rank": 8')
    stack = load_stack("grpo", cdir, unlock=True)
    assert any("tinker.lora_rank" in w for w in stack.warnings)


def test_choose_profile():
    assert choose_profile("cpu", 80)[:2] == ("embedded", None)
    assert choose_profile("gpu", 24)[:2] == ("gpu", 24)
    assert choose_profile("auto", 24)[:2] == ("gpu", 24)


def test_choose_profile_auto_without_gpu():
    class NoGpu:  # preflight.Probe of a host without nvidia-smi
        def which(self, name):
            return None

        def run(self, argv):
            return 127, "", "not found"

    profile, gib, notes = choose_profile("auto", None, NoGpu())
    assert (profile, gib) == ("embedded", None) and "embedded CPU profile" in notes[0]

"""Each validation rule on its own: the shipped configs pass it, one change makes it fire with the expected line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_stack.config import rules
from hermes_stack.config.loader import load_files
from hermes_stack.keyfile import KeyFile

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
KEYS = KeyFile(path=Path(".env.taotoken"), values={
    "TAOTOKEN_API_KEY": "sk-gateway0123456789", "TAOTOKEN_BASE_URL": "https://taotoken.net/api",
    "TINKER_API_KEY": "sk-gateway0123456789"}, tinker_key_defaulted=True)


def inputs(algo: str, config: dict | None = None, settings: dict | None = None, **kw) -> rules.Inputs:
    """Inputs from the shipped files with {"section.field": value} changes applied."""
    c, s, _, _ = load_files(algo, CONFIGS)
    c, s = _update(c, config or {}), _update(s, settings or {})
    return rules.Inputs(algo=algo, config=c, settings=s, config_file=f"config_{algo}.toml",
                        settings_file=f"settings_{algo}.json", **kw)


def _update(model, changes):
    for dotted, value in changes.items():
        section, name = dotted.split(".")
        sub = getattr(model, section).model_copy(update={name: value})
        model = model.model_copy(update={section: sub})
    return model


def lines(problems):
    return [p.line() for p in problems]


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: r.__name__)
def test_shipped_configs_pass_every_rule(rule, algo):
    assert rule(inputs(algo, keyfile=KEYS, gpu_memory_gib=141)) == []


def test_algo_matches_files():
    got = rules.algo_matches_files(inputs("grpo", {"algorithm.name": "ppo"}))
    assert lines(got) == [("config_grpo.toml: algorithm.name: found 'ppo', expected 'grpo' (from --algo grpo). "
                          "Hint: run with --algo ppo, or restore name = \"grpo\"; the ppo files are "
                          "config_ppo.toml/settings_ppo.json")]


def test_algo_matches_files_checks_settings_too():
    got = rules.algo_matches_files(inputs("ppo", settings={"algorithm.name": "grpo"}))
    assert lines(got) == [("settings_ppo.json: algorithm.name: found 'grpo', expected 'ppo' (from --algo ppo). "
                          "Hint: set \"name\": \"ppo\" in settings_ppo.json")]


def test_ppo_group_size():
    assert lines(rules.ppo_group_size(inputs("ppo", {"rollout.group_size": 4}))) == [
        ("config_ppo.toml: rollout.group_size: found 4, expected 1 for PPO. Hint: PPO samples one completion per "
        "prompt; use --algo grpo for groups")]


def test_ppo_advantage_estimator():
    got = rules.ppo_advantage_estimator(inputs("ppo", {"algorithm.advantage_estimator": "group_relative"}))
    assert [p.key for p in got] == ["algorithm.advantage_estimator"] and "expected 'gae' for PPO" in got[0].line()


def test_ppo_value_loss_coef():
    got = rules.ppo_value_loss_coef(inputs("ppo", {"algorithm.value_loss_coef": 0.0}))
    assert [p.key for p in got] == ["algorithm.value_loss_coef"] and "expected a value > 0 for PPO" in got[0].line()


@pytest.mark.parametrize("field, value", [("gamma", 0.0), ("gamma", 1.01), ("lam", -0.5), ("lam", 1.5)])
def test_ppo_gamma_lam_outside_unit_interval(field, value):
    got = rules.ppo_gamma_lam(inputs("ppo", {f"algorithm.{field}": value}))
    assert lines(got) == [(f"config_ppo.toml: algorithm.{field}: found {value}, expected a value in (0, 1]. "
                          "Hint: PPO's seed uses gamma 1.0 and lam 0.95")]


def test_ppo_gamma_lam_bounds_inclusive_at_one():
    assert rules.ppo_gamma_lam(inputs("ppo", {"algorithm.gamma": 1.0, "algorithm.lam": 1.0})) == []


def test_grpo_group_size_one_is_an_error():
    got = rules.grpo_group_size(inputs("grpo", {"rollout.group_size": 1}))
    assert not isinstance(got[0], rules.Caution) and "expected 2 or more for GRPO" in got[0].line()


@pytest.mark.parametrize("g", [2, 3])
def test_grpo_group_size_below_four_is_a_warning(g):
    got = rules.grpo_group_size(inputs("grpo", {"rollout.group_size": g}))
    assert len(got) == 1 and isinstance(got[0], rules.Caution)


def test_grpo_with_gae_names_the_flat_reward_curve():
    got = rules.grpo_advantage_estimator(inputs("grpo", {"algorithm.advantage_estimator": "gae"}))
    assert lines(got) == [("config_grpo.toml: algorithm.advantage_estimator: found 'gae', expected 'group_relative' "
                          "for GRPO. Hint: GRPO has no critic, so GAE gives zero advantages and the reward curve "
                          "lies flat")]


def test_grpo_value_loss_coef():
    got = rules.grpo_value_loss_coef(inputs("grpo", {"algorithm.value_loss_coef": 0.5}))
    assert [p.key for p in got] == ["algorithm.value_loss_coef"] and "expected 0 for GRPO" in got[0].line()


def test_kl_anchor_zero_is_a_warning():
    got = rules.kl_anchor(inputs("grpo", {"algorithm.kl_coef": 0.0}, {"algorithm.kl_coef": 0.0}))
    assert len(got) == 1 and isinstance(got[0], rules.Caution)


@pytest.mark.parametrize("field, value, expected", [
    ("algorithm.group_size", 4, "found 4, expected 8 ([rollout] group_size in config_grpo.toml)"),
    ("algorithm.kl_coef", 0.2, "found 0.2, expected 0.1 ([algorithm] kl_coef in config_grpo.toml)"),
])
def test_settings_agree_with_config(field, value, expected):
    got = rules.settings_agree_with_config(inputs("grpo", settings={field: value}))
    assert lines(got) == [(f"settings_grpo.json: {field}: {expected}. Hint: the two files must agree; change one of "
                          "them")]


def test_atropos_port_agrees():
    got = rules.atropos_port_agrees(inputs("grpo", settings={"atropos.rollout_server_url": "http://localhost:8080"}))
    assert lines(got) == [("settings_grpo.json: atropos.rollout_server_url: found port 8080 (http://localhost:8080), "
                          "expected port 8000 ([atropos] api_port in config_grpo.toml). Hint: the services would wait "
                          "for an Atropos that is not there; change one of the two")]


def test_atropos_port_agrees_when_toml_port_moves():
    assert rules.atropos_port_agrees(inputs("grpo", {"atropos.api_port": 9000})) != []
    assert rules.atropos_port_agrees(inputs("grpo", {"atropos.api_port": 9000},
                                            {"atropos.rollout_server_url": "http://atropos:9000"})) == []


def test_inference_port_agrees():
    got = rules.inference_port_agrees(inputs("grpo", settings={"inference.port": 8002}))
    assert lines(got) == [("settings_grpo.json: inference.base_url: found port 8001 (http://localhost:8001/v1), "
                          "expected port 8002 (inference.port). Hint: the environment would call a port nobody "
                          "serves")]


@pytest.mark.parametrize("url, fix", [
    ("http://localhost:8001", "http://localhost:8001/v1"),
    ("http://localhost:8001/v1/v1", "http://localhost:8001/v1"),
    ("http://localhost:8001/", "http://localhost:8001/v1"),
])
def test_inference_base_url_v1(url, fix):
    got = rules.inference_base_url_v1(inputs("grpo", settings={"inference.base_url": url}))
    assert lines(got) == [(f"settings_grpo.json: inference.base_url: found '{url}', expected a URL ending in exactly "
                          f"one /v1. Hint: use '{fix}'; a doubled or missing /v1 answers 404")]


@pytest.mark.parametrize("field, value", [("lora_rank", 16), ("learning_rate", 1e-4),
                                          ("max_token_trainer_length", 4096)])
def test_locked_fields_refused(field, value):
    got = rules.locked_fields(inputs("grpo", settings={f"tinker.{field}": value}))
    assert len(got) == 1 and not isinstance(got[0], rules.Caution)
    assert got[0].key == f"tinker.{field}" and "pass --unlock" in got[0].line()


def test_locked_fields_unlocked_is_a_warning():
    got = rules.locked_fields(inputs("grpo", settings={"tinker.lora_rank": 16}, unlock=True))
    assert len(got) == 1 and isinstance(got[0], rules.Caution)


def test_keyfile_names_must_exist_in_key_file():
    got = rules.keyfile_names(inputs("grpo", settings={"inference.api_key_env": "MY_KEY"}, keyfile=KEYS))
    assert lines(got) == [("settings_grpo.json: inference.api_key_env: found 'MY_KEY', expected a variable set in "
                          ".env.taotoken (TAOTOKEN_API_KEY, TAOTOKEN_BASE_URL, TINKER_API_KEY). Hint: add MY_KEY=… "
                          "to .env.taotoken or name one of its variables")]


def test_the_inference_key_line_is_optional_by_default_a_key_is_generated():
    assert rules.keyfile_names(inputs("grpo", keyfile=KEYS)) == []  # KEYS has no HERMES_INFERENCE_KEY line
    assert rules.inference_key_is_not_the_gateway_key(inputs("grpo", keyfile=KEYS)) == []


def test_the_gateway_key_as_inference_key_is_allowed_with_a_warning():
    got = rules.inference_key_is_not_the_gateway_key(
        inputs("grpo", settings={"inference.api_key_env": "TAOTOKEN_API_KEY"}, keyfile=KEYS))
    assert [type(p) for p in got] == [rules.Caution]
    assert lines(got) == [("settings_grpo.json: inference.api_key_env: found 'TAOTOKEN_API_KEY', expected "
                           "'HERMES_INFERENCE_KEY' (a key of its own, generated unless the key file sets it). Hint: "
                           "the paid gateway key would also protect the local inference service and reach its "
                           "container")]


def test_keyfile_names_skipped_offline():
    offline = KeyFile(path=Path(".env.taotoken"), offline=True)
    assert rules.keyfile_names(inputs("grpo", settings={"inference.api_key_env": "MY_KEY"}, keyfile=offline)) == []


def test_tinker_engine_needs_tinker_key():
    got = rules.tinker_key(inputs("grpo", settings={"trainer.engine": "tinker"}, keyfile=KEYS))
    assert [p.key for p in got] == ["TINKER_API_KEY"]
    assert rules.tinker_key(inputs("grpo", settings={"trainer.engine": "torch"}, keyfile=KEYS)) == []


def test_memory_budget_refuses_with_suggestion():
    got = rules.memory_budget(inputs("grpo", gpu_memory_gib=24))
    assert [p.key for p in got] == ["inference.model_path"]
    assert "needs ~40.8 GiB; this GPU has 24 GiB: use a smaller model, a bigger GPU, or the Tinker engine" in \
        got[0].line()


def test_memory_budget_only_on_gpu_profile():
    assert rules.memory_budget(inputs("grpo", gpu_memory_gib=24, profile="embedded")) == []


def test_memory_budget_reads_local_config_json():
    local = str(MODELS / "qwen2.5-1.5b")
    assert rules.memory_budget(inputs("grpo", settings={"inference.model_path": local}, gpu_memory_gib=80)) == []


def test_memory_budget_unknown_model_warns_not_checked():
    got = rules.memory_budget(inputs("grpo", settings={"inference.model_path": "acme/mystery-7b"}, gpu_memory_gib=24))
    assert len(got) == 1 and isinstance(got[0], rules.Caution)
    assert "the GPU memory budget was not checked" in got[0].line()


def test_check_separates_errors_from_warnings_and_collects_all():
    i = inputs("grpo", {"algorithm.advantage_estimator": "gae", "rollout.group_size": 2},
               {"algorithm.group_size": 2, "tinker.lora_rank": 8})
    errors, cautions = rules.check(i)
    assert [p.key for p in errors] == ["algorithm.advantage_estimator", "tinker.lora_rank"]
    assert [p.key for p in cautions] == ["rollout.group_size"]


def test_grpo_gamma_lam_other_than_1_is_advice_only_when_written():
    from hermes_stack.config.models import AlgorithmSection

    def with_algorithm(algo, section):
        i = inputs(algo)
        return rules.Inputs(**{**i.__dict__, "config": i.config.model_copy(update={"algorithm": section})})

    written = AlgorithmSection(name="grpo", advantage_estimator="group_relative", gamma=0.99, lam=1.0)
    found = rules.grpo_gamma_lam(with_algorithm("grpo", written))
    assert [(type(p).__name__, p.key, p.found) for p in found] == [("Caution", "algorithm.gamma", "0.99")]
    defaulted = AlgorithmSection(name="grpo", advantage_estimator="group_relative")  # lam defaults to 0.95
    assert rules.grpo_gamma_lam(with_algorithm("grpo", defaulted)) == []
    assert rules.grpo_gamma_lam(with_algorithm("ppo", written)) == []

"""What reaches each service: the key file's variables (secrets as /run/secrets files), the inference key, and
--unlock (HERMES_UNLOCK) — from the controller's compose environment to every service's own config loading."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_stack.compose_env import compose_env
from hermes_stack.errors import InputError
from hermes_stack.keyfile import load_keyfile
from hermes_stack.service_env import RECEIVERS, SECRETS, compose_environment, load_secrets, unlock_from

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
KEYFILE = ("TAOTOKEN_API_KEY=sk-gateway-0123456789abcdef\nTAOTOKEN_BASE_URL=https://gw.example.test/api\n"
           "TAOTOKEN_MODEL=fake-gpt\nWANDB_API_KEY=wandb-0123456789abcdef\nOTHER_TOKEN=other-0123456789abcdef\n")


def test_compose_gets_every_variable_empty_when_absent_the_inference_key_and_unlock():
    env = compose_environment({"TAOTOKEN_API_KEY": "sk-a", "TAOTOKEN_BASE_URL": "https://gw", "OTHER": "x"},
                              "hs-key", unlock=True)
    assert env == {"HERMES_INFERENCE_KEY": "hs-key", "TAOTOKEN_API_KEY": "sk-a", "TAOTOKEN_BASE_URL": "https://gw",
                   "TAOTOKEN_MODEL": "", "TINKER_API_KEY": "", "TINKER_BASE_URL": "", "WANDB_API_KEY": "",
                   "HERMES_UNLOCK": "1"}
    assert compose_environment({}, "hs-key", unlock=False)["HERMES_UNLOCK"] == "0"


def _stack(tmp_path: Path, text: str = KEYFILE):
    (tmp_path / "keys").write_text(text)
    return SimpleNamespace(keyfile=load_keyfile(tmp_path / "keys", register=False), config=None, settings=None,
                           profile="embedded", gpu_memory_gib=None, model=None)


def test_the_controller_passes_the_key_file_lines_but_not_a_defaulted_tinker_key(tmp_path):
    stack = _stack(tmp_path)
    assert stack.keyfile.tinker_key_defaulted  # validation sees TAOTOKEN_API_KEY as the Tinker key ...
    stack.config = SimpleNamespace(atropos=SimpleNamespace(api_port=8000))
    stack.settings = SimpleNamespace(inference=SimpleNamespace(port=8001, model_path="m"))
    env = compose_env(stack, "hs-generated-0123456789", None, unlock=False)
    assert env["TINKER_API_KEY"] == ""  # ... but the gateway key does not reach the trainer as one
    assert env["TAOTOKEN_API_KEY"] == "sk-gateway-0123456789abcdef"
    assert env["WANDB_API_KEY"] == "wandb-0123456789abcdef"
    assert env["HERMES_INFERENCE_KEY"] == "hs-generated-0123456789"
    assert "OTHER_TOKEN" not in env  # a line no service needs reaches none
    assert compose_env(None, "k", None)["TAOTOKEN_API_KEY"] == ""  # offline: nothing from a key file


def test_secret_files_become_the_service_environment_and_a_set_variable_wins(tmp_path):
    (tmp_path / "hermes_inference_key").write_text("hs-from-file-0123\n")
    (tmp_path / "taotoken_api_key").write_text("sk-from-file-0123")
    (tmp_path / "wandb_api_key").write_text("")  # an empty secret is no secret
    environ = {"TAOTOKEN_API_KEY": "sk-already-set"}
    assert load_secrets(environ, tmp_path) == ["HERMES_INFERENCE_KEY"]
    assert environ == {"HERMES_INFERENCE_KEY": "hs-from-file-0123", "TAOTOKEN_API_KEY": "sk-already-set"}
    assert load_secrets({}, tmp_path / "absent") == []


def test_every_secret_has_receivers_and_no_service_receives_the_gateway_key_without_calling_it():
    assert set(SECRETS.values()) <= set(RECEIVERS)
    assert set(RECEIVERS["TAOTOKEN_API_KEY"]) == {"gateway-check", "environment"}
    assert "inference" not in RECEIVERS["TAOTOKEN_API_KEY"] and "atropos" not in set().union(*RECEIVERS.values())


@pytest.mark.parametrize("value,expected", [("", False), ("0", False), ("1", True)])
def test_unlock_values(value, expected):
    assert unlock_from({"HERMES_UNLOCK": value}) is expected


def test_unlock_refuses_anything_else_with_one_line():
    with pytest.raises(InputError) as caught:
        unlock_from({"HERMES_UNLOCK": "yes"})
    assert caught.value.lines() == [("(environment): HERMES_UNLOCK: found 'yes', expected 0 or 1. Hint: hermes-stack "
                                     "up sets it: 1 with --unlock, else 0")]


# ---- --unlock reaches every service's config loading ------------------------------------------------------------


@pytest.fixture
def unlocked_configs(tmp_path):
    """The shipped GRPO files with a locked field changed (learning_rate 4e-5 -> 1e-4)."""
    for name in ("config_grpo.toml", "settings_grpo.json"):
        shutil.copy(CONFIGS / name, tmp_path / name)
    settings = tmp_path / "settings_grpo.json"
    settings.write_text(settings.read_text().replace('"learning_rate": 4e-05', '"learning_rate": 0.0001'))
    return tmp_path


def _env(config_dir: Path, unlock: str) -> dict[str, str]:
    return {"HERMES_ALGO": "grpo", "HERMES_CONFIG_DIR": str(config_dir), "HERMES_PROFILE": "gpu",
            "HERMES_UNLOCK": unlock, "HERMES_INFERENCE_KEY": "hs-test-key-0123456789"}


LOCKED_LINE = "tinker.learning_rate: found 0.0001, expected 4e-05 (locked)"


def test_trainer_loads_a_changed_locked_field_only_when_unlocked(unlocked_configs, monkeypatch):
    from hermes_stack.trainer.__main__ import LayerFailure, load_config

    args = argparse.Namespace(algo="grpo", config_dir=unlocked_configs, profile="gpu")
    monkeypatch.setenv("HERMES_UNLOCK", "0")
    with pytest.raises(LayerFailure) as caught:
        load_config(args)
    assert caught.value.exit_code == 2 and LOCKED_LINE in str(caught.value)
    monkeypatch.setenv("HERMES_UNLOCK", "1")
    assert load_config(args).settings.tinker.learning_rate == 1e-4


def test_environment_loads_a_changed_locked_field_only_when_unlocked(unlocked_configs):
    from hermes_stack.environment.runtime import stack_from_environ

    with pytest.raises(InputError) as caught:
        stack_from_environ(_env(unlocked_configs, "0"))
    assert any(LOCKED_LINE in line for line in caught.value.lines())
    assert stack_from_environ(_env(unlocked_configs, "1")).settings.tinker.learning_rate == 1e-4


def test_inference_loads_a_changed_locked_field_only_when_unlocked(unlocked_configs):
    from hermes_stack.inference.service_config import load_service_config

    with pytest.raises(InputError) as caught:  # no blanket unlock=True any more
        load_service_config(_env(unlocked_configs, "0"))
    assert any(LOCKED_LINE in line for line in caught.value.lines())
    assert load_service_config(_env(unlocked_configs, "1")).api_key == "hs-test-key-0123456789"


# ---- the inference service refuses to start without a key --------------------------------------------------------

NO_KEY = ("inference: (environment): HERMES_INFERENCE_KEY: found no value, expected the key that protects the "
          "inference service. Hint: start the stack with `hermes-stack up`, which generates one; by hand, set the "
          "Compose secret hermes_inference_key (variable HERMES_INFERENCE_KEY)")


@pytest.mark.parametrize("key", [None, ""])
def test_inference_service_with_an_empty_key_refuses_to_start_before_loading_anything(key, monkeypatch, capsys,
                                                                                     tmp_path):
    import hermes_stack.inference.__main__ as entry
    from hermes_stack.inference import service_config

    env = _env(CONFIGS, "0")
    env.pop("HERMES_INFERENCE_KEY")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if key is None:
        monkeypatch.delenv("HERMES_INFERENCE_KEY", raising=False)
    else:
        monkeypatch.setenv("HERMES_INFERENCE_KEY", key)
    monkeypatch.setattr("hermes_stack.service_env.SECRETS_DIR", tmp_path)  # no secret file either
    monkeypatch.setattr(service_config, "build_backend", lambda cfg: pytest.fail("a backend was built"))
    assert entry.main() == 2
    assert capsys.readouterr().err.strip().splitlines() == [NO_KEY]


def test_the_secret_file_is_enough_for_the_inference_service(monkeypatch, tmp_path):
    from hermes_stack.inference.service_config import load_service_config

    (tmp_path / "hermes_inference_key").write_text("hs-from-secret-0123456789")
    environ = _env(CONFIGS, "0")
    environ.pop("HERMES_INFERENCE_KEY")
    load_secrets(environ, tmp_path)
    assert load_service_config(environ).api_key == "hs-from-secret-0123456789"

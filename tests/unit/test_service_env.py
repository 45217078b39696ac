"""What reaches each service: the key file's variables (secrets as /run/secrets files), the inference key, and
--unlock (HERMES_UNLOCK) — from the controller's compose environment to every service's own config loading."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_stack.controller.compose_env import compose_env
from hermes_stack.errors import InputError
from hermes_stack.keyfile import load_keyfile
from hermes_stack.secret_files import SECRETS, load_secrets
from hermes_stack.service_env import RECEIVERS, ServiceEnv, compose_environment

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
KEYFILE = ("TAOTOKEN_API_KEY=sk-gateway-0123456789abcdef\nTAOTOKEN_BASE_URL=https://gw.example.test/api\n"
           "TAOTOKEN_MODEL=fake-gpt\nWANDB_API_KEY=wandb-0123456789abcdef\nOTHER_TOKEN=other-0123456789abcdef\n")


def test_compose_gets_every_variable_empty_when_absent_the_inference_key_and_unlock():
    env = compose_environment({"TAOTOKEN_API_KEY": "sk-a", "TAOTOKEN_BASE_URL": "https://gw", "OTHER": "x"},
                              ServiceEnv.for_stack(None, "hs-key", unlock=True, environ={}))
    key_file = {name: env.pop(name) for name in RECEIVERS if name != "HERMES_INFERENCE_KEY"}
    assert key_file == {"TAOTOKEN_API_KEY": "sk-a", "TAOTOKEN_BASE_URL": "https://gw", "TAOTOKEN_MODEL": "",
                        "TINKER_API_KEY": "", "TINKER_BASE_URL": "", "WANDB_API_KEY": ""}
    assert env["HERMES_INFERENCE_KEY"] == "hs-key" and env["HERMES_UNLOCK"] == "1"
    assert "OTHER" not in env and all(name.startswith("HERMES_") for name in env)  # the rest: ServiceEnv's
    assert compose_environment({}, ServiceEnv.for_stack(None, "k", False, {}))["HERMES_UNLOCK"] == "0"


def test_up_checks_the_users_tuning_knobs_and_derives_the_rest_from_the_stack():
    """A knob set in the shell that runs `up` reaches compose (checked first); what the configuration decides
    (served name, port, --model, unlock) is the stack's, whatever the shell says."""
    from hermes_stack.config.loader import load_stack

    stack = load_stack("grpo", CONFIGS, profile="embedded", model="smollm2-135m")
    shell = {"HERMES_BATCH_TIMEOUT_S": "30", "HERMES_MODEL": "other", "HERMES_PROFILE": "nonsense"}
    env = ServiceEnv.for_stack(stack, "hs-k", unlock=False, environ=shell).to_compose_env()
    assert env["HERMES_BATCH_TIMEOUT_S"] == "30" and env["HERMES_ATROPOS_OUTAGE_S"] == "600"
    assert env["HERMES_MODEL"] == "smollm2-135m" and env["HERMES_SERVED_MODEL_NAME"] == "smollm2-135m"
    assert env["HERMES_INFERENCE_PORT"] == "8001" and env["HERMES_UNLOCK"] == "0"
    assert "HERMES_PROFILE" not in env  # compose files set it, not the shell
    with pytest.raises(InputError) as caught:
        ServiceEnv.for_stack(stack, "hs-k", unlock=False, environ={"HERMES_BATCH_TIMEOUT_S": "soon"})
    assert caught.value.lines()[0].startswith("(environment): HERMES_BATCH_TIMEOUT_S: found 'soon', expected a number")


def test_a_variable_up_derives_is_not_checked_as_a_knob_and_is_warned_about():
    """HERMES_MICRO_BATCH_SIZE=0 in the shell was refused by validate, and =4 accepted, though `up` replaces either
    with the configuration's value: a value that does not count is neither checked nor silently dropped."""
    from hermes_stack.config.loader import load_stack
    from hermes_stack.controller.environ_check import environment_problems, environment_warnings

    shell = {"HERMES_MICRO_BATCH_SIZE": "0", "HERMES_INFERENCE_PORT": "x", "HERMES_BATCH_TIMEOUT_S": "30"}
    assert environment_problems(shell) == []
    assert environment_warnings(shell) == [
        ("(environment): HERMES_INFERENCE_PORT: found a value in this shell (not used), expected unset: `up` sets it "
         "from the configuration. Hint: set inference.port in the settings file"),
        ("(environment): HERMES_MICRO_BATCH_SIZE: found a value in this shell (not used), expected unset: `up` sets "
         "it from the configuration. Hint: set trainer.micro_batch_size in the settings file")]
    env = ServiceEnv.for_stack(load_stack("grpo", CONFIGS, profile="embedded"), "hs-k", False, shell).to_compose_env()
    assert env["HERMES_MICRO_BATCH_SIZE"] == "" and env["HERMES_INFERENCE_PORT"] == "8001"
    assert env["HERMES_BATCH_TIMEOUT_S"] == "30"
    assert environment_warnings({"HERMES_BATCH_TIMEOUT_S": "30", "HERMES_MODEL": " "}) == []  # a knob; an empty value


def test_a_bad_value_is_one_problem_per_variable_naming_it():
    with pytest.raises(InputError) as caught:
        ServiceEnv.from_environ({"HERMES_SGLANG_MEM_FRACTION": "1.5", "HERMES_MICRO_BATCH_SIZE": "0",
                                 "HERMES_ALGO": "dpo", "HERMES_SERVED_MODEL_NAME": ""})
    assert [line.split(": found")[0] for line in caught.value.lines()] == [
        "(environment): HERMES_ALGO", "(environment): HERMES_SGLANG_MEM_FRACTION",
        "(environment): HERMES_MICRO_BATCH_SIZE"]
    assert "found '1.5', expected less than 1" in caught.value.lines()[1]


def test_empty_means_unset_and_the_key_stays_out_of_repr():
    env = ServiceEnv.from_environ({"HERMES_SERVED_MODEL_NAME": "", "HERMES_INFERENCE_KEY": "hs-secret-0123",
                                   "HERMES_LOG_LEVEL": "debug", "HERMES_DATA_DIR": "/data"})
    assert env.served_model_name is None and env.key == "hs-secret-0123" and env.log_level == "DEBUG"
    assert env.data_dir == Path("/data") and "hs-secret-0123" not in repr(env)


def _stack(tmp_path: Path, text: str = KEYFILE):
    (tmp_path / "keys").write_text(text)
    return SimpleNamespace(keyfile=load_keyfile(tmp_path / "keys", register=False), config=None, settings=None,
                           profile="embedded", gpu_memory_gib=None, model=None, gpu_split=None)


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
    assert ServiceEnv.from_environ({"HERMES_UNLOCK": value}).unlock is expected


def test_unlock_refuses_anything_else_with_one_line():
    with pytest.raises(InputError) as caught:
        ServiceEnv.from_environ({"HERMES_UNLOCK": "yes"})
    (line,) = caught.value.lines()
    assert line.startswith("(environment): HERMES_UNLOCK: found 'yes', expected 0 or 1. Hint: 1 when the controller "
                           "ran with --unlock")


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
        load_config(args, ServiceEnv.from_environ())
    assert caught.value.exit_code == 2 and LOCKED_LINE in str(caught.value)
    monkeypatch.setenv("HERMES_UNLOCK", "1")
    assert load_config(args, ServiceEnv.from_environ()).settings.tinker.learning_rate == 1e-4


def test_environment_loads_a_changed_locked_field_only_when_unlocked(unlocked_configs):
    from hermes_stack.service_env import load_service_stack

    with pytest.raises(InputError) as caught:
        load_service_stack(ServiceEnv.from_environ(_env(unlocked_configs, "0")))
    assert any(LOCKED_LINE in line for line in caught.value.lines())
    unlocked = load_service_stack(ServiceEnv.from_environ(_env(unlocked_configs, "1")))
    assert unlocked.settings.tinker.learning_rate == 1e-4


def test_inference_loads_a_changed_locked_field_only_when_unlocked(unlocked_configs):
    from hermes_stack.inference.service_config import load_service_config

    with pytest.raises(InputError) as caught:  # no blanket unlock=True any more
        load_service_config(_env(unlocked_configs, "0"))
    assert any(LOCKED_LINE in line for line in caught.value.lines())
    assert load_service_config(_env(unlocked_configs, "1")).api_key == "hs-test-key-0123456789"


# ---- the inference service refuses to start without a key --------------------------------------------------------

NO_KEY = ("inference: (environment): HERMES_INFERENCE_KEY: found no value, expected the key that protects the "
          "inference service. Hint: start the stack with `make up`, which generates one; by hand, set the "
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
    monkeypatch.setattr("hermes_stack.secret_files.SECRETS_DIR", tmp_path)  # no secret file either
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


def test_the_healthcheck_and_service_env_share_their_defaults():
    # Issue 19: one defaults module (hermes_stack.service_defaults) for the stdlib healthcheck and ServiceEnv. A fresh
    # interpreter each: health reads HERMES_HEALTH_TIMEOUT at import.
    import os
    import subprocess
    import sys

    from hermes_stack import service_defaults

    code = "from hermes_stack import health; print(health.TIMEOUT_S)"
    for value, expected in (("", service_defaults.HEALTH_TIMEOUT_S), ("3", 3.0)):
        env = {k: v for k, v in os.environ.items() if k != "HERMES_HEALTH_TIMEOUT"} | {"HERMES_HEALTH_TIMEOUT": value}
        probe = float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                     check=True).stdout)
        typed = ServiceEnv.from_environ({"HERMES_HEALTH_TIMEOUT": value}).health_timeout_s
        assert probe == typed == expected

"""Controller pieces that need no Docker: the inference key, the remembered plan, config redaction, CLI refusals."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hermes_stack.controller.cli import main
from hermes_stack.controller.stack_state import Plan, inference_key, load_plan, save_plan, stack_algo
from hermes_stack.redaction import redact_config


def test_inference_key_comes_from_the_key_file_when_there_is_one(tmp_path):
    assert inference_key(tmp_path, "sk-from-keyfile-123456") == "sk-from-keyfile-123456"
    assert not (tmp_path / "inference.key").exists()


def test_offline_key_is_generated_once_kept_0600_and_reused(tmp_path):
    first = inference_key(tmp_path / ".hermes", None)
    path = tmp_path / ".hermes" / "inference.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) > 20 and inference_key(tmp_path / ".hermes", None) == first


def test_the_secrets_digest_follows_every_secret_and_nothing_else(tmp_path):
    """The label compose compares (compose.base.yml, x-service): a changed key recreates the containers that hold
    the old one. It moves with each secret, not with other settings, and shows no secret."""
    from hermes_stack.controller.compose_env import SECRETS_DIGEST, compose_env, secrets_digest
    from hermes_stack.controller.stack_state import secrets_salt
    from hermes_stack.secret_files import SECRETS

    salt = secrets_salt(tmp_path / ".hermes")
    assert stat.S_IMODE((tmp_path / ".hermes" / "secrets.salt").stat().st_mode) == 0o600
    assert secrets_salt(tmp_path / ".hermes") == salt and len(salt) == 32  # kept
    env = {name: f"value-of-{name}" for name in SECRETS.values()} | {"HERMES_LOG_LEVEL": "INFO"}
    digest = secrets_digest(env, salt)
    assert len(digest) == 16 and int(digest, 16) >= 0
    for name in SECRETS.values():
        assert secrets_digest(env | {name: "changed"}, salt) != digest, name
    assert secrets_digest(env | {"HERMES_LOG_LEVEL": "DEBUG"}, salt) == digest
    assert secrets_digest(env, b"another salt") != digest  # a guess at the key needs the salt
    full = compose_env(None, "hs-generated-0123456789", None, salt=salt)
    assert full[SECRETS_DIGEST] == secrets_digest(full, salt)
    assert compose_env(None, "hs-generated-9876543210", None, salt=salt)[SECRETS_DIGEST] != full[SECRETS_DIGEST]
    assert SECRETS_DIGEST not in compose_env(None, "", None)  # the .env `up` writes never carries it


def test_commands_making_the_key_and_salt_at_once_agree_and_never_read_them_half_written(tmp_path):
    """`up` beside `render` on a fresh .hermes/: each made its own salt (and key), the last write won, and the other's
    containers carried a digest no later `up` could reproduce (a review found it)."""
    from concurrent.futures import ThreadPoolExecutor

    from hermes_stack.controller.stack_state import secrets_salt

    for round_ in range(20):
        state = tmp_path / f"round-{round_}" / ".hermes"
        with ThreadPoolExecutor(8) as pool:
            salts = list(pool.map(secrets_salt, [state] * 16))
            keys = list(pool.map(inference_key, [state] * 16, [None] * 16))
        assert len(set(salts)) == 1 and len(salts[0]) == 32
        assert len(set(keys)) == 1 and keys[0].startswith("hs-")
        assert sorted(p.name for p in state.iterdir()) == ["inference.key", "secrets.salt"]  # no temporary left
    (state / "secrets.salt").write_text("short\n")  # unusable: replaced
    assert len(secrets_salt(state)) == 32 and stat.S_IMODE((state / "secrets.salt").stat().st_mode) == 0o600


def test_plan_round_trips_per_algo_and_defaults_to_the_algo_file(tmp_path):
    save_plan(tmp_path, Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml")))
    assert load_plan(tmp_path, "grpo").files == ("compose.grpo.yml", "compose.cpu.yml")
    assert load_plan(tmp_path, "ppo") == Plan("ppo", "gpu", ("compose.ppo.yml",))


def test_each_algorithms_plan_outlives_the_other_algorithms_up(tmp_path):
    """One record (the last up's) sent `status`, `logs` and `down` of a GRPO stack still running beside a later PPO
    one to a default plan: the GPU files on a CPU stack, no replica override, another project."""
    from hermes_stack.controller.stack_state import LAST_UP, last_up_algo

    grpo = Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml", ".hermes/replicas-grpo.yml"), "mine")
    save_plan(tmp_path, grpo)
    save_plan(tmp_path, Plan("ppo", "cpu", ("compose.ppo.yml", "compose.cpu.yml")))
    assert load_plan(tmp_path, "grpo") == grpo and last_up_algo(tmp_path) == "ppo"
    (tmp_path / "plan-grpo.json").unlink()  # a checkout's state from before: the last up's record alone
    (tmp_path / LAST_UP).write_text('{"algo": "grpo", "device": "cpu", "files": ["compose.grpo.yml"]}')
    assert load_plan(tmp_path, "grpo") == Plan("grpo", "cpu", ("compose.grpo.yml",))


@pytest.mark.parametrize("record", ["[]", '"compose.grpo.yml"', ('{"algo": "grpo", "device": "cpu", "files": '
                                    '"compose.grpo.yml"}'), '{"algo": "grpo", "device": 3, "files": ["a.yml"]}',
                                    '{"algo": "grpo", "device": "cpu", "files": [null]}'])
def test_a_corrupted_last_up_record_is_ignored(record, tmp_path):
    """A hand-edited .hermes/last-up.json ended in "unexpected error: AttributeError", or a files string split into
    one -f per character."""
    from hermes_stack.controller.stack_state import LAST_UP, last_up_algo, plan_file

    save_plan(tmp_path, Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml")))
    (tmp_path / LAST_UP).write_text(record)
    (tmp_path / plan_file("grpo")).write_text(record)
    assert load_plan(tmp_path, "grpo") == Plan("grpo", "gpu", ("compose.grpo.yml",))
    assert last_up_algo(tmp_path) == ("grpo" if record.startswith("{") else None)


def test_a_last_up_record_with_an_unknown_algorithm_names_none(tmp_path):
    """Not `--algo: found 'PPO'` for an option the user never passed: the default stack is talked to."""
    from hermes_stack.controller.stack_state import LAST_UP, last_up_algo

    (tmp_path / LAST_UP).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / LAST_UP).write_text('{"algo": "PPO", "device": "cpu", "files": ["compose.ppo.yml"]}')
    assert last_up_algo(tmp_path) is None and stack_algo(tmp_path, None) == "grpo"


def test_rendered_config_hides_secret_values_inlined_from_env_file():
    text = ("    environment:\n"
            "      TAOTOKEN_API_KEY: sk-test-abcdefghijklmnop1234\n"
            "      TAOTOKEN_BASE_URL: https://taotoken.net/api\n"
            "      HERMES_INFERENCE_KEY: hs-generatedgeneratedgen9876\n"
            "      WANDB_API_KEY: \"\"\n")
    out = redact_config(text)
    assert "sk-test-abcdefghijklmnop1234" not in out and "TAOTOKEN_API_KEY: sk-…1234" in out
    assert "hs-generatedgeneratedgen9876" not in out
    assert "TAOTOKEN_BASE_URL: https://taotoken.net/api" in out  # not a secret
    assert 'WANDB_API_KEY: ""' in out


def test_unknown_algo_is_refused_before_anything_runs(capsys):
    assert main(["down", "--algo", "dpo"]) == 2
    assert "--algo: found 'dpo', expected ppo or grpo" in capsys.readouterr().err


def test_unknown_device_is_refused(capsys):
    assert main(["up", "--algo", "grpo", "--device", "tpu"]) == 2
    assert "--device: found 'tpu', expected auto, cpu or gpu" in capsys.readouterr().err


def test_unknown_model_is_refused_with_one_line(capsys):
    assert main(["validate", "--algo", "grpo", "--device", "cpu", "--model", "llama-70b"]) == 2
    err = capsys.readouterr().err
    assert "--model: found 'llama-70b', expected one of smollm2-135m" in err and len(err.strip().splitlines()) == 1


def test_the_chosen_model_reaches_compose_so_every_service_resolves_the_same_config():
    from pathlib import Path

    from hermes_stack.config.loader import load_stack
    from hermes_stack.controller.compose_env import compose_env

    configs = Path(__file__).resolve().parents[2] / "configs"
    chosen = compose_env(load_stack("ppo", configs, profile="embedded", model="smollm2-135m"), "k", None)
    assert chosen["HERMES_MODEL"] == "smollm2-135m" and chosen["HERMES_SERVED_MODEL_NAME"] == "smollm2-135m"
    assert compose_env(load_stack("ppo", configs, profile="embedded"), "k", None)["HERMES_MODEL"] == ""


def test_a_build_prunes_only_the_images_it_untagged_after_building():
    """A rebuild untags the previous image; the controller removes exactly those (our label), after the build."""
    from hermes_stack.controller.bring_up import build_images
    from hermes_stack.controller.compose import BUILD_LABEL, Compose, stack_params

    seen: list[list[str]] = []
    compose = Compose(stack_params("grpo", "cpu", Path(".")), runner=lambda argv, env, capture: seen.append(argv) or "",
                      streamer=lambda argv, env: seen.append(argv) or iter(["#1 done"]))
    build_images(compose)
    assert [argv[:3] for argv in seen][-1] == ["docker", "image", "prune"]
    assert any(a == "build" for a in seen[0]) and f"label={BUILD_LABEL}" in seen[-1] and "--force" in seen[-1]
    assert not any(a == "--all" or a == "-a" for a in seen[-1])  # dangling only: tagged images stay


def test_build_progress_is_shown_without_buildkits_blank_separator_lines(capsys):
    from hermes_stack.controller.bring_up import build_images
    from hermes_stack.controller.compose import Compose, stack_params

    compose = Compose(stack_params("grpo", "cpu", Path(".")), runner=lambda argv, env, capture: "",
                      streamer=lambda argv, env: iter(["#1 [atropos] load", "", "   ", "#1 DONE 0.0s"]))
    build_images(compose)
    captured = capsys.readouterr()
    shown = captured.out.splitlines() + captured.err.splitlines()
    assert [line.strip() for line in shown if "#1" in line] == ["#1 [atropos] load", "#1 DONE 0.0s"]
    assert not any(line.strip() == "" for line in shown)


def test_without_algo_the_running_stack_commands_talk_to_the_last_up(tmp_path):
    assert stack_algo(tmp_path, None) == "grpo"  # nothing started here yet: the default everywhere else
    save_plan(tmp_path, Plan("ppo", "cpu", ("compose.ppo.yml", "compose.cpu.yml")))
    assert stack_algo(tmp_path, None) == "ppo"
    assert stack_algo(tmp_path, "grpo") == "grpo"  # a given --algo wins
    (tmp_path / "last-up.json").write_text("not json")
    assert stack_algo(tmp_path, None) == "grpo"


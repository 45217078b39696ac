"""Issue 12: every command the controller prints works as typed in the project directory after `make up`:
`.env` names the running stack for plain `docker compose` (without a secret in it), the "Where to look" lines are
make targets and plain compose commands, and test-inference finds the key `up` generated offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hermes_stack.controller import stack_state as st
from hermes_stack.controller.bring_up import where_to_look
from hermes_stack.controller.compose import stack_params

ROOT = Path(__file__).resolve().parents[2]
KEY = "hs-generated-internal-key-0123456789"


def plan(project: str | None = "hermes-test-grpo") -> st.Plan:
    return st.Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml"), project)


def test_dotenv_names_files_and_project_and_never_the_inference_key(monkeypatch):
    monkeypatch.setenv("HERMES_IMAGE_REPO", "hs-day2")
    env = {"HERMES_INFERENCE_KEY": KEY, "HERMES_ATROPOS_PORT": "8000", "HERMES_INFERENCE_PORT": "8001",
           "HERMES_SERVED_MODEL_NAME": "embedded"}
    text = st.dotenv_text(plan(), "hermes-test-grpo", env)
    lines = text.splitlines()
    assert lines[0] == st.DOTENV_MARK
    assert "COMPOSE_FILE=compose.grpo.yml:compose.cpu.yml" in lines
    assert "COMPOSE_PROJECT_NAME=hermes-test-grpo" in lines
    assert "HERMES_IMAGE_REPO=hs-day2" in lines and "HERMES_ATROPOS_PORT=8000" in lines
    assert KEY not in text and "HERMES_INFERENCE_KEY" not in text


def test_a_users_own_dotenv_is_left_alone_and_ours_is_rewritten(tmp_path):
    (tmp_path / ".env").write_text("MY_VAR=1\n")
    assert st.write_dotenv(tmp_path, plan(), "hermes-grpo", {}) is False
    assert (tmp_path / ".env").read_text() == "MY_VAR=1\n"
    (tmp_path / ".env").unlink()
    assert st.write_dotenv(tmp_path, plan(), "hermes-grpo", {}) is True
    assert st.write_dotenv(tmp_path, st.Plan("ppo", "cpu", ("compose.ppo.yml",)), "hermes-ppo", {}) is True
    assert "COMPOSE_PROJECT_NAME=hermes-ppo" in (tmp_path / ".env").read_text()


def _require_compose() -> None:
    if shutil.which("docker") is None or subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                       check=False).returncode != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but `docker compose` (v2) is missing")
        pytest.skip("docker compose v2 not installed")


def test_a_typed_compose_command_sees_the_services_exactly_as_the_controller_made_them(tmp_path):
    """A review: `docker compose up -d` typed beside a running stack recreated all five containers (Atropos' queue
    lost, training stopped), then failed on the secrets only `up` hands compose. The secrets' label interpolated to
    "" without the controller's digest, so every service's config hash differed. Real `docker compose config
    --hash`, with the controller's own environment and files against a plain typed command reading .env."""
    from hermes_stack.config.loader import load_stack
    from hermes_stack.controller.compose_env import compose_env

    _require_compose()
    for name in ("compose.base.yml", "compose.grpo.yml", "compose.cpu.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    stack = load_stack("grpo", ROOT / "configs", profile="embedded")
    env = compose_env(stack, KEY, None, False, b"a-salt-of-32-bytes-for-the-test!")
    st.write_dotenv(tmp_path, plan(), "hermes-test-grpo", env)
    assert KEY not in (tmp_path / ".env").read_text()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "HERMES_"))}

    def hashes(argv: list[str], environ: dict[str, str]) -> str:
        done = subprocess.run(["docker", "compose", *argv, "config", "--hash", "*"], cwd=tmp_path, env=environ,
                              capture_output=True, text=True, check=False, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    controller = hashes(["-f", "compose.grpo.yml", "-f", "compose.cpu.yml", "-p", "hermes-test-grpo"], {**clean, **env})
    assert controller.count("\n") == 5  # the five services
    assert hashes([], clean) == controller


def test_plain_docker_compose_in_the_project_directory_sees_the_running_stack(tmp_path):
    """Real `docker compose config` with no -f and no --project-name, from a directory holding our compose files
    and the .env `up` writes: the stack, its cpu overlay and its project name; interpolation still works."""
    _require_compose()
    for name in ("compose.base.yml", "compose.grpo.yml", "compose.cpu.yml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".env.taotoken").write_text("TAOTOKEN_API_KEY=sk-test-value-abcd\n")
    st.write_dotenv(tmp_path, plan(), "hermes-test-grpo", {"HERMES_ATROPOS_PORT": "8123"})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "HERMES_"))}
    done = subprocess.run(["docker", "compose", "config", "--format", "json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    assert config["name"] == "hermes-test-grpo"
    trainer = config["services"]["trainer"]
    assert trainer["environment"]["HERMES_PROFILE"] == "embedded"  # the cpu overlay is in
    assert trainer["environment"]["HERMES_ATROPOS_URL"] == "http://atropos:8123"  # interpolation from .env
    # Compose reads no key file: the controller hands each service its secrets (Compose secrets), so a plain
    # `docker compose` sees neither the key nor its value.
    assert "TAOTOKEN_API_KEY" not in trainer["environment"] and "sk-test-value-abcd" not in done.stdout


def test_where_to_look_prints_make_targets_and_plain_compose_that_exist():
    lines = where_to_look("grpo", stack_params("grpo", "cpu", ROOT, project_name="hermes-grpo"), dotenv=True)
    commands = [line.split(":", 1)[1].strip().split("   (")[0] for line in lines]
    assert commands == ["docker compose logs --follow trainer", "make status ALGO=grpo", "make down ALGO=grpo"]
    makefile = (ROOT / "Makefile").read_text()
    assert "\nstatus:" in makefile and "\ndown:" in makefile
    assert not any("hermes-stack" in line for line in lines)  # not on PATH after `make up`
    without = where_to_look("grpo", stack_params("grpo", "cpu", ROOT, project_name="p"), dotenv=False)
    assert "docker compose --project-name p -f compose.grpo.yml -f compose.cpu.yml logs --follow trainer" in without[0]


def test_the_stop_line_names_the_up_that_resumes_this_stack():
    """After `make up ALGO=ppo` it said "the next `make up` resumes": typed as said, `make up` starts GRPO."""
    from hermes_stack.controller.replicas import up_command

    up = up_command("ppo", 2, "hermes-ppo")
    ppo = where_to_look("ppo", stack_params("ppo", "cpu", ROOT, project_name="hermes-ppo"), dotenv=True, up=up)
    assert ppo[-1] == ("stop:               make down ALGO=ppo   (checkpoints kept; make up ALGO=ppo REPLICAS=2 "
                       "resumes; VOLUMES=1 deletes them)")
    # a run under another project name, and settings that ask for 2 replicas where this run has 1
    assert up_command("grpo", 2, "hermes-grpo-2") == "HERMES_PROJECT_NAME=hermes-grpo-2 make up ALGO=grpo REPLICAS=2"
    assert up_command("grpo", 1, "hermes-grpo", configured=2) == "make up ALGO=grpo REPLICAS=1"
    assert up_command("grpo", 1, None) == "make up ALGO=grpo" and up_command("grpo", 0) == "make up ALGO=grpo"


def test_the_plan_remembers_the_project_so_make_status_finds_a_renamed_stack(tmp_path, monkeypatch):
    monkeypatch.delenv("HERMES_PROJECT_NAME", raising=False)
    st.save_plan(tmp_path, plan("hermes-test-grpo"))
    loaded = st.load_plan(tmp_path, "grpo")
    assert loaded == plan("hermes-test-grpo")
    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    assert st.plan_compose(loaded, echo=False).params.project_name == "hermes-test-grpo"


def test_test_inference_finds_the_key_up_generated_offline(tmp_path, monkeypatch):
    from hermes_stack.config.loader import load_stack
    from hermes_stack.controller.commands.test_inference import _inference_key

    monkeypatch.delenv("HERMES_INFERENCE_KEY", raising=False)
    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    stack = load_stack("grpo", ROOT / "configs")
    no_keyfile = tmp_path / "absent.env"
    assert _inference_key(stack, no_keyfile) == ""
    generated = st.inference_key(tmp_path / st.STATE_DIR, None)  # what `up` does offline
    assert oct((tmp_path / ".hermes" / "inference.key").stat().st_mode & 0o777) == "0o600"
    assert _inference_key(stack, no_keyfile) == generated


def test_down_removes_our_dotenv_for_that_stack_only(tmp_path):
    st.write_dotenv(tmp_path, plan(), "hermes-test-grpo", {})
    assert st.remove_dotenv(tmp_path, "hermes-grpo") is False  # another stack: kept
    assert st.remove_dotenv(tmp_path, "hermes-test-grpo") is True and not (tmp_path / ".env").exists()
    (tmp_path / ".env").write_text("COMPOSE_PROJECT_NAME=hermes-test-grpo\n")  # the user's own
    assert st.remove_dotenv(tmp_path, "hermes-test-grpo") is False and (tmp_path / ".env").exists()

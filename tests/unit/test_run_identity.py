"""A checkpoint carries what it was trained with, and a configuration that cannot resume it is refused before
anything starts (issue 25): `make up ALGO=grpo` (the tiny model), `make down` (checkpoints kept), then
`make up ALGO=grpo MODEL=smollm2-135m` is one line naming the old run and the two commands that choose, not a
crash-looping trainer ("ValueError: checkpoint is for algo=grpo lora=False")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hermes_stack import run_identity as ri
from hermes_stack.config.loader import load_stack
from hermes_stack.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("isolated_secrets")


@pytest.fixture
def project(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    return tmp_path


def tiny(algo="grpo"):
    return ri.identity_of(load_stack(algo, "configs", "embedded"))


def catalog(algo="grpo"):
    return ri.identity_of(load_stack(algo, "configs", "embedded", model="smollm2-135m"))


REFUSAL = ("hermes-grpo (data volume hermes-grpo_hermes-data): checkpoints: found a run trained with model embedded "
           "-> smollm2-135m, lora_rank 32 -> 8, expected the same model, engine, LoRA rank and algorithm to resume "
           "it. Hint: `make down ALGO=grpo VOLUMES=1` deletes that run's checkpoints and starts over; "
           "`HERMES_PROJECT_NAME=hermes-grpo-2 make up ALGO=grpo`, with this command's MODEL= or REPLICAS=, starts "
           "a new run beside it")


def test_no_old_run_or_the_same_configuration_resumes_silently(project):
    assert ri.decide(None, tiny()) == ri.Decision(True)
    assert ri.decide(tiny(), tiny()) == ri.Decision(True)
    assert ri.decide(tiny(), tiny()).notice() is None


def test_a_tunable_change_resumes_and_says_what_changed(project):
    new = {**tiny(), "learning_rate": 1e-4, "num_steps": 600}
    decision = ri.decide(tiny(), new)
    assert decision.resume and decision.blocking == ()
    assert decision.notice() == ("resuming the run's checkpoints with changed settings: learning_rate 0.0005 -> "
                                 "0.0001, num_steps 400 -> 600")  # 400: the embedded profile's run length
    # the controller's record carries the replica count: a resume on another one says so (a review saw none)
    assert ri.decide({**tiny(), "replicas": 2}, {**tiny(), "replicas": 1}).notice() == (
        "resuming the run's checkpoints with changed settings: replicas 2 -> 1")
    assert ri.decide(tiny(), {**tiny(), "replicas": 1}).notice() is None  # a record (or manifest) without it


def test_another_model_is_refused_with_one_line_naming_the_run_and_the_commands(project):
    decision = ri.decide(tiny(), catalog())
    assert not decision.resume
    assert ri.refusal("hermes-grpo", "grpo", decision).line() == REFUSAL


@pytest.mark.parametrize("key,value", [("algo", "ppo"), ("engine", "tinker"), ("lora_rank", 16)])
def test_each_thing_a_checkpoint_depends_on_blocks(project, key, value):
    assert not ri.decide(tiny(), {**tiny(), key: value}).resume


def test_up_refuses_before_anything_starts_and_forgets_a_run_whose_volume_is_gone(project, capsys):
    from hermes_stack.controller.bring_up import _check_resume

    first = load_stack("grpo", "configs", "embedded")
    _check_resume(first, "grpo", "hermes-grpo", has_volume=lambda _name: True)  # the default run's `up`
    assert ri.read_record(project / ".hermes", "hermes-grpo") == {**tiny(), "replicas": 1}
    other = load_stack("grpo", "configs", "embedded", model="smollm2-135m")
    with pytest.raises(InputError) as info:
        _check_resume(other, "grpo", "hermes-grpo", has_volume=lambda _name: True)
    # the configs' own model trained the old run: `make up` without MODEL= resumes it
    assert info.value.exit_code == 2 and info.value.lines() == [
        REFUSAL.replace("Hint: ", "Hint: `make up ALGO=grpo` resumes it; ")]
    assert ri.read_record(project / ".hermes", "hermes-grpo") == {**tiny(), "replicas": 1}  # the old run's record stays
    # A new run beside it: its own project name, its own volume, its own record.
    _check_resume(other, "grpo", "hermes-grpo-2", has_volume=lambda _name: False)
    assert ri.read_record(project / ".hermes", "hermes-grpo-2") == {**catalog(), "replicas": 1}
    # The old run's volume deleted (down --volumes elsewhere, docker volume rm): a fresh run, no refusal.
    _check_resume(other, "grpo", "hermes-grpo", has_volume=lambda _name: False)
    assert ri.read_record(project / ".hermes", "hermes-grpo") == {**catalog(), "replicas": 1}


class Engine:
    def __init__(self):
        self.loaded = None

    def state_dict(self):
        return {"w": 1}

    def load_state_dict(self, state):
        self.loaded = state


def test_the_trainer_refuses_a_checkpoint_of_another_identity_with_one_line(project, tmp_path):
    from hermes_stack.trainer import checkpoint as ckpt
    from hermes_stack.trainer.loop import LoopSettings, resume, save

    def settings(identity):
        return LoopSettings(num_steps=10, batch_size_sequences=4, max_token_len=64,
                            checkpoint_dir=tmp_path / "ckpt", save_interval=5, data_dir=tmp_path, identity=identity)

    save(Engine(), settings(tiny()), 5)
    assert ckpt.read_meta(ckpt.latest_checkpoint(tmp_path / "ckpt"))["identity"] == tiny()
    logged = []
    engine = Engine()
    assert resume(engine, settings({**tiny(), "learning_rate": 1e-4}), logged.append) == 5 and engine.loaded
    assert "checkpoint: resuming the run's checkpoints with changed settings: learning_rate 0.0005 -> 0.0001" in logged
    with pytest.raises(InputError) as info:
        resume(Engine(), settings(catalog()), logged.append)
    (line,) = info.value.lines()
    assert line.startswith(f"{tmp_path / 'ckpt' / 'step-5'}: checkpoints: found a run trained with model embedded -> "
                           "smollm2-135m, lora_rank 32 -> 8")


def test_a_refusal_for_a_named_project_names_it_in_the_command_that_deletes_its_run():
    """`HERMES_PROJECT_NAME=foo make up MODEL=b` was refused with "`make down ALGO=grpo VOLUMES=1` deletes that run's
    checkpoints": typed as printed, that reached the last up's stack (hermes-grpo) and deleted its run, not foo's."""
    decision = ri.decide(tiny(), catalog())
    hint = ri.refusal("foo", "grpo", decision).hint
    assert "`HERMES_PROJECT_NAME=foo make down ALGO=grpo VOLUMES=1` deletes that run's checkpoints" in hint
    assert "`make down ALGO=grpo VOLUMES=1`" in ri.refusal("hermes-grpo", "grpo", decision).hint
    assert ri.make_for("hermes-ppo", "ppo", "down") == "make down ALGO=ppo"
    assert ri.make_for("hermes-ppo", "grpo", "down") == "HERMES_PROJECT_NAME=hermes-ppo make down ALGO=grpo"


def test_a_refusal_names_the_up_that_resumes_a_run_of_another_model(project):
    """After `make up MODEL=smollm2-135m` and `make down`, status's `make up ALGO=grpo` was refused, and the refusal
    named only the commands that delete the run or start another: not the MODEL= that resumes it."""
    from hermes_stack.controller.bring_up import _check_resume

    tiny_stack = load_stack("grpo", "configs", "embedded")
    real = load_stack("grpo", "configs", "embedded", model="smollm2-135m")
    _check_resume(real, "grpo", "hermes-grpo", has_volume=lambda _name: True)
    with pytest.raises(InputError) as info:
        _check_resume(tiny_stack, "grpo", "hermes-grpo", has_volume=lambda _name: True)
    assert "Hint: `make up ALGO=grpo MODEL=smollm2-135m` resumes it; `make down ALGO=grpo VOLUMES=1`" in \
        info.value.lines()[0]
    ri.forget_record(project / ".hermes", "hermes-grpo")
    _check_resume(tiny_stack, "grpo", "hermes-grpo", has_volume=lambda _name: True)  # the configs' own model
    with pytest.raises(InputError) as info:
        _check_resume(real, "grpo", "hermes-grpo", has_volume=lambda _name: True)
    assert "Hint: `make up ALGO=grpo` resumes it; `make down ALGO=grpo VOLUMES=1`" in info.value.lines()[0]
    engine = ri.decide(ri.identity_of(tiny_stack), {**ri.identity_of(tiny_stack), "engine": "tinker"})
    assert ri.resume_command("hermes-grpo", "grpo", engine, ri.identity_of(tiny_stack), "embedded",
                             lambda name: False) is None  # another engine: no MODEL= resumes it


def test_a_lora_rank_edited_in_the_configs_gets_no_resume_command(project):
    """Only the rank differed (the same model): the refusal said "`make up ALGO=grpo` resumes it", the very command
    it had refused."""
    old = tiny()
    rank = ri.decide(old, {**old, "lora_rank": 16})
    assert ri.resume_command("hermes-grpo", "grpo", rank, old, old["model"], lambda name: True) is None
    model = ri.decide(old, {**old, "model": "smollm2-135m", "lora_rank": 8})
    assert ri.resume_command("hermes-grpo", "grpo", model, old, old["model"], lambda name: False,
                             "make up ALGO=grpo REPLICAS=2") == "make up ALGO=grpo REPLICAS=2"

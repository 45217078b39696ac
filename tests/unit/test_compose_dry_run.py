"""The dry-run that runs alongside `up --wait`: the controller's side (a one-off container it can cancel) and the
trainer's side (a bounded wait for inference and Atropos that names the layer). No Docker, no model."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_stack import health
from hermes_stack.controller.compose import CommandFailed, Compose, ComposeParams, stack_params
from hermes_stack.controller.dry_run_alongside import DryRunAlongside
from hermes_stack.errors import StackError
from hermes_stack.service_env import ServiceEnv
from hermes_stack.trainer.__main__ import LayerFailure, wait_until_serving

ROOT = Path("/repo")


class FakeDocker:
    """The project network appears after `network_after` inspections (as `up --wait` creates it); streams the
    one-off's output; `docker rm --force NAME` ends a one-off that is still running."""

    def __init__(self, lines=(), exit_code=0, blocks=False, network_after=0):
        self.lines, self.exit_code, self.blocks, self.network_after = list(lines), exit_code, blocks, network_after
        self.removed = threading.Event()
        self.runs: list[list[str]] = []
        self.streamed: list[list[str]] = []

    def runner(self, argv, env, capture):
        self.runs.append(argv)
        if argv[:3] == ["docker", "rm", "--force"]:
            self.removed.set()
        inspects = sum(a[:3] == ["docker", "network", "inspect"] for a in self.runs)
        if argv[:3] == ["docker", "network", "inspect"] and inspects <= self.network_after:
            raise CommandFailed(argv, 1, f"Error: No such network: {argv[-1]}")
        return ""

    def streamer(self, argv, env):
        self.streamed.append(argv)
        yield from self.lines
        if self.blocks and not self.removed.wait(10):
            raise AssertionError("never removed")
        if self.exit_code or self.blocks:
            raise CommandFailed(argv, self.exit_code or 137, "trainer: inference: not ready")


def _compose(fake: FakeDocker) -> Compose:
    return Compose(stack_params("grpo", "cpu", ROOT), runner=fake.runner, streamer=fake.streamer)


def test_dry_run_one_off_is_named_and_waits_for_the_services_itself():
    fake = FakeDocker(["trainer dry-run ok: ..."])
    dry = DryRunAlongside(_compose(fake), "hermes-test-grpo", wait_s=300).start()
    assert dry.finish(5) == ["trainer dry-run ok: ..."] and dry.failure is None
    argv = fake.streamed[0]
    assert argv[argv.index("--name") + 1] == dry.name and dry.name.startswith("hermes-test-grpo-dry-run-")
    assert argv[-3:] == ["--dry-run", "--wait", "300"]


def test_dry_run_starts_only_once_up_has_made_the_project_network():
    fake = FakeDocker(["ok"], network_after=2)
    dry = DryRunAlongside(_compose(fake), "hermes-grpo", wait_s=30).start()
    assert dry.finish(5) == ["ok"]
    inspects = [a for a in fake.runs if a[:3] == ["docker", "network", "inspect"]]
    assert len(inspects) == 3 and inspects[0][-1] == "hermes-grpo_default"
    assert len(fake.streamed) == 1


def test_cancel_before_the_network_exists_never_starts_the_one_off():
    fake = FakeDocker(network_after=10**6)
    dry = DryRunAlongside(_compose(fake), "hermes-grpo", wait_s=30).start()
    dry.cancel(within_s=5)
    assert fake.streamed == [] and not dry._thread.is_alive()


def test_a_failed_dry_run_is_kept_for_the_controller_with_its_output():
    fake = FakeDocker(["trainer: model: broken"], exit_code=1)
    dry = DryRunAlongside(_compose(fake), "hermes-grpo", wait_s=5).start()
    assert dry.finish(5) == ["trainer: model: broken"]
    assert isinstance(dry.failure, CommandFailed) and dry.failure.returncode == 1


def test_cancel_removes_the_one_off_until_its_compose_run_has_ended():
    fake = FakeDocker(["loading"], blocks=True)
    dry = DryRunAlongside(_compose(fake), "hermes-grpo", wait_s=900).start()
    while not fake.streamed:  # the one-off is running
        dry._thread.join(0.01)
    dry.cancel(within_s=10)
    assert ["docker", "rm", "--force", dry.name] in fake.runs
    assert not dry._thread.is_alive()


def test_cancel_of_a_dry_run_never_started_touches_nothing():
    fake = FakeDocker()
    DryRunAlongside(_compose(fake), "hermes-grpo", wait_s=5).cancel(within_s=1)  # GPU: up failed before it started
    assert fake.runs == [] and fake.streamed == []


def test_a_dry_run_that_outlives_its_bound_is_removed_and_reported():
    fake = FakeDocker(blocks=True)
    dry = DryRunAlongside(_compose(fake), "hermes-grpo", wait_s=1).start()
    with pytest.raises(Exception, match="did not end within 0 s"):
        dry.finish(0.05)
    assert ["docker", "rm", "--force", dry.name] in fake.runs


# ---- the trainer's bounded wait ------------------------------------------------------------------------------------

def _stack():
    return SimpleNamespace(settings=SimpleNamespace(inference=SimpleNamespace(base_url="http://inference:8001/v1"),
                                                    atropos=SimpleNamespace(rollout_server_url="http://atropos:8000")))


@pytest.fixture
def services(monkeypatch):
    """A fake network: inference becomes ready after `inference_after` probes; Atropos answers when `atropos_up`."""
    monkeypatch.setenv("HERMES_INFERENCE_URL", "http://inference:8001/v1")
    monkeypatch.setenv("HERMES_ATROPOS_URL", "http://atropos:8000")
    monkeypatch.setenv("HERMES_INFERENCE_KEY", "k")
    monkeypatch.delenv("HERMES_SERVED_MODEL_NAME", raising=False)
    state = SimpleNamespace(inference_after=0, atropos_up=True, probes=[], key_refused=False)
    monkeypatch.setattr(health, "POLL_S", 0.01)

    def fetch(method, url, body, headers):
        state.probes.append(url)
        if url.startswith("http://inference"):
            if state.key_refused:
                return 401, None
            if sum(u.endswith("/models") for u in state.probes) <= state.inference_after:
                raise health.NotReady(f"{method} {url} failed: [Errno 111] Connection refused")
            return (200, {"data": [{"id": "tiny"}]}) if url.endswith("/models") else (200, {"text": "2"})
        if not state.atropos_up:
            raise health.NotReady(f"{method} {url} failed: [Errno 111] Connection refused")
        return 200, {"current_step": 0}

    monkeypatch.setattr(health, "http_fetch", fetch)
    return state


def test_dry_run_waits_until_inference_generates_then_checks_atropos(services):
    services.inference_after = 3
    wait_until_serving(_stack(), 5.0, ServiceEnv.from_environ())
    assert sum(u.endswith("/models") for u in services.probes) == 4
    assert services.probes[-1] == "http://atropos:8000/status"


def test_dry_run_wait_running_out_names_the_layer(services):
    services.atropos_up = False
    with pytest.raises(LayerFailure) as failed:
        wait_until_serving(_stack(), 0.1, ServiceEnv.from_environ())
    assert failed.value.layer == "atropos"
    assert "not ready within --wait 0.1 s" in str(failed.value) and "Connection refused" in str(failed.value)


def test_a_refused_key_fails_the_dry_run_at_once_instead_of_waiting(services):
    services.key_refused = True
    with pytest.raises(LayerFailure) as failed:
        wait_until_serving(_stack(), 600.0, ServiceEnv.from_environ())
    assert failed.value.layer == "inference" and "same HERMES_INFERENCE_KEY" in str(failed.value)
    assert len(services.probes) == 1


def test_without_a_wait_the_dry_run_probes_nothing_extra(services):
    services.inference_after = 10**6
    wait_until_serving(_stack(), 0, ServiceEnv.from_environ())
    assert services.probes == []


# ---- bring_up: the dry-run goes alongside `up --wait` on CPU, after it on GPU ------------------------------------------

class StackFakes:
    """`compose up --wait` that on CPU only returns once the dry-run's `compose run` has started: a controller that
    ran them one after the other would time out here instead of passing."""

    def __init__(self, require_run_during_up: bool):
        self.require, self.events = require_run_during_up, []
        self.run_started = threading.Event()

    def runner(self, argv, env, capture):
        if "up" in argv:
            self.events.append("up begins")
            if self.require and not self.run_started.wait(5):
                raise AssertionError("the dry-run did not start while up --wait ran")
            self.events.append("up done")
        return ""

    def streamer(self, argv, env):
        self.events.append("run begins")
        self.run_started.set()
        yield "trainer dry-run ok: ..."


def _stub_bring_up(monkeypatch, tmp_path, fakes, device: str | None = None) -> None:
    """bring_up with every stage before compose stubbed: no Docker probe, no validation; compose runs `fakes`'
    runner and streamer. `device`: what the device choice resolves to (default: the one asked for)."""
    from hermes_stack.controller import bring_up, preflight
    from hermes_stack.controller import device as devices

    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    monkeypatch.setattr(devices, "resolve_device", lambda requested, probe: device or requested)
    monkeypatch.setattr(preflight, "preflight", lambda device, probe=None: [])
    monkeypatch.setattr(bring_up, "validated_with_key",
                        lambda algo, device, unlock, keyfile=None, model=None, replicas=None: (None, "k"))
    monkeypatch.setattr(bring_up, "plan_compose", lambda plan, env=None, echo=True: Compose(
        stack_params(plan.algo, plan.device, tmp_path, files=plan.files), runner=fakes.runner,
        streamer=fakes.streamer))


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_bring_up_runs_the_dry_run_alongside_up_on_cpu_and_after_it_on_gpu(device, monkeypatch, tmp_path, capsys):
    from hermes_stack.controller import bring_up

    fakes = StackFakes(require_run_during_up=device == "cpu")
    _stub_bring_up(monkeypatch, tmp_path, fakes)
    bring_up.bring_up("grpo", device, 60, False, None, stop_after_dry_run=True, build=False)
    out = capsys.readouterr().out  # no trainer runs after a dry-run: its step lines were an empty log
    assert "start training:     make up ALGO=grpo" in out and "logs --follow trainer" not in out
    if device == "cpu":
        assert fakes.events.index("run begins") < fakes.events.index("up done")
    else:
        assert fakes.events == ["up begins", "up done", "run begins"]


class FinishedRunFakes(StackFakes):
    """The serving `up --wait` and the dry-run pass; the training `up --wait` fails as compose fails it when the
    trainer exits at once (its environment's dependency "failed to start"); ps and the trainer's log say why."""

    def __init__(self, trainer_code: int, log: str):
        super().__init__(require_run_during_up=False)
        self.trainer_code, self.log = trainer_code, log

    def runner(self, argv, env, capture):
        import json

        if "up" in argv and "trainer" in argv:
            raise CommandFailed(argv, 1, "dependency failed to start: container hermes-grpo-trainer-1 exited (0)")
        if "ps" in argv:
            rows = [{"Service": "atropos", "Name": "a", "State": "running", "Health": "healthy", "ExitCode": 0},
                    {"Service": "trainer", "Name": "t", "State": "exited", "Health": "", "ExitCode": self.trainer_code}]
            return "\n".join(json.dumps(r) for r in rows)
        if "logs" in argv:
            return self.log
        return ""


@pytest.mark.parametrize("code", [0, 1])
def test_up_on_a_run_already_complete_says_so_and_what_to_do_instead_of_composes_error(code, monkeypatch, tmp_path,
                                                                                      capsys):
    """A finished run, then `make down` and `make up` again (the README's "the next make up resumes"): the trainer
    exits 0 at once, and compose failed the `up` with its own "dependency failed to start". A trainer that failed
    is still a failure."""
    from hermes_stack.controller import bring_up

    fakes = FinishedRunFakes(code, "trainer-1 | INFO training already complete: checkpoint step 400 >= num_steps 400")
    _stub_bring_up(monkeypatch, tmp_path, fakes)
    if code:
        with pytest.raises(StackError) as failed:
            bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=False, build=False)
        # the stack is left up for its logs: the last line says how to stop it
        assert failed.value.lines()[0].startswith("service trainer is exited 1")
        assert failed.value.lines()[-1] == ("the other services stay up for their logs; `make down ALGO=grpo` stops "
                                            "them")
        return
    bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=False, build=False)
    out = capsys.readouterr().out
    assert "nothing to train: the run is complete (checkpoint step 400 >= num_steps 400)" in out
    assert "set trainer.num_steps above 400 in configs/settings_grpo.json, then make up ALGO=grpo" in out
    assert "make down ALGO=grpo VOLUMES=1" in out and "make report ALGO=grpo" in out
    assert "Where to look" not in out  # no step lines will come


@pytest.mark.parametrize("device,model,replicas,again", [
    ("cpu", None, None, "make dry-run ALGO=grpo DEVICE=cpu"),
    ("auto", "smollm2-135m", 2, "make dry-run ALGO=grpo MODEL=smollm2-135m REPLICAS=2"),
])
def test_a_failed_dry_run_names_a_command_that_runs_it_again_as_typed(device, model, replicas, again, monkeypatch,
                                                                       tmp_path):
    """It printed compose's own `run` of the trainer, which typed by hand stopped at once: the secrets it needs
    (HERMES_INFERENCE_KEY) are variables only `up` sets."""
    from hermes_stack.controller import bring_up

    fake = FakeDocker(["trainer: model: broken"], exit_code=1)
    _stub_bring_up(monkeypatch, tmp_path, fake, device="cpu")
    with pytest.raises(StackError) as failed:
        bring_up.bring_up("grpo", device, 5, False, None, stop_after_dry_run=True, build=False, model=model,
                          replicas=replicas)
    assert str(failed.value).endswith(f"Run it again, the stack up to the dry-run: {again}")
    assert "docker compose" not in str(failed.value)


class TrainingFakes(StackFakes):
    """A project whose trainer runs now, at step 7: any `up`, `build` or `run` would touch the live run."""

    def __init__(self):
        super().__init__(require_run_during_up=False)

    def runner(self, argv, env, capture):
        import json

        if "ps" in argv:
            return json.dumps({"Service": "trainer", "Name": "t", "State": "running", "Health": "healthy",
                               "ExitCode": 0})
        if "exec" in argv:
            return '{"step": 7, "reward_mean": 0.5}\n'
        self.events.append(" ".join(argv))
        return ""


@pytest.mark.parametrize("dry_run_only", [False, True])
def test_up_of_a_run_that_trains_starts_nothing_and_a_dry_run_beside_it_is_refused(dry_run_only, monkeypatch,
                                                                                  tmp_path, capsys):
    """A second `make up` while training ran the build and the dry-run beside the live run: the dry-run's weight
    push put probe weights into the inference server the run sampled from (a lifecycle sweep, 2026-12-07)."""
    from hermes_stack.controller import bring_up
    from hermes_stack.errors import InputError

    fakes = TrainingFakes()
    _stub_bring_up(monkeypatch, tmp_path, fakes, device="cpu")
    if dry_run_only:
        with pytest.raises(InputError) as refused:
            bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=True, build=True)
        assert refused.value.lines() == [
            ("command line: dry-run: found the hermes-grpo stack training (step 7), expected a stack that is not "
            "training. Hint: make down ALGO=grpo first (the stop saves a checkpoint), then make dry-run ALGO=grpo: its "
            "weight-sync check pushes probe weights into the inference server the run samples from")]
    else:
        bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=False, build=True)
        out = capsys.readouterr().out
        assert "hermes-grpo is training already (step 7): nothing to start." in out
        assert "make down ALGO=grpo, then make up ALGO=grpo" in out
    assert fakes.events == []  # no build, no up, no dry-run


def test_up_beside_a_training_run_with_another_replica_count_is_refused_and_its_override_kept(monkeypatch, tmp_path):
    """`make up ALGO=grpo` (one replica) beside a REPLICAS=2 run removed .hermes/replicas-grpo.yml, which the run's
    status, logs and down are read with: down then left inference-2 and the router running."""
    from hermes_stack.controller import bring_up
    from hermes_stack.controller.compose import stack_files
    from hermes_stack.controller.replicas import write_override
    from hermes_stack.controller.stack_state import STATE_DIR, Plan, save_plan
    from hermes_stack.errors import InputError

    fakes = TrainingFakes()
    _stub_bring_up(monkeypatch, tmp_path, fakes, device="cpu")
    override = write_override(tmp_path, "grpo", "cpu", 2)
    before = (tmp_path / override).read_text()
    save_plan(tmp_path / STATE_DIR, Plan("grpo", "cpu", stack_files("grpo", "cpu", [override])))
    with pytest.raises(InputError) as refused:
        bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=False, build=True)
    assert refused.value.lines() == [
        ("command line: REPLICAS: found 1, expected 2, the replica count of the hermes-grpo run training now (step "
         "7). Hint: make up ALGO=grpo REPLICAS=2 starts its stopped services again; to change the count, make down "
         "ALGO=grpo first (the stop saves a checkpoint)")]
    assert (tmp_path / override).read_text() == before and fakes.events == []


def test_a_refusal_after_the_checks_began_leaves_the_override_and_the_plan_as_they_were(monkeypatch, tmp_path):
    """The override was written before the resume check: `make up MODEL=other` refused by it (after `make up
    REPLICAS=2`, `make down`) had removed .hermes/replicas-grpo.yml while the record still named it, and the printed
    `make down ALGO=grpo VOLUMES=1` then failed on the missing file."""
    from hermes_stack.controller import bring_up
    from hermes_stack.controller.compose import stack_files
    from hermes_stack.controller.replicas import write_override
    from hermes_stack.controller.stack_state import STATE_DIR, Plan, load_plan, save_plan
    from hermes_stack.errors import InputError, Problem

    _stub_bring_up(monkeypatch, tmp_path, StackFakes(require_run_during_up=False), device="cpu")
    override = write_override(tmp_path, "grpo", "cpu", 2)
    before = (tmp_path / override).read_text()
    saved = Plan("grpo", "cpu", stack_files("grpo", "cpu", [override]))
    save_plan(tmp_path / STATE_DIR, saved)

    def refuse(*args, **kwargs):
        raise InputError(Problem("volume", "checkpoints", "another model", "the same"))

    monkeypatch.setattr(bring_up, "_check_resume", refuse)
    with pytest.raises(InputError):
        bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=False, build=True)
    assert (tmp_path / override).read_text() == before and load_plan(tmp_path / STATE_DIR, "grpo") == saved


def test_a_dry_run_with_replicas_names_them_in_the_up_it_suggests_and_records_its_plan(monkeypatch, tmp_path,
                                                                                       capsys):
    """`make dry-run REPLICAS=2` printed `start training: make up ALGO=grpo`: one replica, so the up removed the
    override while the router still held the inference port."""
    from hermes_stack.controller import bring_up
    from hermes_stack.controller.stack_state import STATE_DIR, load_plan

    _stub_bring_up(monkeypatch, tmp_path, StackFakes(require_run_during_up=True), device="cpu")
    monkeypatch.setattr(bring_up, "replica_count", lambda stack: 2)
    bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=True, build=False)
    assert "start training:     make up ALGO=grpo REPLICAS=2" in capsys.readouterr().out
    assert ".hermes/replicas-grpo.yml" in load_plan(tmp_path / STATE_DIR, "grpo").files
    assert bring_up.after_a_complete_run("ppo", 400, "make up ALGO=ppo REPLICAS=3")[1].endswith(
        "then make up ALGO=ppo REPLICAS=3 (it resumes from step 400)")


def test_up_beside_a_run_names_its_replicas_and_a_log_command_that_reaches_it(monkeypatch, tmp_path, capsys):
    """Beside a REPLICAS=2 run, `up` said `make down ALGO=grpo, then make up ALGO=grpo` (one replica) and `docker
    compose logs --follow trainer`, which reads .env: a later `make up ALGO=ppo` had pointed it at the PPO stack."""
    from hermes_stack.controller import bring_up
    from hermes_stack.controller.compose import stack_files
    from hermes_stack.controller.replicas import write_override
    from hermes_stack.controller.stack_state import STATE_DIR, Plan, save_plan

    fakes = TrainingFakes()
    _stub_bring_up(monkeypatch, tmp_path, fakes, device="cpu")
    monkeypatch.setattr(bring_up, "replica_count", lambda stack: 2)
    save_plan(tmp_path / STATE_DIR, Plan("grpo", "cpu", stack_files("grpo", "cpu", [write_override(tmp_path, "grpo",
                                                                                                    "cpu", 2)])))
    bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=False, build=True)
    out = capsys.readouterr().out
    assert "make down ALGO=grpo, then make up ALGO=grpo REPLICAS=2 (the stop saves" in out
    assert "trainer step lines: docker compose --project-name hermes-grpo" in out and fakes.events == []


def test_the_hints_beside_a_run_of_a_named_project_name_it(monkeypatch, tmp_path, capsys):
    """After `HERMES_PROJECT_NAME=hermes-grpo-2 make up`, the printed `make up ALGO=grpo` started or resumed
    hermes-grpo, not the run the hint was about."""
    from hermes_stack.controller import bring_up

    fakes = TrainingFakes()
    _stub_bring_up(monkeypatch, tmp_path, fakes, device="cpu")
    monkeypatch.setenv("HERMES_PROJECT_NAME", "hermes-grpo-2")
    bring_up.bring_up("grpo", "cpu", 60, False, None, stop_after_dry_run=False, build=True)
    assert ("make down ALGO=grpo, then HERMES_PROJECT_NAME=hermes-grpo-2 make up ALGO=grpo (the stop saves"
            in capsys.readouterr().out)


def _user_env_project(tmp_path, monkeypatch):
    import shutil
    from types import SimpleNamespace

    (tmp_path / "environments").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "fixtures" / "user_environments" / "upstream_sums.py",
                tmp_path / "environments")
    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    return SimpleNamespace(config=SimpleNamespace(environment=SimpleNamespace(name="upstream-sums")))


def test_a_user_environment_is_checked_in_its_image_before_training(tmp_path, monkeypatch):
    """Its import, config_init() and setup() ran only once training had started: a failure was a crash loop."""
    from hermes_stack.controller.bring_up import ENVIRONMENT_CHECK, _check_user_environment

    stack = _user_env_project(tmp_path, monkeypatch)
    asked = []

    def streamer(argv, env):
        asked.append(argv)
        yield ("environment-run-1  | 2026-12-07 10:00:00,000 INFO hermes_stack.environment: environment check: "
               "upstream-sums (UpstreamSumsEnv, environments/upstream_sums.py) imports, config_init() and setup() ran")

    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: "",
                      streamer=streamer)
    assert _check_user_environment(compose, stack, "make up ALGO=grpo") == [
        "upstream-sums (UpstreamSumsEnv, environments/upstream_sums.py) imports, config_init() and setup() ran"]
    (argv,) = asked
    assert argv[argv.index("run"):][-len(ENVIRONMENT_CHECK) - 1:] == ["environment", *ENVIRONMENT_CHECK]

    def failing(argv, env):
        yield ("2026-12-07 10:00:00,000 ERROR hermes_stack.environment: environments/upstream_sums.py: "
               "UpstreamSumsEnv.setup() failed: FileNotFoundError: seeds.json at environments/upstream_sums.py:51")
        raise CommandFailed(argv, 1, "")

    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: "",
                      streamer=failing)
    with pytest.raises(StackError) as refused:
        _check_user_environment(compose, stack, "make dry-run ALGO=grpo MODEL=smollm2-135m")
    assert str(refused.value) == (
        "dry-run: environment upstream-sums (environments/upstream_sums.py) failed its check: environments/"
        "upstream_sums.py: UpstreamSumsEnv.setup() failed: FileNotFoundError: seeds.json at environments/"
        "upstream_sums.py:51. Fix it, then check it again: make dry-run ALGO=grpo MODEL=smollm2-135m")


def test_the_built_in_environment_needs_no_check(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from hermes_stack.controller.bring_up import _check_user_environment

    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    stack = SimpleNamespace(config=SimpleNamespace(environment=SimpleNamespace(name="gsm8k")))
    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: "",
                      streamer=lambda argv, env: pytest.fail("no container for the built-in environment"))
    assert _check_user_environment(compose, stack, "make up ALGO=grpo") == []

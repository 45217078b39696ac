"""`python -m hermes_stack.trainer --dry-run`: every layer checked, no optimisation step, one line naming the failing
layer. Runs main() in-process with the real TorchEngine on the embedded tiny model, the real run-api and a fake
inference service."""

from __future__ import annotations

import signal

import httpx
import pytest
from fakes.loopback import free_port
from trainer_helpers import BuiltinInference, FakeInferenceForTrainer, embedded_model_dir, write_configs

from hermes_stack.errors import InputError
from hermes_stack.service_env import ServiceEnv
from hermes_stack.trainer.__main__ import main


@pytest.fixture
def env(api, tmp_path, monkeypatch):
    """A complete, healthy environment; each test breaks one layer."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}  # main() installs handlers
    api.reset()
    model = embedded_model_dir()
    inference = FakeInferenceForTrainer(model=str(model))
    for name in ("HERMES_SERVED_MODEL_NAME", "WANDB_API_KEY", "TINKER_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HERMES_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HERMES_ATROPOS_URL", api.url)
    monkeypatch.setenv("HERMES_INFERENCE_URL", inference.url)
    monkeypatch.setenv("HERMES_INFERENCE_KEY", inference.key)
    monkeypatch.setenv("HERMES_EMBEDDED_MODEL", str(model))
    configs = write_configs(tmp_path / "configs")
    yield {"configs": configs, "inference": inference, "api": api, "data": tmp_path / "data"}
    inference.stop()
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _dry_run(env, *extra: str) -> int:
    return main(["--dry-run", "--algo", "grpo", "--config-dir", str(env["configs"]), "--profile", "embedded",
                 *extra])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_all_layers_answer_and_nothing_is_trained(env, capsys, monkeypatch) -> None:
    """Against the real built-in inference service (the fake answers no log-probs, which the dry-run's checks need:
    test_dry_run_checks.py); a fake server without log-probs fails them."""
    served = BuiltinInference(embedded_model_dir(), env["data"])
    try:
        monkeypatch.setenv("HERMES_INFERENCE_URL", served.url)
        monkeypatch.setenv("HERMES_INFERENCE_KEY", served.key)
        assert _dry_run(env) == 0
        out = capsys.readouterr().out
        assert "trainer dry-run ok" in out and "would train 8 steps of 8 sequences" in out
        assert _dry_run(env, "--max-steps", "3") == 0
        assert "would train 3 steps" in capsys.readouterr().out
    finally:
        served.stop()
    assert httpx.get(env["api"].url + "/info").json()["batch_size"] == -1  # never registered
    assert not (env["data"] / "metrics.jsonl").exists() and not (env["data"] / "checkpoints").exists()


def test_a_server_without_logprobs_fails_the_checks_after_every_layer_answered(env, capsys) -> None:
    assert _dry_run(env) == 1
    assert _one_line(capsys).startswith("trainer: weight-sync: the inference server returned no completion tokens "
                                        "with log-probs")
    calls = [(m, p) for m, p, _ in env["inference"].calls]
    assert ("GET", "/v1/models") in calls and ("POST", "/generate") in calls
    generate = next(body for m, p, body in env["inference"].calls if p == "/generate")
    assert generate["sampling_params"]["max_new_tokens"] == 1  # the layer check's one token came first
    assert httpx.get(env["api"].url + "/info").json()["batch_size"] == -1  # never registered


def test_bad_config_is_the_config_layer_exit_2(env, capsys) -> None:
    (env["configs"] / "settings_grpo.json").write_text('{"tinker": ')
    assert _dry_run(env) == 2
    assert _one_line(capsys).startswith("trainer: config: ")


def test_missing_model_is_the_model_layer(env, capsys, monkeypatch) -> None:
    monkeypatch.delenv("HERMES_EMBEDDED_MODEL")
    assert _dry_run(env) == 1
    assert _one_line(capsys).startswith('trainer: model: inference.model_path is "embedded" but HERMES_EMBEDDED_MODEL')


def test_model_dir_without_weights_is_the_model_layer(env, capsys, monkeypatch, tmp_path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    monkeypatch.setenv("HERMES_EMBEDDED_MODEL", str(broken))
    assert _dry_run(env) == 1
    assert _one_line(capsys).startswith("trainer: model: torch engine could not load")


def test_refused_key_is_the_inference_layer(env, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HERMES_INFERENCE_KEY", "wrong")
    assert _dry_run(env) == 1
    assert "same HERMES_INFERENCE_KEY" in _one_line(capsys)


def test_unreachable_inference_is_the_inference_layer(env, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HERMES_INFERENCE_URL", f"http://127.0.0.1:{free_port()}/v1")
    assert _dry_run(env) == 1
    assert _one_line(capsys).startswith("trainer: inference: inference: GET")


def test_other_served_model_is_the_inference_layer(env, capsys) -> None:
    env["inference"].model = "someone-else/model"
    assert _dry_run(env) == 1
    line = _one_line(capsys)
    assert line.startswith("trainer: inference:") and "someone-else/model" in line


def test_unreachable_atropos_is_the_atropos_layer(env, capsys, monkeypatch) -> None:
    monkeypatch.setenv("HERMES_ATROPOS_URL", f"http://127.0.0.1:{free_port()}")
    assert _dry_run(env) == 1
    assert _one_line(capsys).startswith("trainer: atropos: atropos: GET")


def test_max_steps_zero_is_refused(env, capsys) -> None:
    assert _dry_run(env, "--max-steps", "0") == 2
    assert _one_line(capsys).startswith("trainer: config: --max-steps 0")


def test_engine_choice(monkeypatch) -> None:
    from types import SimpleNamespace

    from hermes_stack.trainer.__main__ import engine_kind

    def stack(engine: str, profile: str = "gpu"):
        return SimpleNamespace(profile=profile, settings=SimpleNamespace(trainer=SimpleNamespace(engine=engine)))

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert engine_kind(stack("tinker")) == "tinker"
    assert engine_kind(stack("auto")) == "torch"
    monkeypatch.setenv("TINKER_API_KEY", "tml-x")
    assert engine_kind(stack("auto", "embedded")) == "torch"
    import torch

    assert engine_kind(stack("auto")) == ("tinker" if torch.cuda.is_available() else "torch")


def test_held_out_evaluator_for_the_offline_task_only(env) -> None:
    """The embedded profile's task has held-out sums: before any step, the evaluator reproduces the accuracy the
    image build recorded for the warm-started model (LoRA starts as the identity). The gpu profile's gsm8k: none."""
    import json

    from hermes_stack.modelcore.embedded import MARKER_FILE
    from hermes_stack.trainer.__main__ import build_engine, held_out_evaluator, load_config, parse_args

    service = ServiceEnv.from_environ()
    args = parse_args(["--algo", "grpo", "--config-dir", str(env["configs"]), "--profile", "embedded"], service)
    stack = load_config(args, service)
    engine = build_engine(stack, service)
    evaluate = held_out_evaluator(stack, engine)
    marker = json.loads((embedded_model_dir() / MARKER_FILE).read_text())
    assert evaluate() == {"accuracy": marker["test_accuracy"], "format": marker["test_format"]}
    gpu = load_config(parse_args(["--algo", "grpo", "--config-dir", str(env["configs"]), "--profile", "gpu"], service), service)
    assert gpu.config.environment.dataset != "offline-arith"
    assert held_out_evaluator(gpu, engine) is None
    # A user's environment (environments/) has its own task and evaluate(): the built-in sums are not its held-out
    # set, whatever [environment] dataset says (status showed "held-out acc 0.000" beside one).
    import dataclasses

    mine = dataclasses.replace(stack, config=stack.config.model_copy(update={
        "environment": stack.config.environment.model_copy(update={"name": "sevens"})}))
    assert mine.config.environment.dataset == "offline-arith" and held_out_evaluator(mine, engine) is None


def test_engine_gets_the_rollout_temperature_and_the_micro_batch_size(env) -> None:
    """The torch engine's log-probs use [rollout] temperature (the distribution inference samples from), and it trains
    in micro-batches of settings trainer.micro_batch_size."""
    import json

    from trainer_helpers import write_configs

    from hermes_stack.trainer.__main__ import build_engine, load_config, parse_args

    write_configs(env["configs"], algo="ppo", group_size=1)
    path = env["configs"] / "settings_ppo.json"
    settings = json.loads(path.read_text())
    settings.setdefault("trainer", {})["micro_batch_size"] = 4
    path.write_text(json.dumps(settings))
    service = ServiceEnv.from_environ()
    stack = load_config(parse_args(["--algo", "ppo", "--config-dir", str(env["configs"]), "--profile", "embedded"], service),
                        service)
    engine = build_engine(stack, service)
    assert engine.temperature == stack.config.rollout.temperature == 0.7
    assert engine.micro_batch_size == 4
    # the critic's learning rate is value_loss_coef x the policy's
    policy_lr, critic_lr = (g["lr"] for g in engine.optimizer.param_groups)
    assert critic_lr == pytest.approx(policy_lr * stack.config.algorithm.value_loss_coef)
    # the embedded profile's PPO schedule: the full rate for the first half of num_steps, then a cosine to 0.1x
    trainer = stack.settings.trainer
    assert (trainer.lr_schedule, trainer.lr_decay_start, trainer.min_lr_ratio) == ("cosine", 0.5, 0.1)
    assert (engine.lr_decay_steps, engine.lr_hold_steps, engine.min_lr_ratio) == (
        trainer.num_steps, trainer.num_steps // 2, 0.1)


def test_tinker_engine_refuses_a_temperature_its_losses_cannot_follow(env, monkeypatch) -> None:
    """Tinker's built-in losses compute log-probs at temperature 1: at the shipped 0.7 the trainer refuses before it
    loads anything (validate refuses the same: config/rules.py tinker_temperature; "auto" decides in the trainer,
    on TINKER_API_KEY). At 1.0 the local reference uses that temperature, the critic value_loss_coef x the rate."""
    from trainer_helpers import write_configs

    from hermes_stack.trainer import engine_tinker
    from hermes_stack.trainer.__main__ import _tinker_engine, load_config, parse_args

    made = {}
    monkeypatch.setattr(engine_tinker, "LocalCritic", lambda *a, **k: made.setdefault("critic", k))
    monkeypatch.setattr(engine_tinker, "TinkerEngine", lambda **k: made.setdefault("engine", k))
    write_configs(env["configs"], algo="ppo", group_size=1)
    service = ServiceEnv.from_environ()
    stack = load_config(parse_args(["--algo", "ppo", "--config-dir", str(env["configs"]), "--profile", "gpu"], service),
                        service)
    algo = stack.config.algorithm
    with pytest.raises(InputError) as err:
        _tinker_engine(stack, algo, embedded_model_dir(), "cpu", service)
    assert "rollout.temperature: found 0.7 with the tinker engine, expected 1.0" in str(err.value)
    assert made == {}  # nothing loaded, nothing started
    toml = env["configs"] / "config_ppo.toml"
    toml.write_text(toml.read_text().replace("temperature = 0.7", "temperature = 1.0"))
    stack = load_config(parse_args(["--algo", "ppo", "--config-dir", str(env["configs"]), "--profile", "gpu"],
                                    service), service)
    _tinker_engine(stack, algo, embedded_model_dir(), "cpu", service)
    assert made["critic"]["temperature"] == 1.0
    assert made["critic"]["learning_rate"] == pytest.approx(0.5 * stack.settings.tinker.learning_rate)


@pytest.mark.slow
def test_dry_run_and_weight_sync_against_the_real_inference_service(env, capsys, tmp_path, monkeypatch) -> None:
    """The builtin inference service (python -m hermes_stack.inference) answers the dry-run and loads the weights
    the TorchEngine exports: the trainer/inference contract end to end."""
    import os
    import subprocess
    import sys
    import time

    from trainer_helpers import REPO

    from hermes_stack.modelcore.weights_layout import export_step_weights
    from hermes_stack.trainer.__main__ import build_engine, inference_client, load_config, parse_args

    port = free_port()
    child_env = {**os.environ, "HERMES_CONFIG_DIR": str(env["configs"]), "HERMES_ALGO": "grpo",
                 "HERMES_PROFILE": "embedded", "HERMES_INFERENCE_PORT": str(port),
                 "HERMES_INFERENCE_HOST": "127.0.0.1", "PYTHONPATH": str(REPO)}
    log = (tmp_path / "inference.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "hermes_stack.inference"], env=child_env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        monkeypatch.setenv("HERMES_INFERENCE_URL", f"http://127.0.0.1:{port}/v1")
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "inference.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "inference.log").read_text()
            time.sleep(0.2)
        assert _dry_run(env) == 0, capsys.readouterr().err
        assert "trainer dry-run ok" in capsys.readouterr().out

        service = ServiceEnv.from_environ()
        args = parse_args(["--algo", "grpo", "--config-dir", str(env["configs"]), "--profile", "embedded"], service)
        stack = load_config(args, service)
        weights = export_step_weights(build_engine(stack, service), env["data"] / "weights", 1)
        client = inference_client(stack, service)
        assert client.push_weights(weights, 1).get("success") is True
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_engine_is_closed_when_training_stops(env, capsys, monkeypatch) -> None:
    """The Tinker engine holds a session with heartbeats: run() closes the engine however training ends."""
    monkeypatch.setenv("HERMES_ATROPOS_URL", f"http://127.0.0.1:{free_port()}")  # registration fails
    monkeypatch.setenv("HERMES_ATROPOS_OUTAGE_S", "1")  # the trainer rides out an outage this long, then stops
    closed: list[str] = []

    class ClosingEngine:
        def close(self) -> None:
            closed.append("closed")

    argv = ["--algo", "grpo", "--config-dir", str(env["configs"]), "--profile", "embedded"]
    assert main(argv, engine_factory=lambda stack: ClosingEngine()) == 1
    assert closed == ["closed"]
    assert "atropos" in _one_line(capsys)


def test_the_dry_run_says_where_a_resumed_run_goes_on(tmp_path) -> None:
    """A resumed `make up` said "atropos at step 0; would train 400 steps" at checkpoint step 146."""
    from types import SimpleNamespace

    from hermes_stack.trainer import checkpoint as ckpt
    from hermes_stack.trainer.__main__ import would_train

    root = tmp_path / "checkpoints"
    settings = SimpleNamespace(checkpoint_dir=root, num_steps=400, batch_size_sequences=256)
    assert would_train(settings) == "would train 400 steps of 256 sequences"
    for step in (120, 146):
        ckpt.save_checkpoint(root, step, {"engine": {"w": step}})
    (root / "step-150").mkdir()  # a save a crash cut short: not where the run resumes
    assert would_train(settings) == ("would resume after checkpoint step 146 and train to step 400, steps of 256 "
                                     "sequences")
    ckpt.save_checkpoint(root, 400, {"engine": {"w": 400}})
    assert would_train(settings) == "nothing to train: checkpoint step 400 >= num_steps 400"

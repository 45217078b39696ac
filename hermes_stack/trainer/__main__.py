"""`python -m hermes_stack.trainer [--dry-run [--wait S]] [--algo A] [--config-dir D] [--max-steps N]`: the trainer.

Layers, checked in this order by --dry-run (and by a real start): config -> model -> inference -> atropos. A failure
prints ONE line `trainer: <layer>: <what>` and exits non-zero (2 for bad config, 1 otherwise).

Environment: hermes_stack.service_env.ServiceEnv (docs/architecture.md, Runtime), read once by main() and passed on;
a function called without it reads the process environment itself.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_stack.errors import HermesError, InputError, Problem, StackError
from hermes_stack.service_heap import freeze_startup_heap

log = logging.getLogger("hermes_stack.trainer")

if TYPE_CHECKING:
    from hermes_stack.config.loader import StackConfig
    from hermes_stack.config.models import AlgorithmSection
    from hermes_stack.service_env import ServiceEnv
    from hermes_stack.trainer.engine import Engine
    from hermes_stack.trainer.loop import LoopSettings
    from hermes_stack.trainer.weights_sync import InferenceClient


class LayerFailure(Exception):
    def __init__(self, layer: str, message: str, exit_code: int = 1):
        super().__init__(f"trainer: {layer}: {message}")
        self.layer, self.exit_code = layer, exit_code


def parse_args(argv: list[str] | None, env: ServiceEnv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hermes_stack.trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="check config, model, inference and atropos, then exit without training")
    parser.add_argument("--wait", type=float, default=0.0,
                        help="dry-run: after loading the model, wait up to this many seconds for inference and "
                             "atropos to be ready (the controller starts the dry-run alongside `up --wait`)")
    parser.add_argument("--algo", default=env.algo, help="ppo or grpo")
    parser.add_argument("--config-dir", type=Path, default=env.config_dir)
    parser.add_argument("--profile", default=env.profile, help="gpu or embedded")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this step (<= trainer.num_steps)")
    parser.add_argument("--batch-timeout", type=float,
                        default=env.batch_timeout_s,
                        help="seconds to wait for one batch before failing with the likely cause")
    return parser.parse_args(argv)


# ---------------------------------------------------------------- layers


def load_config(args: argparse.Namespace, env: ServiceEnv) -> StackConfig:
    """The service's StackConfig (service_env.load_service_stack); --algo/--config-dir/--profile win over the
    environment's."""
    from hermes_stack.service_env import load_service_stack

    try:
        return load_service_stack(env.model_copy(update={"algo": args.algo, "config_dir": args.config_dir,
                                                         "profile": args.profile}))
    except InputError as exc:
        raise LayerFailure("config", "; ".join(exc.lines()), exit_code=2) from exc
    except ValueError as exc:  # e.g. an unknown profile name
        raise LayerFailure("config", str(exc), exit_code=2) from exc


def model_dir(stack: StackConfig, env: ServiceEnv) -> Path:
    """The policy's directory: the embedded tiny model for the `embedded` sentinel, a catalog model's directory in
    the image for its name (hermes_stack/modelcore/catalog.py), else inference.model_path."""
    from hermes_stack.modelcore.location import EMBEDDED_MODEL, model_location
    configured = model_location(stack.settings.inference.model_path, env.embedded_model, env.models_dir)
    if stack.settings.inference.model_path == EMBEDDED_MODEL and not (env.embedded_model / "config.json").is_file():
        raise LayerFailure("model", f"inference.model_path is \"embedded\" but HERMES_EMBEDDED_MODEL ({configured}) "
                                    "holds no model. Hint: build it with `python -m hermes_stack.modelcore.embedded "
                                    "build <dir>` and point HERMES_EMBEDDED_MODEL there")
    from hermes_stack.hub import is_hub_id, needs_hub, resolve_model

    if needs_hub(stack.profile, configured) and is_hub_id(configured):
        # The inference service downloads a hub id once into the shared cache (hermes-models) before it is healthy,
        # and the trainer starts after it: the files are normally there. Downloading here too is the fallback (a
        # dry-run on its own), into the same cache.
        try:
            return resolve_model(configured, who="trainer", log=log.info)
        except LookupError as exc:
            raise LayerFailure("model", f"inference.model_path {configured!r} (a hub id): {exc}") from None
    directory = Path(configured)
    if not directory.is_absolute() and not directory.is_dir():
        # A relative folder is the config's, i.e. the repository's, not the container's working directory.
        directory = env.config_dir.parent / configured
    if not (directory / "config.json").is_file():
        raise LayerFailure("model", f"{directory} is not a model directory (no config.json). Hint: "
                                    "inference.model_path is a hub id (org/name, downloaded once into the shared "
                                    "models cache on the gpu profile) or a model folder the containers can see "
                                    "(an absolute path mounted into inference and trainer)")
    return directory


def engine_kind(stack: StackConfig) -> str:
    """settings trainer.engine, with "auto" = tinker on a GPU with a Tinker key, torch otherwise."""
    kind = stack.settings.trainer.engine
    if kind != "auto":
        return kind
    if stack.profile == "embedded" or not os.environ.get("TINKER_API_KEY"):
        return "torch"
    import torch

    return "tinker" if torch.cuda.is_available() else "torch"


def micro_batch_size(stack: StackConfig, env: ServiceEnv) -> int | None:
    """trainer.micro_batch_size as written; unset: the GPU memory split's value that `up` passed in
    HERMES_MICRO_BATCH_SIZE (gpu profile); neither: None (the whole minibatch at once)."""
    configured = stack.settings.trainer.micro_batch_size
    return configured if configured is not None else env.micro_batch_size


def build_engine(stack: StackConfig, env: ServiceEnv) -> Engine:
    algo = stack.config.algorithm
    kind = engine_kind(stack)
    directory = model_dir(stack, env)
    try:
        import torch
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights 0%..100%" bars would bury the one-line errors

        device = "cuda" if torch.cuda.is_available() else "cpu"
        if kind == "tinker":
            return _tinker_engine(stack, algo, directory, device, env)

        from hermes_stack.trainer.engine_torch import TorchEngine

        return TorchEngine(directory, algo, stack.settings.tinker.learning_rate, device=device,
                           lora_rank=stack.settings.tinker.lora_rank,
                           temperature=stack.config.rollout.temperature,
                           epochs=stack.settings.trainer.epochs, minibatches=stack.settings.trainer.minibatches,
                           micro_batch_size=micro_batch_size(stack, env), **lr_schedule(stack))
    except HermesError as exc:
        raise LayerFailure("model", "; ".join(exc.lines()), exit_code=exc.exit_code) from exc
    except (OSError, ValueError, ImportError, RuntimeError, AttributeError) as exc:
        raise LayerFailure("model", f"{kind} engine could not load {directory}: {type(exc).__name__}: {exc}") from exc


def _tinker_engine(stack: StackConfig, algo: AlgorithmSection, directory: Path, device: str,
                   env: ServiceEnv) -> Engine:
    """Tinker trains the LoRA policy remotely; the reference (KL) and the critic (gae) run locally on the same base."""
    import json

    from hermes_stack.trainer.engine_tinker import LocalCritic, TinkerEngine

    # Tinker wants the hub name of the base model; the local directory's config.json remembers it.
    configured = stack.settings.inference.model_path
    base_model = json.loads((directory / "config.json").read_text()).get("_name_or_path") or configured
    if Path(base_model).is_absolute():
        base_model = configured
    from hermes_stack.trainer.algorithms import critic_learning_rate

    critic = None
    learning_rate = stack.settings.tinker.learning_rate
    temperature = stack.config.rollout.temperature
    if temperature != 1.0:
        # validate refuses this (config/rules.py, tinker_temperature); "auto" decides here, on TINKER_API_KEY, so
        # the trainer refuses too rather than train a wrong ratio.
        raise InputError(Problem(str(stack.config_path), "rollout.temperature",
                                 f"{temperature:g} with the tinker engine", "1.0 for the tinker engine",
                                 "Tinker's losses take log-probs at temperature 1; set temperature = 1.0, or "
                                 "\"trainer\": {\"engine\": \"torch\"} in the settings file"))
    if algo.uses_critic or algo.kl_coef > 0:
        # The local model takes the trainer's share of the GPU split, in its micro-batches (docs/memory.md).
        critic = LocalCritic(str(directory), device=device, with_value_head=algo.uses_critic,
                             learning_rate=critic_learning_rate(learning_rate, algo.value_loss_coef),
                             temperature=temperature, micro_batch_size=micro_batch_size(stack, env))
    return TinkerEngine(base_model=base_model, algo=algo, lora_rank=stack.settings.tinker.lora_rank,
                        learning_rate=learning_rate, critic=critic, timeout_s=env.tinker_timeout_s,
                        **lr_schedule(stack))


def lr_schedule(stack: StackConfig, steps: int | None = None, cosine: bool = False) -> dict[str, object]:
    """The engines' schedule arguments from [trainer] lr_schedule: a cosine spans the run, `steps` (default
    num_steps; bench/learn.py passes its own run length, and `cosine` to force the decay)."""
    t = stack.settings.trainer
    steps = t.num_steps if steps is None else steps
    return {"lr_decay_steps": steps if cosine or t.lr_schedule == "cosine" else None, "min_lr_ratio": t.min_lr_ratio,
            "lr_hold_steps": int(t.lr_decay_start * steps)}


def inference_client(stack: StackConfig, env: ServiceEnv) -> InferenceClient:
    from hermes_stack.trainer.weights_sync import InferenceClient
    return InferenceClient(inference_url(stack, env), env.key, replica_urls=env.replica_urls, algo=env.algo)


def inference_url(stack: StackConfig, env: ServiceEnv) -> str:
    return env.inference_url or stack.settings.inference.base_url


def check_inference(stack: StackConfig, client: InferenceClient, env: ServiceEnv) -> str:
    """/v1/models lists the model and one 1-token /generate succeeds (what atroposlib will call)."""
    from hermes_stack.modelcore import catalog
    from hermes_stack.modelcore.location import EMBEDDED_MODEL
    try:
        served = client.models()
        configured = stack.settings.inference.model_path
        # The inference service serves the configured model_path (or its path) unless compose names it.
        expected = {name for name in (env.served_model_name, configured) if name}
        if configured == EMBEDDED_MODEL or catalog.is_catalog_name(configured):
            expected.add(str(model_dir(stack, env)))
        if not served:
            raise LayerFailure("inference", f"{client.root}/v1/models lists no model")
        if not expected & set(served):
            raise LayerFailure("inference", f"{client.root}/v1/models lists {served}, not {sorted(expected)}. Hint: "
                                            "trainer and inference must be given the same inference.model_path "
                                            "(or the same HERMES_SERVED_MODEL_NAME)")
        client.generate_one_token()
    except HermesError as exc:
        raise LayerFailure("inference", "; ".join(exc.lines())) from exc
    return served[0]


def check_atropos(url: str) -> dict[str, Any]:
    from hermes_stack.trainer.atropos_client import AtroposClient

    client = AtroposClient(url, timeout_s=5.0)
    try:
        return client.status()
    except HermesError as exc:
        raise LayerFailure("atropos", "; ".join(exc.lines())) from exc
    finally:
        client.close()


def wait_until_serving(stack: StackConfig, wait_s: float, env: ServiceEnv) -> None:
    """Bounded wait for inference, then Atropos, to be ready by their healthchecks' own rules; the layer whose wait
    runs out is named. A dry-run started alongside `up --wait` loads its model meanwhile."""
    if wait_s <= 0:
        return
    import time

    from hermes_stack import health
    url = inference_url(stack, env)
    key = env.key or ""
    model = env.served_model_name
    started = time.monotonic()
    deadline = started + wait_s
    if env.replica_urls:  # behind the router: every replica generates, then the router has a healthy worker
        serving = [(f"inference ({r})", lambda r=r: health.check_inference(f"{r}/v1", key, model, health.http_fetch))
                   for r in env.replica_urls]
        serving.append(("router", lambda: health.check_router(url, health.http_fetch)))
    else:
        serving = [("inference", lambda: health.check_inference(url, key, model, health.http_fetch))]
    probes = (*serving, ("atropos", lambda: health.check_atropos(atropos_url(stack, env), health.http_fetch)))
    for layer, probe in probes:
        try:
            health.wait_for(probe, max(0.0, deadline - time.monotonic()))
        except health.Refused as exc:  # a wrong key: waiting would not help
            from hermes_stack.trainer.weights_sync import key_mismatch_hint

            raise LayerFailure(layer, f"{exc}. Hint: {key_mismatch_hint(env.algo)}") from None
        except health.NotReady as exc:
            raise LayerFailure(layer, f"not ready within --wait {wait_s:g} s: {exc}. "
                                      f"Hint: `docker compose logs {layer}`") from None
    # Where the dry-run's time went: waiting here means the services, not the trainer, were the slow part.
    log.info(f"dry-run: model loaded; inference and atropos ready after {time.monotonic() - started:.1f} s more")


def loop_checks(stack: StackConfig, engine: Engine, inference: InferenceClient, settings: LoopSettings,
                env: ServiceEnv) -> list[str]:
    """The dry-run's proof that the loop works where it runs, before any optimisation step, one line each: every
    prompt leaves room to answer (trainer/prompt_check.py; exit 2, a config mistake), memory measured
    (trainer/memory_check.py), a weight push reaching the served policy and back, and the log-prob convention
    (trainer/policy_checks.py). The engine holds the newest checkpoint first (read only), as the real start will. A
    failure is one LayerFailure naming the cause and the fix."""
    import time

    from hermes_stack.trainer import checkpoint as ckpt
    from hermes_stack.trainer import memory_check, policy_checks, prompt_check

    began = time.monotonic()
    try:
        prompts = prompt_check.check_prompts(stack, getattr(engine, "tokenizer", None), HELD_OUT_ROWS)
    except prompt_check.PromptRoomFailed as exc:
        raise LayerFailure("config", str(exc), exit_code=2) from None
    prompts += f"; {time.monotonic() - began:.1f} s"  # as the other checks' lines end (bench/stack_timing.py)
    resumed = False
    if hasattr(engine, "policy"):
        latest = ckpt.latest_checkpoint(settings.checkpoint_dir)
        if latest is not None:
            engine.load_state_dict(ckpt.load_checkpoint(latest)["engine"])
            resumed = True
    lines = [prompts]
    try:
        if hasattr(engine, "policy"):
            lines.append(memory_check.check_torch_engine(engine, stack, env.trainer_memory_cap_gib))
        elif getattr(engine, "critic", None) is not None:
            critic = engine.critic
            lines.append(memory_check.check_local_model(critic, stack, str(getattr(critic, "device", "cpu")),
                                                        env.trainer_memory_cap_gib))
        else:
            lines.append(f"memory: not measured for the {engine_kind(stack)} engine: it holds no local model")
    except memory_check.MemoryCheckFailed as exc:
        raise LayerFailure("memory", str(exc)) from None
    tolerance = env.logprob_tolerance
    if hasattr(engine, "sequence_logprobs"):
        checks = [lambda: policy_checks.check_weight_sync(engine, inference, stack, settings.data_dir / "dry-run",
                                                          resumed, tolerance),
                  lambda: policy_checks.check_logprobs(engine, inference, stack, tolerance)]
    else:
        why = f"the {engine_kind(stack)} engine's policy is not held locally, so nothing here can score it"
        lines.append(f"weight sync: not checked: {why}")
        critic = getattr(engine, "critic", None)
        if critic is None or getattr(engine, "step", 0) or ckpt.latest_checkpoint(settings.checkpoint_dir):
            fresh = "" if critic is None else " (a resumed run: its policy is no longer the base model)"
            return [*lines, f"log-probs: not checked: {why}{fresh}"]
        # A fresh Tinker run: its policy is still the base model, which the local critic holds and scores.
        from transformers import AutoTokenizer

        scorer = policy_checks.FreshTinkerPolicy(critic, AutoTokenizer.from_pretrained(critic.base.name_or_path))
        checks = [lambda: policy_checks.check_logprobs(scorer, inference, stack, tolerance)]
    try:
        lines += [check() for check in checks]
    except policy_checks.PolicyCheckFailed as exc:
        raise LayerFailure(exc.layer, str(exc)) from None
    except HermesError as exc:  # the inference service refused a push or a request
        raise LayerFailure("inference", "; ".join(exc.lines())) from exc
    return lines


def atropos_url(stack: StackConfig, env: ServiceEnv) -> str:
    return env.atropos_url or stack.settings.atropos.rollout_server_url


def data_dir(env: ServiceEnv) -> Path:
    from hermes_stack.config.rules import DATA_VOLUME

    return env.data_dir or Path(DATA_VOLUME)  # outside compose too: where the checkpoint rule expects it


def held_out_evaluator(stack: StackConfig, engine: Engine) -> Callable[[], dict[str, float]] | None:
    """Greedy accuracy on a held-out split, for the torch engine: it shows whether the policy learns the task, which
    the reward of its own samples alone does not. The offline task's 95 held-out sums (~0.1 s on CPU), or up to
    HELD_OUT_ROWS test rows of a JSONL dataset with the environment's prompt and reward (hermes_stack.tasks.heldout).
    gsm8k from the hub has no local split here (`python -m hermes_stack.environment evaluate` covers it). None for
    a user's environment (environments/): its task is its own, not [environment] dataset, and its evaluate() runs in
    the environment service (status showed the built-in task's accuracy, 0.000, beside a user's environment)."""
    from hermes_stack.environments_catalog import BUILTIN_NAMES

    env = stack.config.environment
    if not hasattr(engine, "policy") or env.dataset == "gsm8k" or env.name not in BUILTIN_NAMES:
        return None
    if env.dataset == "offline-arith":
        from hermes_stack.modelcore.embedded import evaluate

        return lambda: evaluate(engine.policy, engine.tokenizer, "test")
    from hermes_stack.tasks.heldout import HeldOut

    held_out = HeldOut.from_stack(stack, engine.tokenizer, rows=HELD_OUT_ROWS)
    return lambda: held_out.evaluate(engine)


HELD_OUT_ROWS = 16  # a real model on CPU: ~15 CPU-seconds of greedy decoding per evaluation


# ---------------------------------------------------------------- entry


def loop_settings(stack: StackConfig, args: argparse.Namespace, env: ServiceEnv) -> LoopSettings:
    from hermes_stack.run_identity import identity_of
    from hermes_stack.trainer.checkpoint import resolve_checkpoint_dir
    from hermes_stack.trainer.loop import LoopSettings
    settings, rollout = stack.settings, stack.config.rollout
    num_steps = settings.trainer.num_steps
    if args.max_steps is not None:
        if args.max_steps < 1:
            raise LayerFailure("config", f"--max-steps {args.max_steps}: expected >= 1", exit_code=2)
        num_steps = min(num_steps, args.max_steps)
    return LoopSettings(
        num_steps=num_steps,
        batch_size_sequences=rollout.sequences_per_step,
        # The trainer's limit: Atropos environments drop groups with a sequence at or above it.
        max_token_len=settings.tinker.max_token_trainer_length,
        checkpoint_dir=resolve_checkpoint_dir(settings.tinker.checkpoint_dir, data_dir(env)),
        save_interval=settings.tinker.save_checkpoint_interval,
        data_dir=data_dir(env),
        batch_timeout_s=args.batch_timeout,
        atropos_outage_s=env.atropos_outage_s,
        inference_wait_s=env.inference_wait_s,
        departure_s=env.env_departed_s,
        wandb_group=settings.wandb.group,
        wandb_project=settings.wandb.project,
        identity=identity_of(stack),
        max_staleness=settings.trainer.max_staleness,
    )


def run(args: argparse.Namespace, env: ServiceEnv,
        engine_factory: Callable[[StackConfig], Engine] | None = None) -> int:
    """Train (or dry-run) with the service environment `env`, read once by main; engine_factory: tests' engines."""
    from hermes_stack.hub import needs_hub, set_hub_access
    from hermes_stack.trainer.loop import StopFlag

    stop = StopFlag()
    stop.install()  # before the slow model load: a SIGTERM then still exits cleanly
    stack = load_config(args, env)
    # Before any Hugging Face import: online only for the gpu profile with a hub id (hermes_stack.hub).
    set_hub_access(needs_hub(stack.profile, stack.settings.inference.model_path))
    from hermes_stack.trainer.atropos_client import AtroposClient
    from hermes_stack.trainer.loop import run_training
    from hermes_stack.trainer.metrics import MetricsSink

    for line in (*stack.notices, *stack.warnings):
        log.info(f"config: {line}")
    if stack.overrides:
        log.info(f"config: profile {stack.profile} overrides " + ", ".join(f"{k}={v}" for k, v in stack.overrides.items()))
    settings = loop_settings(stack, args, env)
    engine = engine_factory(stack) if engine_factory is not None else build_engine(stack, env)
    inference = inference_client(stack, env)
    if args.dry_run:
        wait_until_serving(stack, args.wait, env)
        served = check_inference(stack, inference, env)
        status = check_atropos(atropos_url(stack, env))
        for line in loop_checks(stack, engine, inference, settings, env):
            # The dry-run's report, like the per-step lines: bare on stdout, where `up` and tests read it.
            print(f"dry-run check {line}", flush=True)
        log.info(f"trainer dry-run ok: config {stack.config_path.name} (profile {stack.profile}), model loaded, "
                 f"inference serves {served} and generated a token, atropos at step {status.get('current_step')}; "
                 f"{would_train(settings)}")
        return 0
    atropos = AtroposClient(atropos_url(stack, env))
    sink = MetricsSink(settings.data_dir / "metrics.jsonl", settings.num_steps, wandb_project=settings.wandb_project,
                       wandb_group=settings.wandb_group, wandb_enabled=stack.settings.wandb.enabled,
                       run_config={"algo": stack.algo, "profile": stack.profile})
    freeze_startup_heap("trainer")  # the engine (model, optimiser) and libraries stay for the run
    try:
        run_training(engine, atropos, inference, settings, sink, stop, held_out_evaluator(stack, engine))
    finally:
        sink.close()
        atropos.close()
        inference.close()
        close = getattr(engine, "close", None)  # the Tinker engine ends its session (the torch engine has none)
        if close is not None:
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - a failed close must not hide why training stopped
                log.error(f"closing the engine failed: {exc}")
    return 0


def would_train(settings) -> str:
    """What the run will train: from the newest checkpoint's step when the volume holds one (a resumed `make up`
    said "would train 400 steps" at step 146). Its name alone: the full check (hashes) is the loop's, at its start."""
    from hermes_stack.trainer.checkpoint import is_complete, list_checkpoints

    found = [c for c in list_checkpoints(settings.checkpoint_dir) if is_complete(c.path, verify_hashes=False)]
    per_step = f"of {settings.batch_size_sequences} sequences"
    if found and found[-1].step >= settings.num_steps:
        return f"nothing to train: checkpoint step {found[-1].step} >= num_steps {settings.num_steps}"
    if found and found[-1].step > 0:
        return (f"would resume after checkpoint step {found[-1].step} and train to step {settings.num_steps}, "
                f"steps {per_step}")
    return f"would train {settings.num_steps} steps {per_step}"


def main(argv: list[str] | None = None, engine_factory: Callable[[StackConfig], Engine] | None = None) -> int:
    from hermes_stack.secret_files import load_secrets
    from hermes_stack.service_env import ServiceEnv
    from hermes_stack.service_log import level_from, setup_logging

    # The services' one format; the final one-line failure below stays a bare stderr line: `up` quotes it.
    setup_logging(level_from(os.environ), quiet=("httpx",))

    load_secrets()  # /run/secrets -> environment: the inference key, TINKER_API_KEY, WANDB_API_KEY
    try:
        env = ServiceEnv.from_environ()  # the one read of the environment; every layer gets it from here
        args = parse_args(argv, env)
        return run(args, env, engine_factory)
    except LayerFailure as exc:
        print(" ".join(str(exc).split()), file=sys.stderr, flush=True)  # one line, even for multi-line causes
        return exc.exit_code
    except HermesError as exc:
        # Runtime failures after the checks (a batch never came, inference refused weights): one line too.
        layer, said = _layer_of(exc), "; ".join(exc.lines())
        said = said if said.startswith(f"{layer}:") else f"{layer}: {said}"  # not "inference: inference: ..."
        print(" ".join(f"trainer: {said}".split()), file=sys.stderr, flush=True)
        return exc.exit_code


def _layer_of(exc: HermesError) -> str:
    from hermes_stack.trainer.atropos_client import AtroposError, NoBatchError
    from hermes_stack.trainer.weights_sync import InferenceError

    if isinstance(exc, (AtroposError, NoBatchError)):
        return "atropos"
    if isinstance(exc, InferenceError):
        return "inference"
    if isinstance(exc, InputError):
        return "config"
    return "training" if isinstance(exc, StackError) else "error"


if __name__ == "__main__":
    code = main()
    if "--dry-run" in sys.argv[1:]:
        # The dry-run is on `up`'s critical path, and tearing down an interpreter with torch loaded takes ~1 s
        # (measured in the stack). Everything it says is printed and flushed; nothing else is left to clean up.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)

"""The training loop around an Engine: resume -> register -> [batch -> step -> weights -> metrics -> checkpoint]*.

Everything here is I/O orchestration; the math lives in the engine and algorithms.py. One trainer process runs one
loop. SIGTERM/SIGINT end it gracefully: a wait for a batch is abandoned, a running step is finished, its checkpoint
written (atomically) and the process exits 0; SIGKILL at any point is survived by checkpoint.py's atomic saves.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_stack.health import marker_path, remove_marker, write_marker
from hermes_stack.modelcore.weights_layout import export_step_weights, prune_weight_dirs, write_served_step
from hermes_stack.trainer import checkpoint as ckpt
from hermes_stack.trainer.atropos_client import AtroposClient, AtroposUnavailable, groups_from_batch
from hermes_stack.trainer.engine import Engine
from hermes_stack.trainer.metrics import MetricsSink, reward_stats, rollout_accuracy
from hermes_stack.trainer.staleness import split_by_staleness
from hermes_stack.trainer.weights_sync import InferenceClient, InferenceError, InferenceKeyRefused


@dataclass(frozen=True)
class LoopSettings:
    num_steps: int
    batch_size_sequences: int           # [rollout] batch_size x group_size: what Atropos counts
    max_token_len: int                  # tinker.max_token_trainer_length: registered; longer sequences are cut
    checkpoint_dir: Path
    save_interval: int
    data_dir: Path
    keep_checkpoints: int = 3
    keep_weights: int = 3
    batch_timeout_s: float = 600.0
    inference_wait_s: float = 120.0    # the least a (re)starting inference service is waited for; its model's start
                                       # time decides beyond that (InferenceClient.restart_bound_s)
    atropos_outage_s: float = 600.0    # how long a restarting Atropos is waited for before checkpoint-and-stop
    departure_s: float = 120.0         # an environment whose queued groups sit this long while no batch forms left
    wandb_group: str | None = None
    wandb_project: str | None = None
    eval_every: int = 10                # held-out evaluation (when the task has one): every N steps and the last
    max_staleness: int | None = 1       # settings trainer.max_staleness: policy updates a group may lag (staleness.py)
    # What the checkpoints are trained with (run_identity.identity_of); a checkpoint of another identity is refused.
    identity: dict[str, Any] | None = None


class StopFlag:
    """Set by SIGTERM/SIGINT; polled between and inside waits. Never interrupts a step or a save."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handler)

    def _handler(self, signum: int, _frame: Any) -> None:
        self.signal_name = signal.Signals(signum).name
        self._event.set()

    def set(self) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()


# ---------------------------------------------------------------- readiness marker


def ready_path(data_dir: Path, service: str = "trainer") -> Path:
    return marker_path(data_dir, service)


def own_env_ids(data_dir: Path) -> set[int]:
    """The stack's own environment's env_id, from its readiness marker (environment/env.py writes it)."""
    try:
        env_id = json.loads(ready_path(data_dir, "environment").read_text()).get("env_id")
    except (OSError, ValueError):
        return set()
    return {int(env_id)} if isinstance(env_id, int) else set()


# ---------------------------------------------------------------- the loop


def resume(engine: Engine, settings: LoopSettings, log: Any = print) -> int:
    """Load the newest complete checkpoint into the engine; return its step (0 when starting fresh)."""
    removed = ckpt.clean_incomplete(settings.checkpoint_dir)
    for path in removed:
        log(f"checkpoint: removed incomplete {path.name} (interrupted save)")
    latest = ckpt.latest_checkpoint(settings.checkpoint_dir)
    if latest is None:
        log(f"checkpoint: none in {settings.checkpoint_dir}; starting at step 0")
        return 0
    if settings.identity is not None:
        from hermes_stack.errors import InputError
        from hermes_stack.run_identity import decide, refusal

        decision = decide(ckpt.read_meta(latest).get("identity"), settings.identity)
        if not decision.resume:  # one line, not the engine's ValueError in a crash loop
            algo = settings.identity.get("algo", "grpo")
            raise InputError(refusal(f"hermes-{algo}", algo, decision, where=str(latest.path)))
        if decision.notice():
            log(f"checkpoint: {decision.notice()}")
    state = ckpt.load_checkpoint(latest)
    engine.load_state_dict(state["engine"])
    log(f"checkpoint: resumed from {latest.path} (step {latest.step})")
    return latest.step


def wait_for_inference(inference: InferenceClient, timeout_s: float, stop: StopFlag, poll_s: float = 1.0) -> None:
    """Until the inference service is READY (not merely answering: /health answers 200 while SGLang loads)."""
    deadline = time.monotonic() + timeout_s
    while not inference.ready():
        if stop or time.monotonic() > deadline:
            raise InferenceError(f"inference: {inference.root}/health did not report ready within {timeout_s:.0f} s. "
                                 "Hint: `docker compose logs inference`")
        time.sleep(poll_s)


def push_weights_riding_out(inference: InferenceClient, weights: Path, step: int, settings: LoopSettings,
                            stop: StopFlag, log: Any, retry_s: float = 1.0) -> None:
    """Push the step's weights; an inference service that is restarting (it loads the newest weights from the data
    volume when it starts) is waited for until READY and the push repeated until it takes. Bounded by the model's
    own start time as the front last reported it (InferenceClient.restart_bound_s; an 8B SGLang with CUDA-graph
    capture takes minutes), never less than inference_wait_s. Repeated, not tried once more: a second failure used
    to end training after the step was trained but before its metrics line was written."""
    try:
        inference.push_weights(weights, step)
        return
    except InferenceKeyRefused:
        raise
    except InferenceError as exc:
        bound_s = inference.restart_bound_s(settings.inference_wait_s)
        log(f"inference unreachable ({exc}); waiting up to {bound_s:.0f} s for it to come back")
    started = time.monotonic()
    deadline = started + bound_s
    while True:
        wait_for_inference(inference, max(0.0, deadline - time.monotonic()), stop, poll_s=retry_s)
        try:
            inference.push_weights(weights, step)
            break
        except InferenceKeyRefused:
            raise
        except InferenceError:
            if stop or time.monotonic() + retry_s > deadline:
                raise
            time.sleep(retry_s)
    log(f"inference back after {time.monotonic() - started:.1f} s; step {step}'s weights pushed")


def _batch_tokens(groups: list[list[Any]]) -> tuple[int, int]:
    total = sum(len(s.tokens) for g in groups for s in g)
    trained = sum(1 for g in groups for s in g for m in s.mask if m != -100)
    return total, trained


def save(engine: Engine, settings: LoopSettings, step: int) -> Path:
    path = ckpt.save_checkpoint(settings.checkpoint_dir, step, {"engine": engine.state_dict()},
                                keep=settings.keep_checkpoints, meta={"num_steps": settings.num_steps, "identity": settings.identity})
    return path


def _event(sink: MetricsSink, kind: str, message: str, fields: dict[str, Any]) -> None:
    """An event in metrics.jsonl, for a sink that records them. `saved`: a stop's save outside the interval, so
    `status` names the newest checkpoint (it named step-225 after a stop had saved step-242). `stopped`: a stop
    before the last step; the trainer then exits 0 as a finished run does ("exited 0 (completed)" at step 26).
    `completed`: a start that found the run already at num_steps (no step line follows)."""
    event = getattr(sink, "event", None)
    if event is not None:
        event(kind, message, fields)


def _save_on_stop(engine: Engine, settings: LoopSettings, sink: MetricsSink, step: int,
                  log: Callable[[str], None]) -> Path:
    """A stop or a failure between save intervals is a checkpoint too, and its `saved` event names it. An event that
    cannot be written (the disk the sink writes to is full) is logged: the checkpoint stands, and on the failure
    path the original error is the one raised."""
    saved = save(engine, settings, step)
    try:
        _event(sink, "saved", f"step {step} saved on stop as {saved.name}", {"checkpoint": saved.name,
                                                                              "at_step": step})
    except Exception as exc:  # noqa: BLE001 - any of the sink's failures
        log(f"the `saved` event of {saved.name} could not be written ({type(exc).__name__}: {exc})")
    return saved


def run_training(engine: Engine, atropos: AtroposClient, inference: InferenceClient | None,
                 settings: LoopSettings, sink: MetricsSink, stop: StopFlag | None = None,
                 evaluate: Callable[[], dict[str, float]] | None = None) -> int:
    """Train until `num_steps` (or a stop signal). Returns the last completed step.

    `evaluate` (when the task has a held-out split): its figures go into the metrics as `eval_<name>` every
    `eval_every` steps and at the last step, and once as a line when the first batch has arrived (before it is
    trained on), the baseline."""
    stop = StopFlag() if stop is None else stop
    log = sink.info
    step = resume(engine, settings, log)
    if step >= settings.num_steps:
        log(f"training already complete: checkpoint step {step} >= num_steps {settings.num_steps}")
        # On record: a run stopped at step N and started again with num_steps <= N ends here without a step line,
        # and `status` would otherwise go on reading the stop's event ("stopped after step N").
        _event(sink, "completed", f"training already complete at step {step}", {"at_step": step})
        return step
    atropos.on_reregister = log
    atropos.trainer_step = step
    atropos.outage_s = settings.atropos_outage_s
    atropos.departure_s = settings.departure_s
    atropos.own_env_ids = lambda: own_env_ids(settings.data_dir)
    atropos.on_event = getattr(sink, "event", atropos.on_event)
    registration = {"batch_size_sequences": settings.batch_size_sequences, "max_token_len": settings.max_token_len,
                    "checkpoint_dir": str(settings.checkpoint_dir), "save_checkpoint_interval": settings.save_interval,
                    "starting_step": step, "num_steps": settings.num_steps, "wandb_group": settings.wandb_group,
                    "wandb_project": settings.wandb_project}
    try:
        atropos.register(**registration)
    except AtroposUnavailable as exc:  # started while Atropos restarts: the same bounded wait as mid-run
        if not atropos.ride_out(exc, lambda: bool(stop)):
            return step
        atropos.register(**registration)
    info = atropos.info()
    if int(info.get("batch_size", -1)) == -1:
        # A group reached a fresh run-api before this /register, so it did not initialise the run: clear, register.
        atropos.clear_queue_and_reregister()
        info = atropos.info()
    if int(info.get("batch_size", -1)) != settings.batch_size_sequences:
        log(f"warning: atropos keeps batch_size {info.get('batch_size')} from an earlier registration; this trainer "
            f"wants {settings.batch_size_sequences}. Restart the atropos service to change it")
        atropos.batch_size = int(info.get("batch_size", settings.batch_size_sequences))
    if inference is not None:
        inference.ready()  # learns the backend's start limit even while it still loads: the bound below
        wait_for_inference(inference, inference.restart_bound_s(settings.inference_wait_s), stop)
    write_marker(settings.data_dir, "trainer", time=time.time(), step=step, num_steps=settings.num_steps)
    log(f"trainer ready: registered with atropos (batch {settings.batch_size_sequences} sequences), "
        f"steps {step + 1}..{settings.num_steps}")
    log(f"waiting for step {step + 1}'s batch: the environment can register with atropos from now on")
    # The baseline waits for the first batch: Atropos lets an environment register only once the trainer has asked
    # for a batch, and a real model's evaluation on CPU takes minutes (the environment's start period is shorter).
    baseline = evaluate
    unsaved = False
    unlogged: dict[str, Any] | None = None  # a trained step's metrics not yet on record (its push may still fail)
    replicas_down: set[str] = set()  # the replicas the last push skipped
    try:
        while step < settings.num_steps and not stop:
            t0 = time.monotonic()
            batch = atropos.get_batch(timeout_s=settings.batch_timeout_s, should_stop=lambda: bool(stop), log=log,
                                      inference_ok=inference.health if inference is not None else None)
            if batch is None:  # stop requested while waiting: abandon, nothing half done
                break
            wait_s = time.monotonic() - t0
            # Without an inference service to push to, the served policy never moves: no bound to apply.
            fresh = split_by_staleness(batch, step, settings.max_staleness if inference is not None else None)
            if not fresh.kept:  # every group too stale: wait for fresher ones, the step is not taken
                log(f"step {step + 1}: all {len(fresh.dropped)} group(s) of the batch lag the policy by more than "
                    f"{settings.max_staleness} update(s); waiting for fresher rollouts")
                continue
            batch = fresh.kept
            if baseline is not None:
                log(f"held-out before step {step + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in baseline().items()))
                baseline = None
            groups = groups_from_batch(batch, settings.max_token_len)
            truncated = sum(1 for item in batch for t in item["tokens"] if len(t) > settings.max_token_len)
            t1 = time.monotonic()
            metrics: dict[str, Any] = dict(engine.train_step(groups))
            step_s = time.monotonic() - t1
            step += 1
            atropos.trainer_step = step
            unsaved = True
            unlogged = metrics
            total_tokens, trained_tokens = _batch_tokens(groups)
            metrics.update(reward_stats([[s.score for s in g] for g in groups]))
            if (accuracy := rollout_accuracy(batch)) is not None:
                metrics["rollout_accuracy"] = accuracy
            metrics.update(fresh.metrics())
            metrics.update({"wait_s": wait_s, "step_s": step_s, "truncated_sequences": float(truncated),
                            "tokens": float(total_tokens),
                            "trained_tokens": float(trained_tokens),
                            # what padding widens every row of a micro-batch to (docs: the memory model)
                            "widest_sequence": float(max((len(s.tokens) for g in groups for s in g), default=0)),
                            "tokens_per_s": total_tokens / step_s if step_s > 0 else float("nan")})
            if inference is not None:
                t2 = time.monotonic()
                weights = export_step_weights(engine, settings.data_dir / "weights", step)
                push_weights_riding_out(inference, weights, step, settings, stop, log)
                sync = getattr(inference, "last_sync", {})
                skipped = [root for root, state in sync.items() if state != "loaded"]
                # One replica down slows rollouts; training goes on on the others. Said when the set changes, not
                # every step (a line a step doubled the trainer's log while a replica was down).
                if skipped and set(skipped) != replicas_down:
                    log(f"step {step}: weights loaded by {len(sync) - len(skipped)} of {len(sync)} replicas; "
                        f"{', '.join(skipped)} did not answer and loads step-{step} or newer itself when it returns")
                elif replicas_down and not skipped:
                    log(f"step {step}: weights loaded by all {len(sync)} replicas again")
                replicas_down = set(skipped)
                write_served_step(settings.data_dir / "weights", step)  # the environment tags rollouts with it
                prune_weight_dirs(settings.data_dir / "weights", settings.keep_weights)
                metrics["sync_s"] = time.monotonic() - t2
            if evaluate is not None and (step % settings.eval_every == 0 or step == settings.num_steps):
                t3 = time.monotonic()
                metrics.update({f"eval_{name}": value for name, value in evaluate().items()})
                metrics["eval_s"] = time.monotonic() - t3  # the per-step breakdown (bench/stack_throughput.py)
            saved = None
            if step % settings.save_interval == 0 or step == settings.num_steps:
                saved = save(engine, settings, step)
                unsaved = False
            sink.log(step, metrics, checkpoint=saved.name if saved else None)
            unlogged = None
        if stop and unsaved:
            saved = _save_on_stop(engine, settings, sink, step, log)
            log(f"stopped by {stop.signal_name or 'request'} after step {step}; saved {saved.name}")
        elif stop:
            log(f"stopped by {stop.signal_name or 'request'} after step {step}")
        else:
            log(f"training finished: {step}/{settings.num_steps} steps")
        if stop and step < settings.num_steps:
            _event(sink, "stopped", f"stopped by {stop.signal_name or 'request'} after step {step}",
                   {"at_step": step})
    except Exception as exc:
        # A failure that ends training (Atropos gone past its bound, inference gone, a bad batch) is a checkpoint
        # too: the restarted trainer resumes at the last completed step, not at the last interval.
        if unlogged is not None:
            # The step was trained (and is saved below), so the resumed run starts after it: its record must be
            # written now or the metrics skip it (status said "step 116" beside checkpoint step-117).
            try:
                sink.log(step, unlogged)
            except Exception as log_exc:  # noqa: BLE001 - the original failure is the one to raise
                log(f"step {step}'s metrics could not be written ({type(log_exc).__name__}: {log_exc})")
        if unsaved:
            saved = _save_on_stop(engine, settings, sink, step, log)
            log(f"stopping after step {step} ({type(exc).__name__}); saved {saved.name} first")
        raise
    finally:
        remove_marker(ready_path(settings.data_dir))
    return step

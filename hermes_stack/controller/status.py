"""What `hermes-stack status` shows, and why `up` failed: pure functions over `compose ps` rows and metrics.jsonl.

I/O stays with the caller (commands/stack.py) except `read_metrics` and `explain_up_failure`, which ask compose for
the facts they need.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_stack.controller.compose_env import SECRETS_LABEL
from hermes_stack.errors import StackError

if TYPE_CHECKING:
    from hermes_stack.controller.compose import CommandFailed, Compose

SPARK = "▁▂▃▄▅▆▇█"
WORKING_DIR_LABEL = "com.docker.compose.project.working_dir"  # compose's own: the folder a container was made from


@dataclass(frozen=True)
class ServiceState:
    service: str
    container: str
    state: str  # running | exited | created | restarting ...
    health: str  # healthy | unhealthy | starting | "" (no healthcheck)
    exit_code: int
    publishers: list[dict] = field(default_factory=list, compare=False)
    labels: str = field(default="", compare=False)  # compose ps' "k=v,k=v"

    def label(self, name: str) -> str:
        """One of the container's labels; "" when it has none of that name."""
        prefix = name + "="
        return next((item[len(prefix):] for item in self.labels.split(",") if item.startswith(prefix)), "")

    @property
    def secrets_digest(self) -> str:
        """The container's secrets' digest label (compose.base.yml, x-service); "" when it has none."""
        return self.label(SECRETS_LABEL)

    def of_checkout(self, root: Path) -> bool:
        """Whether compose made this container from the checkout at `root` (its working-directory label): two
        checkouts share the project name hermes-<algo>. One without the label is not judged."""
        made_in = self.label(WORKING_DIR_LABEL)
        return not made_in or Path(made_in).resolve() == root.resolve()

    def holds_other_secrets(self, digest: str) -> bool:
        """Whether this container holds other secrets than `digest` (compose_env.secrets_digest) says `up` would hand
        it now: the key file was edited, or .hermes/ deleted, since it was created. One from before the label is not
        judged."""
        return bool(self.secrets_digest) and self.secrets_digest != digest

    @property
    def ok(self) -> bool:
        if self.state == "exited":
            return self.exit_code == 0  # a one-shot that completed
        return self.state == "running" and self.health in ("healthy", "")

    def describe(self) -> str:
        if self.state == "exited":
            return f"exited {self.exit_code}" + (" (completed)" if self.exit_code == 0 else "")
        return self.state + (f" ({self.health})" if self.health else "")


def service_states(rows: list[dict]) -> list[ServiceState]:
    return sorted(
        (ServiceState(service=r.get("Service", "?"), container=r.get("Name", ""), state=r.get("State", ""),
                      health=r.get("Health", "") or "", exit_code=int(r.get("ExitCode") or 0),
                      publishers=list(r.get("Publishers") or []), labels=str(r.get("Labels") or ""))
         for r in rows),
        key=lambda s: s.service,
    )


def _objects(text: str) -> Iterator[dict]:
    """metrics.jsonl's JSON objects in file order, skipping a torn last line (the trainer may be mid-write)."""
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def parse_metrics(text: str) -> list[dict]:
    """metrics.jsonl's step records."""
    # A step that is no whole number (null, "3", 2.5: not a line the trainer writes) would break every reader, and so
    # would one no float can hold (the plots' axes are floats).
    return [r for r in _objects(text) if type(r.get("step")) is int and 0 <= r["step"] < 2**53]


def parse_events(text: str) -> list[dict]:
    """The trainer's event records in metrics.jsonl (an environment departed, Atropos restarted)."""
    return [r for r in _objects(text) if "event" in r and "step" not in r]


# Events that say where the run stands (a stop, its save, a start that found the run complete): news only until a
# step follows them. Incidents (an environment departed, Atropos restarted) stay news among the last few events.
STATE_EVENTS = frozenset({"stopped", "saved", "completed"})


def current_events(text: str) -> list[dict]:
    """parse_events without the state events a later step record has overtaken: status showed `training already
    complete at step 500` as its newest event while the extended run trained at step 852."""
    events: list[dict] = []
    for record in _objects(text):
        if "step" in record:
            events = [e for e in events if e.get("event") not in STATE_EVENTS]
        elif "event" in record:
            events.append(record)
    return events


def found_complete(text: str) -> bool:
    """The newest start of the trainer found the run complete: its `completed` event, with no step after it."""
    events = current_events(text)
    return bool(events) and events[-1].get("event") == "completed"


def stopped_at(text: str) -> int | None:
    """The step a stop ended the run at, when the newest record of metrics.jsonl is that stop's event (the trainer
    then exits 0 as a finished run does); None when a step came after it (resumed), a later start found the run
    complete (its `completed` event), or the run was not stopped."""
    at = None
    for record in _objects(text):
        if "step" in record or record.get("event") == "completed":
            at = None
        elif record.get("event") == "stopped":
            at = record.get("at_step")
    return at if isinstance(at, int) else None


def state_line(s: ServiceState, stopped_step: int | None) -> str:
    """A service's status line; a trainer that exited 0 on a stop is stopped, not completed."""
    if s.service == "trainer" and s.state == "exited" and s.exit_code == 0 and stopped_step is not None:
        return f"!! {s.service:<14} exited 0 (stopped after step {stopped_step}, a checkpoint; not completed)"
    return f"{'ok ' if s.ok else '!! '}{s.service:<14} {s.describe()}"


def event_lines(events: list[dict], last: int = 3) -> list[str]:
    """The last few events, newest last, one line each with its UTC time."""
    import time as _time

    lines = []
    for e in events[-last:]:
        when = _time.strftime("%H:%M:%S", _time.gmtime(float(e.get("time") or 0)))
        lines.append(f"event {when} UTC: {e.get('message') or e.get('event')}")
    return lines


def sparkline(values: list[float], width: int = 24) -> str:
    """A small text trend of the last `width` finite values; flat input gives a flat line."""
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)][-width:]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    if hi - lo < 1e-12:
        return SPARK[len(SPARK) // 2 - 1] * len(vals)
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / (hi - lo) * len(SPARK)))] for v in vals)


@dataclass(frozen=True)
class TrainingSummary:
    step: int | None
    reward_mean: float | None
    trend: str
    last_checkpoint: str | None
    records: int
    held_out: tuple[int, float] | None = None  # (step, accuracy) of the latest held-out evaluation
    held_out_trend: str = ""
    held_out_count: int = 0

    def lines(self) -> list[str]:
        if self.step is None:
            return ["training: no step recorded yet (metrics.jsonl empty or absent)"]
        reward = "n/a" if self.reward_mean is None else f"{self.reward_mean:.3f}"
        lines = [f"training step: {self.step}",
                 f"reward mean:   {reward}   trend {self.trend} (last {min(self.records, 24)} steps)"]
        if self.held_out is not None:
            step, accuracy = self.held_out
            lines.append(f"held-out acc:  {accuracy:.3f} at step {step}   trend {self.held_out_trend} "
                         f"(last {min(self.held_out_count, 24)} evaluations)")
        return [*lines, f"checkpoint:    {self.last_checkpoint or 'none yet'}"]


def checkpoint_entries(records: list[dict], events: list[dict] = ()) -> list[tuple[float, int, str]]:
    """(time, step, name) of every checkpoint metrics.jsonl names: an interval's (a step record's) and a stop's (the
    trainer's `saved` event). Both are resume points; `report` marks them, newest_checkpoint picks one."""

    def when(r: dict) -> float:
        t = r.get("time")
        return float(t) if isinstance(t, (int, float)) and math.isfinite(t) else 0.0

    entries = [(when(r), r["step"], r["checkpoint"]) for r in records
               if isinstance(r.get("checkpoint"), str) and r["checkpoint"] and isinstance(r.get("step"), int)]
    entries += [(when(e), e["at_step"], e["checkpoint"]) for e in events if e.get("event") == "saved"
                and isinstance(e.get("at_step"), int) and isinstance(e.get("checkpoint"), str) and e["checkpoint"]]
    return entries


def newest_checkpoint(records: list[dict], events: list[dict] = ()) -> str | None:
    """The checkpoint written last, by the records' time, then by step. The one rule for `status`, rl_check_status,
    `report` and rl_get_results (status read the file's order and report the highest step, which part after a
    resume that passed over an unusable save); a stop's save after the last interval's was missed (rl_get_results
    said none beside step-16)."""
    entries = checkpoint_entries(records, events)
    return max(entries, key=lambda entry: entry[:2])[2] if entries else None


def last_checkpoint(text: str) -> str | None:
    """newest_checkpoint of a whole metrics.jsonl, a stop's save included."""
    return newest_checkpoint(parse_metrics(text), parse_events(text))


def summary_of(text: str) -> TrainingSummary:
    """metrics.jsonl's summary with its newest checkpoint, a stop's save included (`status`, rl_check_status)."""
    newest = last_checkpoint(text)
    return summarize(parse_metrics(text), [newest] if newest else [])


def summarize(records: list[dict], checkpoints: list[str] = ()) -> TrainingSummary:
    """`checkpoints`: the newest first-hand (last_checkpoint of the whole file, stop saves included), which wins
    over the step records' own."""
    if not records:
        return TrainingSummary(None, None, "", checkpoints[-1] if checkpoints else None, 0)
    last = records[-1]
    rewards = [r.get("reward_mean") for r in records]
    ckpts = [r["checkpoint"] for r in records if r.get("checkpoint")]
    last_ckpt = checkpoints[-1] if checkpoints else (ckpts[-1] if ckpts else None)
    reward = last.get("reward_mean")
    reward = float(reward) if isinstance(reward, (int, float)) and math.isfinite(reward) else None
    evals = [(int(r["step"]), float(r["eval_accuracy"])) for r in records
             if isinstance(r.get("eval_accuracy"), (int, float)) and math.isfinite(r["eval_accuracy"])]
    return TrainingSummary(int(last["step"]), reward, sparkline(rewards), last_ckpt, len(records),
                           held_out=evals[-1] if evals else None, held_out_trend=sparkline([a for _, a in evals]),
                           held_out_count=len(evals))


def is_replica(service: str) -> bool:
    """`inference` and the generated `inference-<i>` (hermes_stack/controller/replicas.py)."""
    return service == "inference" or (service.startswith("inference-") and service[10:].isdigit())


def replica_line(service: str, counters: dict | None) -> str:
    """One replica's weights version and what it served (pure); None counters: it did not answer."""
    if counters is None:
        return f"  replica {service:<12} weights unknown (not answering)"
    version = counters.get("weights_version", "?")
    under = (counters.get("served_by_version") or {}).get(version, 0)
    # Only the trainer's pushes are named step-<N>; before the first, the name is the model's ("base") or the folder
    # the dry-run pushed ("policy"), which read as a run's state.
    shown = f"{version} (no training step pushed yet)" if version in ("base", "policy") else version
    return (f"  replica {service:<12} weights {shown}, {counters.get('requests_served', 0)} requests served "
            f"({under} on these weights)")


def replica_lines(compose: Compose, states: list[ServiceState]) -> list[str]:
    """Behind the router (REPLICAS=N): each replica with its weights version, asked inside its container."""
    from hermes_stack.controller.compose import CommandFailed

    if not any(s.service == "router" for s in states):
        return []
    lines = []
    for s in states:
        if not is_replica(s.service):
            continue
        try:
            counters = json.loads(compose.exec(s.service, ["python", "-m", "hermes_stack.health", "weights"]))
        except (CommandFailed, ValueError):
            counters = None
        lines.append(replica_line(s.service, counters if isinstance(counters, dict) else None))
    return lines


def read_metrics(compose: Compose, lines: int | None = 500) -> str:
    """metrics.jsonl from the data volume (its last `lines` lines; None: all of it, for a report): exec in the
    trainer, else `compose cp` (works on a stopped one)."""
    import tempfile
    from pathlib import Path

    from hermes_stack.controller.compose import CommandFailed, cp_argv

    try:
        command = ["cat"] if lines is None else ["tail", "-n", str(lines)]
        return compose.exec("trainer", [*command, "/data/metrics.jsonl"])
    except CommandFailed:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "metrics.jsonl"
        try:
            compose.run(cp_argv(compose.params, "trainer:/data/metrics.jsonl", str(target)))
        except CommandFailed:
            return _metrics_from_volume(compose, lines)
        return target.read_text() if target.is_file() else ""


def _metrics_from_volume(compose: Compose, lines: int | None) -> str:
    """metrics.jsonl read off the project's data volume, read-only, by a throwaway container of the stack's own
    Atropos image, no network: after `down` (volumes kept) no trainer container is left to exec in or copy from, and
    the run is still there. "" when the volume or the image is gone."""
    from hermes_stack.controller.compose import CommandFailed, volume_read_argv

    if not compose.has_data_volume():
        return ""
    command = ["cat"] if lines is None else ["tail", "-n", str(lines)]
    try:
        return compose.run(volume_read_argv(compose.params, [*command, "/data/metrics.jsonl"]))
    except CommandFailed:
        return ""


# The trainer's line when its checkpoint already reached num_steps (trainer/loop.py run_training): it exits 0, and
# `up --wait` of the environment behind it fails with compose's "dependency failed to start".
COMPLETE = re.compile(r"training already complete: checkpoint step (\d+) >= num_steps (\d+)")


def finished_run(compose: Compose) -> tuple[int, int] | None:
    """(checkpoint step, num_steps) when the trainer exited 0 because its run was already complete; else None."""
    from hermes_stack.controller.compose import CommandFailed, logs_argv

    trainer = _trainer(compose)
    if trainer is None or trainer.state != "exited" or trainer.exit_code != 0:
        return None
    try:
        found = COMPLETE.findall(compose.run(logs_argv(compose.params, "trainer", tail=50)))
    except CommandFailed:
        return None
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def _trainer(compose: Compose) -> ServiceState | None:
    """The trainer container's state; None when there is none (or compose cannot say)."""
    from hermes_stack.controller.compose import CommandFailed

    try:
        return next((s for s in service_states(compose.ps()) if s.service == "trainer"), None)
    except CommandFailed:
        return None


def training_now(compose: Compose) -> tuple[int, ServiceState] | None:
    """The step of a run whose trainer container is running (or restarting) now, and that container; None when none
    is. A second `up` must not touch such a run: its dry-run pushes probe weights into the inference server the run
    samples from."""
    trainer = _trainer(compose)
    if trainer is None or trainer.state not in ("running", "restarting"):
        return None
    records = parse_metrics(read_metrics(compose, lines=5))
    return (records[-1]["step"] if records else 0), trainer


# SIGKILL and SIGTERM: `docker kill` / `docker stop` / `docker compose stop` (a manual stop, which compose does not
# restart), not a crash (compose restarts those: restart on-failure).
STOPPED_BY_HAND = (137, 143)


def up_again(states: list[ServiceState], algo: str, project: str | None = None) -> str:
    """The `make up` that starts this stack again: its replica count again (inference, inference-2, ...) and its
    project when not the default, or the `make up` would not match the run."""
    from hermes_stack.controller.replicas import up_command

    return up_command(algo, sum(1 for s in states if is_replica(s.service)), project)


def stopped_line(states: list[ServiceState], algo: str, project: str | None = None,
                 complete: bool = False) -> str | None:
    """What `status` adds when services were stopped by hand: how to start them again (the stop was a checkpoint).
    `complete`: the newest start found the run complete (`up` then leaves the environment created, never started,
    and its `make up` would only say so again)."""
    stopped = [s.service for s in states if s.state == "exited" and s.exit_code in STOPPED_BY_HAND]
    running = any(s.state == "running" for s in states)
    up = up_again(states, algo, project)
    if not stopped:
        # Created, never started: a typed `docker compose up` or `create` that stopped at the secrets only `up`
        # hands compose. Status listed `!! atropos created` for each with no word on what to do.
        created = [s.service for s in states if s.state == "created"]
        if not created or complete:
            return None
        what, it = (f"{created[0]} was", "it") if len(created) == 1 else (f"{', '.join(created)} were", "them")
        return (f"{what} created but never started (a typed docker compose lacks the secrets): {up} starts {it}"
                + (", and training resumes from its last checkpoint" if "trainer" in created else ""))
    if running and "trainer" not in stopped:  # the run goes on (or waits for them): nothing resumes
        what, it = (f"{stopped[0]} was", "it") if len(stopped) == 1 else (f"{', '.join(stopped)} were", "them")
        # Behind the router a stopped replica is routed around: the run samples from the others meanwhile.
        routed_around = all(is_replica(name) for name in stopped) and any(
            is_replica(s.service) and s.state == "running" for s in states)
        meanwhile = "which samples from the other replicas meanwhile" if routed_around else f"which waits for {it}"
        return (f"{what} stopped by hand (docker kill or stop; compose restarts only crashes): {up} "
                f"starts {it} again beside the training run, {meanwhile}")
    what = ("the trainer was" if stopped == ["trainer"] else f"{', '.join(stopped)} were") if running \
        else "the stack was"
    return (f"{what} stopped by hand (docker kill or stop; compose restarts only crashes): {up} "
            "starts it again, and training resumes from its last checkpoint")


def to_start_beside_a_run(states: list[ServiceState]) -> list[str]:
    """The services `up` starts again beside a training run: stopped (by hand, or never started) and not the
    trainer, which `up` never touches while it trains. A one-shot that completed (gateway-check) stays as it is."""
    return [s.service for s in states
            if s.service != "trainer" and s.state in ("exited", "created") and not s.ok]


def failing(states: list[ServiceState]) -> list[ServiceState]:
    return [s for s in states if not s.ok]


def health_reason(inspect_json: str) -> str:
    """The last output of a container's healthcheck, from `docker inspect --format '{{json .State.Health}}'`."""
    try:
        health = json.loads(inspect_json)
    except ValueError:
        return ""
    log = (health or {}).get("Log") or []
    return " ".join(log[-1].get("Output", "").split()) if log else ""


def explain_up_failure(compose: Compose, exc: CommandFailed) -> StackError:
    """Turn a failed `up --wait` into lines that name each service that is not ready, and why."""
    from hermes_stack.controller.compose import CommandFailed

    try:
        bad = failing(service_states(compose.ps()))
    except CommandFailed:
        bad = []
    if not bad or all(s.state == "created" for s in bad):
        # Nothing started (the engine refused to create or start a container): compose's own error is the cause.
        return exc
    lines = []
    for s in bad:
        reason = ""
        if s.health == "unhealthy" or s.health == "starting":
            try:
                reason = health_reason(compose.docker(["inspect", "--format", "{{json .State.Health}}", s.container]))
            except CommandFailed:
                reason = ""
        what = "unhealthy" if s.health == "unhealthy" else s.describe()
        if not reason and (s.state in ("restarting", "exited") or s.health == "starting"):
            # A crash loop has no health output yet: its own last error says why (it said only "restarting").
            reason = last_error(_log_tail(compose, s.service))
            if reason:
                reason = f"its last error: {reason} (docker compose logs {s.service})"
        lines.append(f"service {s.service} is {what}" + (f": {reason}" if reason else ""))
    return UpFailed(lines, exc)


def _log_tail(compose: Compose, service: str, lines: int = 80) -> list[str]:
    """The service's last log lines (stdout and stderr); [] when compose cannot give them."""
    from hermes_stack.controller.compose import CommandFailed, CommandTimedOut, logs_argv

    try:
        return list(compose.stream(logs_argv(compose.params, service, tail=lines)))
    except (CommandFailed, CommandTimedOut, OSError):  # the failure itself is the message; its log is extra
        return []


def recent_errors(compose: Compose, states: list[ServiceState]) -> dict[str, str]:
    """The last error in the recent log of each service worth reading: the environment (it runs the user's code,
    and a rollout that fails leaves it healthy while nothing trains), and any service crash-looping or exited with
    an error. One compose call each, for those services only; services whose log holds none are left out."""
    found = {}
    for s in states:
        crashed = s.state == "restarting" or (s.state == "exited" and s.exit_code != 0)
        if not (crashed or (s.service == "environment" and s.state == "running")):
            continue
        if error := last_error(_log_tail(compose, s.service, lines=200), since_progress=not crashed):
            found[s.service] = error
    return found


def error_lines(compose: Compose, states: list[ServiceState], algo: str, project: str) -> list[str]:
    """`make status`'s line for each of recent_errors, with the command that shows the whole log."""
    from hermes_stack.run_identity import make_for

    return [f"  {service}: its last error: {error} ({make_for(project, algo, 'logs')} SERVICE={service})"
            for service, error in recent_errors(compose, states).items()]


# A Python exception's own line ("NotImplementedError: Setup method must ...", "ValueError: ..."), or a service's
# "error: ..." line; compose prefixes each line with "<container> | ".
_ERROR_LINE = re.compile(r"(?:^|\|\s)((?:[A-Za-z_][\w.]*(?:Error|Exception|Exit)|error)\b(?::?\s.*)?)$")
# A line of the services' own format (service_log.FORMAT: "<date> <time> ERROR <logger>: <message>"), such as the
# environment's "environments/mine.py: importing it failed: FileNotFoundError: ..."; the message is the error.
_LOGGED_ERROR = re.compile(r"\d\d:\d\d:\d\d[,.]\d+ (?:ERROR|CRITICAL) [\w.]+: (.+)$")


# Lines after which an earlier error no longer describes a running service: the environment registered (again), sent
# a batch (env.py's batch line), or returned a group after failing (stack_behaviour). The log tail spans the
# container's earlier runs and errors since overcome (inference restarting under a rollout), which status quoted
# for minutes while training was healthy.
_PROGRESS = re.compile(r" INFO [\w.]+: (?:registered with Atropos |batch \d+: \d+ groups sent|"
                       r"collect_trajectories returned a group again )")
# A stop, not a failure: SystemExit of a clean exit, Ctrl-C or SIGTERM (128 + 2, 128 + 15).
_CLEAN_EXIT = re.compile(r"SystemExit(?:: (?:0|130|143))?$")


def last_error(log_lines: list[str], width: int = 240, since_progress: bool = False) -> str:
    """The last line of `log_lines` that reads as an error (see _ERROR_LINE), redacted and cut to `width`; with
    `since_progress`, only after the last line of progress (_PROGRESS), for a service that is running now."""
    from hermes_stack.redaction import redact_known_secrets

    for line in reversed(log_lines):
        if since_progress and _PROGRESS.search(line):
            return ""
        if _CLEAN_EXIT.search(line.rstrip()):
            continue
        if match := _ERROR_LINE.search(line.rstrip()) or _LOGGED_ERROR.search(line.rstrip()):
            text = redact_known_secrets(" ".join(match.group(1).split()))
            return text if len(text) <= width else text[: width - 1] + "…"
    return ""


class UpFailed(StackError):
    def __init__(self, lines: list[str], cause: Exception):
        self._lines = lines
        self.cause = cause
        super().__init__("; ".join(lines))

    def lines(self) -> list[str]:
        return list(self._lines)

    def followed_by(self, line: str) -> UpFailed:
        """The same failure with one more line (what to do next)."""
        return UpFailed([*self._lines, line], self.cause)

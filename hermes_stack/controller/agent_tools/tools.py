"""The ten rl_* tools, as plain functions over the controller's own code. Each returns a dict (the server sends it as
a JSON string); a failure is {"error": …, "hint": …}. Every answer goes through the key redactor.

Names, arguments and return keys follow the tools Hermes Agent once had (tools/rl_training_tool.py), so a prompt
written for them still works; keys we know more about are added (health per service, held-out accuracy, the last
checkpoint, the report's path). What differs on purpose: state lives on disk (runs.py), there is no rate limit, and
starting a run goes through `hermes-stack up` (validation first) instead of bare processes and fixed sleeps.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_stack.controller.agent_tools import config_edit, locking, runs
from hermes_stack.controller.agent_tools.environments import current_name, find_environment, is_builtin_name
from hermes_stack.controller.agent_tools.environments import list_environments as _list_environments
from hermes_stack.errors import HermesError

# rl_test_inference's bound: under the `timeout: 300` of the Hermes entry docs/agent.md gives (a call past it is
# abandoned by the client while the probe goes on spending), with time left to answer.
MCP_ENTRY_TIMEOUT_S = 300
TEST_INFERENCE_TIMEOUT_S = 270
PROJECT_HINT = ("start the server with --project <the hermes-stack checkout> (or set HERMES_ROOT); the folder holds "
                "configs/ and compose.<algo>.yml")


@dataclass(frozen=True)
class ServerConfig:
    """What the user configured for the server (its command line): never changed by a tool call."""

    root: Path
    algo: str = "grpo"
    device: str = "auto"
    unlock: bool = False  # locked fields may change; only from the server's own command line
    model: str | None = None
    wait_timeout: int = 900
    build: bool = True


def project_problem(root: Path, algo: str) -> str | None:
    """Why `root` is not a hermes-stack project for `algo` (None when it is)."""
    if not root.is_dir():
        return f"project folder {root} does not exist"
    missing = [name for name in (f"configs/config_{algo}.toml", f"configs/settings_{algo}.json",
                                 f"compose.{algo}.yml") if not (root / name).is_file()]
    if missing:
        return f"{root} is not a hermes-stack project: no {', '.join(missing)}"
    return None


def failure(error: str, hint: str, **more: Any) -> dict[str, Any]:
    return {"error": error, "hint": hint, **more}


def redacted(answer: dict[str, Any], root: Path | None = None) -> str:
    """The answer as the JSON string a tool returns, with every known secret replaced (key file values, the
    generated inference key, secret-looking environment variables)."""
    from hermes_stack.redaction import redact_known_secrets, register_secrets

    if root is not None:
        from hermes_stack.controller.stack_state import STATE_DIR, stored_inference_key

        key = stored_inference_key(root / STATE_DIR)
        if key:
            register_secrets({"HERMES_INFERENCE_KEY": key})
    return redact_known_secrets(json.dumps(clipped(answer), default=str))


# The longest string an answer carries whole: a 2 MB value or field name sent by an agent came back in up to three
# places of one answer. Longer ones are cut as validate cuts what it echoes (errors.shorten: start, "…", length).
ANSWER_STRING_CHARS = 2000


def clipped(value: Any) -> Any:
    """`value` with every string redacted, then cut: cut first, a key across the cut would keep a prefix the
    redactor no longer knows."""
    from hermes_stack.errors import shorten
    from hermes_stack.redaction import redact_known_secrets

    if isinstance(value, str):
        return shorten(redact_known_secrets(hide_file_content(value)), ANSWER_STRING_CHARS)
    if isinstance(value, dict):
        return {key: clipped(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [clipped(item) for item in value]
    return value


# A dataset line's problem as hermes_stack.tasks.datasets words it (shared with validate, which shows the user their
# own file): `<file>:<line>: line|question|answer: found <the line's text or value>, expected <one of these>`.
_ROW_PROBLEM = re.compile(r"(?P<head>:\d+: (?P<key>line|question|answer): found )(?P<found>.*)"
                          r"(?P<tail>, expected (?:one JSON object per line|a string ending in \"#### N\"|a string"
                          r"|a number there, as in))")
_LINE_KIND = re.compile(r"invalid JSON \([^)]*\)|an? JSON \w+|JSON null")
_SUCH_LINES = re.compile(r" \(the first of \d+ such lines\)$")


def hide_file_content(text: str) -> str:
    """`text` with the quoted content of a dataset line replaced by what kind of problem it has: the agent may name
    any file of the project as environment.dataset, and its first line (a password, a key) came back in the answer.
    The file, the line number and what was expected stay; done here, at the MCP boundary, because validate's own
    line (hermes_stack.tasks.datasets) rightly shows the user their file."""
    def hidden(m: re.Match) -> str:
        found, key = m["found"], m["key"]
        such = _SUCH_LINES.search(found)
        if key == "line":
            kind = _LINE_KIND.match(found)
            what = kind.group(0) if kind else "no JSON object"
        elif found.startswith(f"no {key}"):
            what = f"no {key}"
        elif key == "answer" and "after the last ####" in found:
            what = "no number after the last ####"
        else:
            what = 'an answer without "#### N" at its end' if key == "answer" else "a question that is no string"
        return f"{m['head']}{what} (the line's content is not shown){such.group(0) if such else ''}{m['tail']}"

    return _ROW_PROBLEM.sub(hidden, text) if ": found " in text else text


class _ThreadStdout(io.TextIOBase):
    """sys.stdout while tools run: a thread's writes go to the buffer it is capturing into, any other write to the
    stdout it replaced. Tools run in worker threads, several at once; contextlib.redirect_stdout swaps the one
    process-wide sys.stdout, so two overlapping calls mixed their lines and the later restore left sys.stdout
    pointing at a finished call's buffer."""

    def __init__(self, fallback):
        super().__init__()
        self.fallback = fallback
        self.local = threading.local()

    def _target(self):
        stack = getattr(self.local, "buffers", None)
        return stack[-1] if stack else self.fallback

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self._target().isatty()

    def fileno(self) -> int:
        return self._target().fileno()  # a buffer has none (io.UnsupportedOperation), as under redirect_stdout

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):  # rich reads it
        return getattr(self._target(), "encoding", "utf-8")

    def __getattr__(self, name: str):  # anything else a writer asks of stdout: its target's
        if name in ("fallback", "local"):
            raise AttributeError(name)
        return getattr(self._target(), name)


_stdout_lock = threading.Lock()
_stdout_users = 0
_stdout_proxy: _ThreadStdout | None = None


@contextlib.contextmanager
def captured():
    """The controller prints progress lines; in a tool they are collected (stdout is the MCP channel), per thread."""
    global _stdout_users, _stdout_proxy
    buffer = io.StringIO()
    with _stdout_lock:
        if _stdout_users == 0:
            _stdout_proxy = _ThreadStdout(sys.stdout)
            sys.stdout = _stdout_proxy
        proxy = _stdout_proxy
        _stdout_users += 1
    if not hasattr(proxy.local, "buffers"):
        proxy.local.buffers = []
    proxy.local.buffers.append(buffer)
    try:
        yield buffer
    finally:
        proxy.local.buffers.pop()
        with _stdout_lock:
            _stdout_users -= 1
            if _stdout_users == 0 and sys.stdout is proxy:
                sys.stdout = proxy.fallback


class Tools:
    def __init__(self, cfg: ServerConfig):
        self.cfg = cfg
        self.root = cfg.root

    # ------------------------------------------------------------------ helpers

    def _outcome(self, configs: Path | None = None):
        """validate's checks on the project's configs (the key file loaded and its secrets registered)."""
        from hermes_stack.controller.commands.validate import evaluate

        with captured():
            return evaluate(self.cfg.algo, configs or self.root / "configs", None, self.cfg.unlock, None,
                            self.cfg.device, self.cfg.model)

    def _stack(self):
        outcome = self._outcome()
        if outcome.stack is None:
            lines = [p.line() for p in outcome.errors]
            first = outcome.errors[0] if outcome.errors else None
            raise ToolFailure(first.line().split(". Hint: ")[0] if first else "the configs could not be read",
                              (f"{first.hint}; " if first and first.hint else "") + "the user fixes the config files "
                              f"(make validate ALGO={self.cfg.algo} prints every problem)", problems=lines)
        return outcome

    def _environment_of(self, stack, listed: list[dict[str, str]] | None = None) -> str:
        """The listed name of the configured environment; `listed`: the listing when the caller has one."""
        section = stack.config_as_written.environment
        return current_name(_list_environments(self.root) if listed is None else listed, section.name,
                            section.dataset)

    def _compose(self, algo: str | None = None):
        from hermes_stack.controller.stack_state import STATE_DIR, load_plan, plan_compose

        return plan_compose(load_plan(self.root / STATE_DIR, algo or self.cfg.algo), echo=False)

    # ------------------------------------------------------------------ environments and config

    def rl_list_environments(self) -> dict[str, Any]:
        envs = _list_environments(self.root)
        current = None
        with contextlib.suppress(ToolFailure):
            current = self._environment_of(self._stack().stack, envs)
        from hermes_stack.environments_catalog import unreadable

        out = {"environments": envs, "count": len(envs), "current": current}
        if broken := unreadable(self.root):  # left out of the list: say why, as `hermes-stack environments` does
            out["unreadable_files"] = broken
        return out

    def rl_select_environment(self, name: str) -> dict[str, Any]:
        listed = _list_environments(self.root)
        env = find_environment(listed, name)
        if env is None:
            from hermes_stack.environments_catalog import unreadable
            from hermes_stack.errors import near_miss

            names = [e["name"] for e in listed]
            near = near_miss(name, names)
            broken = unreadable(self.root)
            return failure(f"no environment called {name!r}",
                           (f"did you mean {near}? " if near else "") + f"one of: {', '.join(names)} "
                           "(rl_list_environments)" + (f"; not read: {'; '.join(broken)}" if broken else ""))
        if "environment_name" in env:  # a file of environments/: selected by its name
            edits = [("environment.name", env["environment_name"])]
        else:  # the built-in environment over a dataset; its name back to the built-in one if a file was selected
            edits = [("environment.dataset", env["dataset"])]
            if not is_builtin_name(self._stack().stack.config_as_written.environment.name):
                edits.insert(0, ("environment.name", "gsm8k"))
        for field, value in edits:
            answer = self.rl_edit_config(field, value)
            if "error" in answer:
                return answer
        said = "; ".join(f"[environment] {field.split('.')[1]} = {value!r}" for field, value in edits)
        out = {"message": f"environment {env['name']} selected: {said} in configs/config_{self.cfg.algo}.toml",
               "environment": env["name"], "file_path": env["file_path"]}
        out.update({k: env[k] for k in ("dataset", "environment_name") if k in env})
        config = answer.get("config", {})  # none when the written pair still does not load: its problems then
        if "effective_value" in config:
            out["note"] = config["note"]
        if "problems" in answer:
            out["problems"] = answer["problems"]
        return out

    def rl_get_current_config(self) -> dict[str, Any]:
        outcome = self._stack()
        stack = outcome.stack
        configurable, locked = config_edit.fields_of(stack, self.cfg.algo)
        return {"environment": self._environment_of(stack), "algo": self.cfg.algo, "profile": stack.profile,
                "configurable_fields": configurable, "locked_fields": locked,
                "locked_fields_unlocked": self.cfg.unlock,
                "files": [f"configs/config_{self.cfg.algo}.toml", f"configs/settings_{self.cfg.algo}.json"],
                "problems": [p.line() for p in outcome.errors], "warnings": list(outcome.warnings)}

    def rl_edit_config(self, field: str, value: Any) -> dict[str, Any]:
        try:
            f = config_edit.field_of(field)
            if (f.where, f.section, f.name) in config_edit.NOT_EDITABLE:
                return failure(f"{field} cannot be edited: {config_edit.NOT_EDITABLE[(f.where, f.section, f.name)]}",
                               "start the server with --algo ppo or --algo grpo", field=field, changed=False)
            if config_edit.locked(f) and not self.cfg.unlock:
                seed = config_edit.LOCKED_FIELDS[f"{f.section}.{f.name}"]
                return failure(f"{field} is locked (the seed's value {seed!r}); it was not changed",
                               "the user may unlock it in the MCP server's own configuration (`hermes-stack mcp "
                               "--unlock`); a tool call cannot", field=field, changed=False)
            value = config_edit.coerce(config_edit.file_of(self.root, self.cfg.algo, f), f, value)
            config_edit.check_path(self.root, f, value)
            # Read, check and write under the project's lock: another server editing another key at the same time
            # would otherwise write its copy of the old file over this edit.
            with locking.project_lock(self.root):
                before = self._outcome()
                config_edit.check_parseable(self.root, self.cfg.algo, before)
                changes = config_edit.candidate_texts(self.root, self.cfg.algo, f, value)
                warnings: list[str] = []
                if changes:
                    # the server's own evaluation (its model, device, unlock): judged as rl_start_training judges it
                    warnings = config_edit.validate_candidate(self.root, changes, check=self._outcome, before=before)
                    config_edit.write_atomically(changes)
        except config_edit.EditRefused as exc:
            return failure(exc.error, exc.hint, field=field, changed=False)
        except locking.Busy as exc:
            return failure(f"{exc}; {field} was not changed", "try the edit again in a moment", field=field,
                           changed=False)
        files = [str(p.relative_to(self.root)) for p, _, _ in changes.values()]
        message = (f"{field} = {value!r} written to {', '.join(files)}" if files
                   else f"{field} already is {value!r}; nothing written")
        latest = runs.latest_of(self.root, self.cfg.algo)
        if files and latest is not None and not latest.stopped() and self._active(latest):
            # The containers keep the settings they started with: said, so the agent does not expect the change now.
            message += (f"; run {latest.run_id} keeps its settings: rl_stop_training, then rl_start_training, "
                        "resumes it with this one")
        try:
            now = self.rl_get_current_config()
        except ToolFailure as exc:  # written, but the pair still does not load (a problem the edit did not add)
            return {"message": message, "field": field, "value": value, "files_changed": files,
                    "problems": exc.answer.get("problems", [exc.answer["error"]])}
        entry = next((e for e in now["configurable_fields"] + now["locked_fields"]
                      if config_edit.field_of(e["name"]) == config_edit.field_of(field)), {})
        if value is None and files:  # null resets: say to what, not "= None written"
            how = "removed from" if config_edit.field_of(field).where == "config" else "set to null in"
            message = (f"{field} {how} {', '.join(files)}: its default applies"
                       + (f" (now {entry['current_value']!r})" if "current_value" in entry else ""))
        answer = {"message": message, "field": field, "value": value, "config": entry, "files_changed": files}
        if warnings:  # written, but validate warns of it (shown by rl_get_current_config alone before)
            answer["warnings"] = warnings
        return answer

    # ------------------------------------------------------------------ runs

    def _active(self, run: runs.Run) -> bool:
        return self._status(run)["status"] in ("starting", "running")

    def rl_start_training(self) -> dict[str, Any]:
        # Check and start under the project's lock: two starts at once (two servers, or two calls of one) both saw no
        # active run and both started an `up`. The second now waits, then finds the first one's run starting.
        try:
            with locking.project_lock(self.root):
                return self._start_training()
        except locking.Busy as exc:
            return failure(f"{exc}: another rl_start_training or rl_edit_config of this project is under way; "
                           "nothing was started", "rl_list_runs shows a run that has started; call "
                           "rl_start_training again once it has returned")

    def _start_training(self) -> dict[str, Any]:
        outcome = self._stack()
        if outcome.errors:  # the same checks and lines as `hermes-stack up`'s first stage: nothing is started
            lines = [p.line() for p in outcome.errors]
            first = outcome.errors[0]
            return failure(lines[0].split(". Hint: ")[0], first.hint or "fix the config (rl_edit_config)",
                           problems=lines)
        latest = runs.latest_of(self.root, self.cfg.algo)
        if latest is not None and not latest.stopped():
            status = self._status(latest)
            if status["status"] in ("starting", "running"):
                return failure(f"run {latest.run_id} is {status['status']} on this stack",
                               f"rl_check_status('{latest.run_id}') to follow it, rl_stop_training('"
                               f"{latest.run_id}') to stop it first", run_id=latest.run_id)
            runs.mark_stopped(latest, runs.SUPERSEDED, status)
        stack = outcome.stack
        args = ["--wait-timeout", str(self.cfg.wait_timeout)]
        args += ["--unlock"] if self.cfg.unlock else []
        args += ["--model", self.cfg.model] if self.cfg.model else []
        args += [] if self.cfg.build else ["--no-build"]
        env = self._environment_of(stack)
        config = {"algo": self.cfg.algo, "profile": stack.profile, "environment": env,
                  "effective_dataset": stack.config.environment.dataset,
                  "num_steps": stack.settings.trainer.num_steps, "group_size": stack.config.rollout.group_size,
                  "batch_size": stack.config.rollout.batch_size,
                  "learning_rate": stack.settings.tinker.learning_rate}
        run = runs.start(self.root, self.cfg.algo, self.cfg.device, args, {"environment": env, "config": config})
        return {"run_id": run.run_id, "status": "starting", "environment": env, "config": config,
                "logs": str(run.log.relative_to(self.root)),
                "message": "validated; `hermes-stack up` is starting the stack in the background (build, health "
                           "checks, dry-run, then training: minutes). Poll rl_check_status(run_id) every minute or "
                           "two; there is no rate limit."}

    def _unknown_run(self, run_id: str) -> dict[str, Any]:
        known = [r.run_id for r in runs.all_runs(self.root)]
        return failure(f"no run {run_id!r} in {self.root / '.hermes' / 'runs'}",
                       "rl_list_runs lists the runs" + (f" (latest: {known[-1]})" if known else
                                                         "; none yet: rl_start_training starts one"))

    def _metrics_text(self, run: runs.Run, live: bool) -> str:
        """metrics.jsonl of the run: from the stack when it is the run's (kept as a copy), else the last copy."""
        from hermes_stack.controller.status import read_metrics

        copy = run.path / "metrics.jsonl"
        if live:
            try:
                text = read_metrics(self._compose(), lines=None)
            except (HermesError, OSError):
                text = ""
            if text:
                copy.write_text(text)
                return text
        return copy.read_text() if copy.is_file() else ""

    def _status(self, run: runs.Run) -> dict[str, Any]:
        """status, processes/health and metrics of a run, from its files and compose."""
        from hermes_stack.controller.status import parse_metrics, service_states, stopped_at, summary_of

        runs.reap()
        stopped = run.stopped()
        until = stopped["time"] if stopped else time.time()
        out: dict[str, Any] = {"run_id": run.run_id, "environment": run.data.get("environment"),
                               "running_time_minutes": round((until - run.data["started_at"]) / 60, 1),
                               "processes": [], "health": {}}
        current = (runs.latest_of(self.root, run.algo) or run).run_id == run.run_id
        states, compose = [], None
        if current and not stopped:
            try:
                # Another checkout's stack of the same project name (hermes-<algo>) is not this run's: its health
                # and metrics were reported, and copied, as this run's.
                compose = self._compose(run.algo)
                states = [s for s in service_states(compose.ps()) if s.of_checkout(self.root)]
            except (HermesError, OSError) as exc:
                out["health_error"] = str(exc)
        out["processes"] = [{"service": s.service, "state": s.state, "health": s.health, "ok": s.ok} for s in states]
        out["health"] = {s.service: s.describe() for s in states}
        trainer = next((s for s in states if s.service == "trainer"), None)
        text = self._metrics_text(run, live=bool(states))
        code = run.exit_code()
        if stopped:
            status = runs.status_when_closed(stopped)
            out["stopped"] = {"reason": stopped.get("reason"), "minutes_ago": round((time.time() - stopped["time"])
                                                                                   / 60, 1)}
        elif run.controller_alive():
            status = "starting"
            stages = [line for line in runs.log_tail(run, 200) if re.match(r"\[\d/\d\]", line)]
            out["stage"] = stages[-1] if stages else "starting the controller"
        elif code is None:
            status = "failed"
            out["error"] = "the controller ended without an exit code (killed?)"
        elif code != 0:
            status = "failed"
            out["error"] = runs.error_line(run) or f"hermes-stack up exited {code}"
        elif trainer is None:
            status = "stopped"
            out["error"] = "the stack has no containers: it was stopped outside the agent tools (make down?)"
        elif trainer.state == "exited" and trainer.exit_code == 0 and (at := stopped_at(text)) is not None:
            # A stop exits 0 as a finished run does: the trainer's recorded stop tells them apart (as `status` does).
            status = "stopped"
            out["error"] = (f"the trainer was stopped after step {at} (docker compose stop?), a checkpoint: "
                            "rl_start_training resumes there")
        elif trainer.state == "exited":
            status = "completed" if trainer.exit_code == 0 else "failed"
            if trainer.exit_code:
                out["error"] = f"the trainer exited {trainer.exit_code}; `docker compose logs trainer` says why"
        else:
            status = "running"
            # As `make status` quotes it: a user's environment whose every rollout fails is healthy and trains
            # nothing, and the agent saw only "running" with no step.
            from hermes_stack.controller.status import recent_errors

            try:
                if errors := recent_errors(compose, states):
                    out["recent_errors"] = errors
            except (HermesError, OSError):
                pass
        out["status"] = status
        if status in ("failed", "starting"):
            out["log_tail"] = runs.log_tail(run, 8)
        if status == "completed" and any("nothing to train: the run is complete" in line
                                         for line in runs.log_tail(run, 40)):
            out["note"] = ("nothing was trained: the run had already reached trainer.num_steps; "
                           "rl_edit_config('trainer.num_steps', <more>) then rl_start_training trains on from its "
                           "last checkpoint")
        summary = summary_of(text)
        last = parse_metrics(text)[-1] if parse_metrics(text) else {}
        out["metrics"] = {"step": summary.step, "num_steps": (run.data.get("config") or {}).get("num_steps"),
                          "reward_mean": summary.reward_mean,
                          # the environment's verdicts on the last step's rollouts (None for an environment that
                          # gives none: a user's file scores by its own rules)
                          "percent_correct": last.get("rollout_accuracy"),
                          "eval_percent_correct": summary.held_out[1] if summary.held_out else None,
                          "heldout_accuracy": summary.held_out[1] if summary.held_out else None,
                          "heldout_accuracy_step": summary.held_out[0] if summary.held_out else None,
                          "kl": last.get("kl"), "last_checkpoint": summary.last_checkpoint,
                          "reward_trend": summary.trend}
        return out

    def rl_check_status(self, run_id: str) -> dict[str, Any]:
        run = runs.load(self.root, run_id)
        return self._unknown_run(run_id) if run is None else self._status(run)

    def _report(self, run: runs.Run, text: str) -> dict[str, Any]:
        from hermes_stack.controller.report import write_report
        from hermes_stack.controller.status import parse_events, parse_metrics

        records, events = parse_metrics(text), parse_events(text)
        report = write_report(records, events, run.path, f"{run.run_id} ({run.algo}, {run.data.get('environment')})")
        return {"report_png": str(report.png.relative_to(self.root)),
                "report_html": str(report.html.relative_to(self.root)), "final_metrics": report.summary,
                "_records": records}

    def rl_stop_training(self, run_id: str) -> dict[str, Any]:
        run = runs.load(self.root, run_id)
        if run is None:
            return self._unknown_run(run_id)
        if (closed := run.stopped()) is not None:
            ended = runs.status_when_closed(closed)
            return {"message": f"run {run_id} was already {ended}", "run_id": run_id, "status": ended}
        current = (runs.latest_of(self.root, run.algo) or run).run_id == run.run_id
        if current and (refused := self._not_this_checkouts(run.algo)) is not None:
            return failure(*refused, run_id=run_id)  # before anything stops: another checkout's trainer ran on
        before = self._status(run)["status"]  # read first: a starting run read "failed" once its `up` was stopped
        interrupted = runs.stop_controller(run)
        if current:
            self._stop_trainer(run.algo)
        # After the trainer's stop, which saves its step and records the stop: the metrics copied before it missed
        # the last steps and the checkpoint the stop saved (step 14 and none, where step-16 was saved).
        status = self._status(run)  # copies the metrics while the containers still exist
        lines: list[str] = []
        if current:
            from hermes_stack.controller.commands.stack import down

            with captured() as out:
                try:
                    down(algo=run.algo, volumes=False)
                except HermesError as exc:
                    return failure(f"stopping the stack failed: {exc}", "`make down ALGO=" + run.algo + "` stops it "
                                   "by hand", run_id=run_id)
            lines = [line for line in out.getvalue().splitlines() if line.strip()]
        runs.mark_stopped(run, "rl_stop_training", {"status": before, "metrics": status["metrics"]})
        report = self._report(run, self._metrics_text(run, live=False))
        report.pop("_records")
        where = ("; containers removed, checkpoints kept (the data volume stays)" if current else
                 f"; it is not the latest {run.algo} run here, so no containers were touched (rl_list_runs)")
        return {"message": f"run {run_id} stopped" + (" while starting" if interrupted else "") + where,
                "run_id": run_id, "status": "stopped", "status_before_stop": before,
                "controller_output": lines[-5:], **report}

    def _not_this_checkouts(self, algo: str) -> tuple[str, str] | None:
        """(error, hint) when the stack of `algo` belongs to another checkout (the same project name there): `down`
        refuses it, but the trainer's stop before it ran unchecked and stopped the other checkout's training."""
        from hermes_stack.controller.checkout_owner import owner_problem, this_checkout
        from hermes_stack.controller.compose import project_of
        from hermes_stack.controller.status import WORKING_DIR_LABEL, service_states

        try:
            compose = self._compose(algo)
            made_in = [s.label(WORKING_DIR_LABEL) for s in service_states(compose.ps()) if not s.of_checkout(self.root)]
        except (HermesError, OSError):
            return None  # Docker unreachable: the stop and `down` that follow say so
        problem = owner_problem(project_of(compose.params), algo, this_checkout(self.root), None, made_in, "stop")
        return None if problem is None else (problem.line().split(". Hint: ")[0], problem.hint)

    def _stop_trainer(self, algo: str) -> None:
        """`compose stop trainer`: its SIGTERM finishes the step, saves a checkpoint and records the stop (within the
        grace period compose gives it); a failure here is left to the `down` that follows."""
        try:
            self._compose(algo).stop(["trainer"])
        except (HermesError, OSError):
            pass

    def rl_get_results(self, run_id: str) -> dict[str, Any]:
        run = runs.load(self.root, run_id)
        if run is None:
            return self._unknown_run(run_id)
        status = self._status(run)
        report = self._report(run, self._metrics_text(run, live=False))
        records = report.pop("_records")
        keys = ("step", "reward_mean", "eval_accuracy", "kl", "entropy", "clip_fraction", "loss", "checkpoint")
        history = [{k: r.get(k) for k in keys if k in r} for r in records[-200:]]
        return {"run_id": run_id, "status": status["status"], "environment": run.data.get("environment"),
                "config": run.data.get("config"), **report, "history": history,
                "history_note": f"the last {len(history)} of {len(records)} steps"}

    def rl_list_runs(self) -> dict[str, Any]:
        listed = []
        for run in runs.all_runs(self.root):
            stopped = run.stopped()
            status = runs.status_when_closed(stopped) if stopped else self._status(run)["status"]
            listed.append({"run_id": run.run_id, "environment": run.data.get("environment"), "status": status,
                           "algo": run.algo, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                         time.gmtime(run.data["started_at"]))})
        return {"runs": listed, "count": len(listed)}

    # ------------------------------------------------------------------ test inference

    def rl_test_inference(self, num_steps: int = 3, group_size: int = 16, models: list[str] | None = None
                          ) -> dict[str, Any]:
        if not 1 <= num_steps <= 64:
            return failure(f"num_steps={num_steps} is out of range", "1 to 64 groups; each one is a paid or local "
                                                                     "generation of group_size completions")
        if not 1 <= group_size <= 1024:  # before anything is written (.hermes/runs/)
            return failure(f"group_size={group_size} is out of range", "1 to 1024 completions per prompt")
        outcome = self._stack()
        if outcome.errors:
            return failure(outcome.errors[0].line().split(". Hint: ")[0], outcome.errors[0].hint or "fix the config")
        stack = outcome.stack
        configured = stack.config.rollout.group_size
        keyfile = stack.keyfile
        model = None if keyfile is None or keyfile.offline else keyfile.get("TAOTOKEN_MODEL")
        wanted = [m for m in (models or []) if m != model]
        if wanted:
            return failure(f"models {wanted} are not configured: test-inference uses the key file's TAOTOKEN_MODEL "
                           f"({model or 'none: offline, the local inference service'})",
                           "change TAOTOKEN_MODEL in the key file (the agent cannot), or pass models=[]")
        out_file = runs.runs_dir(self.root) / f"test-inference-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        out_file.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "hermes_stack", "test-inference", "--algo", self.cfg.algo, "--steps",
                str(num_steps), "--group-size", str(group_size), "--out", str(out_file), "--device", self.cfg.device]
        try:
            done = subprocess.run(argv, cwd=self.root, capture_output=True, text=True,
                                  timeout=TEST_INFERENCE_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return failure(f"test-inference took more than {TEST_INFERENCE_TIMEOUT_S} s and was stopped (the tool "
                           f"answers within the MCP entry's `timeout: {MCP_ENTRY_TIMEOUT_S}`)",
                           "try fewer num_steps or a smaller group_size")
        if done.returncode != 0:
            if out_file.exists() and out_file.stat().st_size == 0:  # nothing scored: no empty file left in runs/
                out_file.unlink()
            errors = [line.removeprefix("error: ") for line in done.stderr.splitlines() if line.startswith("error: ")]
            # With a model in the key file the probe asked the gateway: starting a (paid) run would not help.
            hint = ("the gateway named in the key file did not answer as expected: the user checks TAOTOKEN_BASE_URL "
                    "and TAOTOKEN_API_KEY there (the agent cannot), then rl_test_inference again" if model else
                    "offline it needs the stack's inference service: rl_start_training, then rl_check_status until "
                    "it is running, then rl_test_inference again; or the user adds a key file with TAOTOKEN_MODEL "
                    "to test the gateway model")
            return failure(_for_the_agent(errors[-1]) if errors else f"test-inference exited {done.returncode}",
                           hint)
        found = re.search(r"accuracy ([\d.]+)\s+format rate ([\d.]+)\s+mean reward ([-\d.]+)", done.stdout)
        result = {"model": model or "local inference service", "steps": num_steps, "group_size": group_size,
                  "accuracy": float(found.group(1)) if found else None,
                  "format_rate": float(found.group(2)) if found else None,
                  "mean_reward": float(found.group(3)) if found else None,
                  "output_file": str(out_file.relative_to(self.root))}
        note = None if group_size == configured else (f"the run trains with the config's rollout.group_size "
                                                     f"({configured}); rl_edit_config('rollout.group_size', N) "
                                                     "changes it")
        return {"results": [result], "message": "scored groups written to " + result["output_file"],
                **({"note": note} if note else {})}


def _for_the_agent(line: str) -> str:
    """The controller's error line without what only its command line offers: its hint and clauses such as "pass
    --local <URL>" or "(`make up`)" name options and commands the agent's tools do not have (the tool's own hint
    says what the agent can do)."""
    line = line.split(". Hint: ")[0]
    kept = [part for part in line.split("; ") if "--local" not in part and "make up" not in part]
    return "; ".join(kept) or line


class ToolFailure(Exception):
    def __init__(self, error: str, hint: str, **more: Any):
        super().__init__(error)
        self.answer = failure(error, hint, **more)


def call(tools: Tools | None, problem: str | None, tool: str, **kwargs: Any) -> str:
    """Run one tool and return its JSON string: a project problem, a ToolFailure or a controller error becomes
    {"error", "hint"}; an unexpected exception too (named, never a traceback to the agent)."""
    root = tools.root if tools is not None else None
    if problem is not None or tools is None:
        return redacted(failure(problem or "no project", PROJECT_HINT))
    try:
        with captured():
            answer = getattr(tools, tool)(**kwargs)
    except ToolFailure as exc:
        answer = exc.answer
    except HermesError as exc:
        lines = exc.lines()
        answer = failure(lines[0].split(". Hint: ")[0],
                         lines[0].split(". Hint: ")[1] if ". Hint: " in lines[0] else "see the error",
                         **({"problems": lines} if len(lines) > 1 else {}))
    except Exception as exc:  # noqa: BLE001 - an agent gets one line, the server keeps serving
        answer = failure(f"{tool} failed unexpectedly: {type(exc).__name__}: {exc}",
                         "the MCP server's stderr has the details; `hermes-stack status` shows the stack")
        import traceback

        traceback.print_exc(file=sys.stderr)
    return redacted(answer, root)

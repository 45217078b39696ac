"""status: service states, metrics summary, trend, and the up-failure explanation (fakes, no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

from hermes_stack.controller.compose import CommandFailed, Compose, ComposeParams, stack_params
from hermes_stack.controller.status import (
    explain_up_failure,
    failing,
    health_reason,
    parse_metrics,
    service_states,
    sparkline,
    summarize,
)


def _row(service, state="running", health="healthy", code=0):
    return {"Service": service, "Name": f"hermes-grpo-{service}-1", "State": state, "Health": health, "ExitCode": code}


def test_completed_one_shot_is_ok_but_failed_one_shot_and_unhealthy_are_not():
    states = service_states([_row("gateway-check", "exited", "", 0), _row("atropos"),
                             _row("inference", health="unhealthy"), _row("environment", "exited", "", 3)])
    assert [s.service for s in failing(states)] == ["environment", "inference"]
    assert states[1].describe() == "exited 3"


def test_metrics_skip_torn_lines_and_summary_takes_last_step_and_checkpoint():
    text = "\n".join(json.dumps(r) for r in [
        {"step": 1, "reward_mean": 0.1, "checkpoint": None},
        {"step": 2, "reward_mean": 0.3, "checkpoint": "/data/checkpoints/step-2"},
        {"step": 3, "reward_mean": 0.5, "checkpoint": None},
    ]) + '\n{"step": 4, "rew'
    summary = summarize(parse_metrics(text))
    assert (summary.step, summary.reward_mean, summary.last_checkpoint) == (3, 0.5, "/data/checkpoints/step-2")
    assert summary.trend[0] == "▁" and summary.trend[-1] == "█"


def test_held_out_accuracy_shows_its_latest_evaluation_and_trend_only_when_recorded():
    records = [{"step": n, "reward_mean": 0.2, "checkpoint": None} for n in range(1, 26)]
    assert not any("held-out" in line for line in summarize(records).lines())
    for n, acc in ((10, 0.1), (20, 0.5)):
        records[n - 1]["eval_accuracy"] = acc
    lines = summarize(records).lines()
    assert "held-out acc:  0.500 at step 20   trend ▁█ (last 2 evaluations)" in lines
    assert lines[-1].startswith("checkpoint:")


def test_no_metrics_says_so():
    assert "no step recorded" in summarize([]).lines()[0]


def test_sparkline_ignores_nan_and_is_flat_for_constant_input():
    assert sparkline([float("nan"), 1.0, 1.0, 1.0]) == "▄▄▄"
    assert sparkline([0.0, 1.0]) == "▁█"


def test_health_reason_is_last_healthcheck_output_on_one_line():
    health = {"Status": "unhealthy", "Log": [{"Output": "old"}, {"Output": "inference not ready:\n no model\n"}]}
    assert health_reason(json.dumps(health)) == "inference not ready: no model"


def test_up_failure_names_each_unready_service_with_its_healthcheck_reason():
    ps = "\n".join(json.dumps(r) for r in [_row("atropos"), _row("inference", health="unhealthy")])

    def runner(argv, env, capture):
        if argv[:2] == ["docker", "inspect"]:
            assert argv[-1] == "hermes-grpo-inference-1"
            return json.dumps({"Log": [{"Output": "port 9 refused"}]})
        return ps

    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=runner)
    err = explain_up_failure(compose, CommandFailed(["docker", "compose", "up"], 1, "dependency failed"))
    assert err.lines() == ["service inference is unhealthy: port 9 refused"]


def test_up_failure_of_a_crash_looping_service_quotes_its_last_error():
    """A user environment whose setup raised: compose said only "service environment is restarting"."""
    ps = "\n".join(json.dumps(r) for r in [_row("trainer"), _row("environment", state="restarting", health="")])
    logs = ["environment-1  | Traceback (most recent call last):",
            'environment-1  |   File "/app/environments/mine.py", line 9, in setup',
            "environment-1  | NotImplementedError: Setup method must be implemented in subclass",
            "environment-1  | INFO exiting"]
    asked = []

    def streamer(argv, env):
        asked.append(argv)
        return iter(logs)

    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: ps,
                      streamer=streamer)
    err = explain_up_failure(compose, CommandFailed(["docker", "compose", "up"], 1, "environment is restarting"))
    assert err.lines() == [("service environment is restarting: its last error: NotImplementedError: Setup method "
                            "must be implemented in subclass (docker compose logs environment)")]
    assert asked[0][-3:] == ["--tail", "80", "environment"]


def test_up_failure_quotes_an_error_the_service_logged_in_its_own_format():
    """A user environment whose file fails at import is one logged line, no traceback: service_log.FORMAT."""
    ps = "\n".join(json.dumps(r) for r in [_row("trainer"), _row("environment", state="restarting", health="")])
    logs = ["environment-1  | 2026-12-07 10:00:01,512 INFO hermes_stack.environment: environment triple-sum",
            ("environment-1  | 2026-12-07 10:00:01,733 ERROR hermes_stack.environment: environments/triple_sum.py: "
            "importing it failed: FileNotFoundError: [Errno 2] No such file or directory: 'seeds.json'"),
            "environment-1  | 2026-12-07 10:00:01,734 INFO hermes_stack.environment: exiting"]
    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: ps,
                      streamer=lambda argv, env: iter(logs))
    err = explain_up_failure(compose, CommandFailed(["docker", "compose", "up"], 1, "environment is restarting"))
    assert err.lines() == [("service environment is restarting: its last error: environments/triple_sum.py: importing "
                            "it failed: FileNotFoundError: [Errno 2] No such file or directory: 'seeds.json' "
                            "(docker compose logs environment)")]


def test_up_failure_where_nothing_started_shows_composes_own_error():
    # e.g. the engine refused to create a container: every service is only "created", compose's stderr is the cause
    ps = "\n".join(json.dumps(r) for r in [_row("atropos", state="created", health=""),
                                           _row("inference", state="created", health="")])
    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: ps)
    cause = CommandFailed(["docker", "compose", "up"], 1, "Error response from daemon: getent unable to find entry")
    err = explain_up_failure(compose, cause)
    assert err is cause and err.lines()[0].endswith("exited 1: Error response from daemon: getent unable to find entry")


def test_metrics_come_from_a_running_trainer_else_are_copied_out_of_a_stopped_one():
    from pathlib import Path

    from hermes_stack.controller.status import read_metrics

    line = '{"step": 3, "reward_mean": 0.5}\n'
    calls = []

    def stopped(argv, env, capture):
        calls.append(argv[argv.index("compose.grpo.yml") + 1])
        if "exec" in argv:
            raise CommandFailed(argv, 1, "service trainer is not running")
        Path(argv[-1]).write_text(line)  # `compose cp trainer:/data/metrics.jsonl <target>`
        return ""

    assert read_metrics(Compose(ComposeParams(files=("compose.grpo.yml",)), runner=stopped)) == line
    assert calls == ["exec", "cp"]
    running = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: line)
    assert read_metrics(running) == line

    def neither(argv, env, capture):
        raise CommandFailed(argv, 1, "no such service")

    assert read_metrics(Compose(ComposeParams(files=("compose.grpo.yml",)), runner=neither)) == ""


def test_after_down_metrics_are_read_off_the_kept_volume_and_never_from_a_volume_made_for_it():
    """`down` (volumes kept) removes the trainer container, so neither exec nor cp can read the run: a throwaway
    container of the stack's Atropos image reads the volume, read-only, no network, never pulling. When the volume is
    gone too, nothing is run (`docker run -v` would create an empty one)."""
    from hermes_stack.controller.status import read_metrics

    line = '{"step": 59, "reward_mean": 0.5}\n'
    runs = []

    def after_down(volume_exists):
        def runner(argv, env, capture):
            runs.append(argv)
            if argv[:2] == ["docker", "compose"]:
                raise CommandFailed(argv, 1, "no container found for service trainer")
            if argv[:3] == ["docker", "volume", "inspect"]:
                if not volume_exists:
                    raise CommandFailed(argv, 1, "Error: No such volume: hermes-test-grpo_hermes-data")
                return "hermes-test-grpo_hermes-data"
            return line
        return runner

    params = ComposeParams(files=("compose.grpo.yml", "compose.cpu.yml"), project_name="hermes-test-grpo")
    assert read_metrics(Compose(params, runner=after_down(True)), lines=None) == line
    run = runs[-1]
    assert run[:2] == ["docker", "run"] and "--rm" in run
    assert run[run.index("--pull") + 1] == "never" and run[run.index("--network") + 1] == "none"
    assert run[run.index("-v") + 1] == "hermes-test-grpo_hermes-data:/data:ro"
    assert run[run.index("--entrypoint") + 1:] == ["cat", "hermes-stack/atropos:latest", "/data/metrics.jsonl"]
    runs.clear()
    assert read_metrics(Compose(params, runner=after_down(False)), lines=10) == ""
    assert not any(argv[:2] == ["docker", "run"] for argv in runs)


def test_the_project_defaults_to_the_name_in_compose_algo_yml():
    from hermes_stack.controller.compose import data_volume, project_of

    assert project_of(ComposeParams(files=("compose.ppo.yml", "compose.cpu.yml"))) == "hermes-ppo"
    assert data_volume(ComposeParams(files=("compose.grpo.yml",))) == "hermes-grpo_hermes-data"
    assert project_of(ComposeParams(files=("compose.grpo.yml",), project_name="mine")) == "mine"


def _trainer_runner(state, code, log):
    ps = "\n".join(json.dumps(r) for r in [_row("atropos"), _row("trainer", state=state, health="", code=code)])

    def runner(argv, env, capture):
        return log if "logs" in argv else ps
    return runner


def test_a_trainer_that_exited_0_on_a_complete_checkpoint_is_a_finished_run_not_a_failure():
    from hermes_stack.controller.status import finished_run

    done = "trainer | 12:00:01 INFO training already complete: checkpoint step 400 >= num_steps 400\n"
    params = ComposeParams(files=("compose.grpo.yml",))
    assert finished_run(Compose(params, runner=_trainer_runner("exited", 0, done))) == (400, 400)
    # the same line from an earlier start, but this one failed, runs, or exited for another reason: not finished
    assert finished_run(Compose(params, runner=_trainer_runner("exited", 1, done))) is None
    assert finished_run(Compose(params, runner=_trainer_runner("running", 0, done))) is None
    assert finished_run(Compose(params, runner=_trainer_runner("exited", 0, "stopped at step 12\n"))) is None


def test_a_step_no_float_can_hold_is_skipped_like_a_torn_line():
    """`report --metrics` on a line with a 400-digit step ended in OverflowError (the plots' axes are floats)."""
    text = "\n".join(json.dumps(r) for r in [{"step": 1, "reward_mean": 0.2}, {"step": 10**400, "reward_mean": 0.3},
                                              {"step": -1, "reward_mean": 0.3}])
    assert [r["step"] for r in parse_metrics(text)] == [1]


def test_a_stop_by_hand_says_how_to_start_again_and_a_completed_one_shot_says_nothing():
    """`docker kill` of the trainer showed `!! trainer exited 137` and nothing else (a lifecycle sweep)."""
    from hermes_stack.controller.status import stopped_line

    killed = service_states([_row("atropos"), _row("trainer", state="exited", health="", code=137)])
    assert stopped_line(killed, "grpo") == (
        "the trainer was stopped by hand (docker kill or stop; compose restarts only crashes): make up ALGO=grpo "
        "starts it again, and training resumes from its last checkpoint")
    stopped = service_states([_row(s, state="exited", health="", code=143) for s in ("atropos", "trainer")])
    assert stopped_line(stopped, "ppo").startswith("the stack was stopped by hand")
    assert stopped_line(service_states([_row("gateway-check", state="exited", health="", code=0),
                                        _row("trainer")]), "grpo") is None
    # With replicas, the command keeps their count (a review typed REPLICAS=2 itself; the line left it out)
    replica_killed = service_states([_row("trainer"), _row("inference"), _row("router"),
                                     _row("inference-2", state="exited", health="", code=137)])
    assert stopped_line(replica_killed, "grpo") == (
        "inference-2 was stopped by hand (docker kill or stop; compose restarts only crashes): make up ALGO=grpo "
        "REPLICAS=2 starts it again beside the training run, which samples from the other replicas meanwhile")
    # created, never started (a typed `docker compose up` that stopped at the secrets): said, with the command
    created = service_states([_row(s, state="created", health="") for s in ("atropos", "trainer")])
    assert stopped_line(created, "grpo") == (
        "atropos, trainer were created but never started (a typed docker compose lacks the secrets): make up "
        "ALGO=grpo starts them, and training resumes from its last checkpoint")
    # ... but not when the newest start found the run complete: `up` left the environment created, and its `make up`
    # only says "nothing to train" again (a review)
    assert stopped_line(created, "grpo", complete=True) is None
    from hermes_stack.controller.status import found_complete

    complete = "\n".join(json.dumps(r) for r in [{"step": 500}, {"event": "completed", "at_step": 500, "time": 1.0}])
    assert found_complete(complete) and not found_complete(complete + "\n" + json.dumps({"step": 501}))


def test_a_service_stopped_beside_a_training_run_is_named_and_started_by_up_not_the_trainer():
    """`docker kill` of inference while the trainer runs: status said the run resumes from its checkpoint (it never
    stopped), and `up` left the service stopped."""
    from hermes_stack.controller.bring_up import already_training
    from hermes_stack.controller.compose import up_argv
    from hermes_stack.controller.status import stopped_line, to_start_beside_a_run

    states = service_states([_row("atropos"), _row("gateway-check", state="exited", health="", code=0),
                             _row("inference", state="exited", health="", code=137), _row("trainer"),
                             _row("environment", state="exited", health="", code=143)])
    assert stopped_line(states, "grpo") == (
        "environment, inference were stopped by hand (docker kill or stop; compose restarts only crashes): make up "
        "ALGO=grpo starts them again beside the training run, which waits for them")
    assert to_start_beside_a_run(states) == ["environment", "inference"]
    stopped_trainer = service_states([_row("inference"), _row("trainer", state="exited", health="", code=137)])
    assert to_start_beside_a_run(stopped_trainer) == []  # a stopped trainer is `up`'s usual path, not this one
    assert already_training("grpo", "hermes-grpo", 12, started=["inference"])[0] == (
        "hermes-grpo is training already (step 12): started inference again, the rest untouched.")
    argv = up_argv(stack_params("grpo", "cpu", Path("/repo")), ["inference"], keep=True)
    assert argv[-3:] == ["--no-recreate", "--no-deps", "inference"]


def test_the_newest_checkpoint_is_a_stops_save_when_it_came_after_the_intervals():
    """After `docker compose stop` saved step-242, `status` still said step-225 (the last interval's, read off the
    step records only)."""
    from hermes_stack.controller.status import last_checkpoint

    text = "\n".join(json.dumps(r) for r in [
        {"step": 225, "reward_mean": 0.5, "checkpoint": "step-225"},
        {"step": 242, "reward_mean": 0.6, "checkpoint": None},
        {"event": "saved", "message": "step 242 saved on stop as step-242", "checkpoint": "step-242", "time": 1.0,
         "at_step": 242}])
    summary = summarize(parse_metrics(text), [last_checkpoint(text)])
    assert summary.last_checkpoint == "step-242"
    assert last_checkpoint(text.rsplit("\n", 1)[0]) == "step-225"
    # the one written last, as `report` (and rl_get_results) name it too: after a resume that passed over an unusable
    # save (step-242 here), the next interval's save is the newest though its step is lower
    timed = [{"step": 225, "checkpoint": "step-225", "time": 1.0}, {"step": 242, "checkpoint": None, "time": 2.0},
             {"event": "saved", "checkpoint": "step-242", "at_step": 242, "time": 3.0},
             {"step": 226, "checkpoint": None, "time": 4.0}, {"step": 230, "checkpoint": "step-230", "time": 5.0}]
    resumed = "\n".join(json.dumps(r) for r in timed)
    assert last_checkpoint(resumed) == "step-230"
    from hermes_stack.controller.report import summary
    from hermes_stack.controller.status import parse_events

    assert summary(parse_metrics(resumed), parse_events(resumed))["last_checkpoint"] == "step-230"


def test_up_beside_a_training_run_says_when_its_containers_hold_older_keys():
    """`up` touches a training run's containers for nothing; when the key file's keys (or the generated key) changed
    since it started, they keep the old ones, and up says how to hand them the new (a review asked for it)."""
    from hermes_stack.controller.bring_up import already_training

    def trainer(labels):
        rows = [_row("atropos") | {"Labels": "com.docker.compose.service=atropos"}, _row("trainer") | {"Labels": labels}]
        return service_states(rows)[1]

    held = "com.docker.compose.project=hermes-grpo,io.hermes-stack.secrets=0123456789abcdef,com.docker.compose.x=1"
    assert trainer(held).secrets_digest == "0123456789abcdef"
    assert not trainer(held).holds_other_secrets("0123456789abcdef")
    assert trainer(held).holds_other_secrets("fedcba9876543210")
    assert not trainer("com.docker.compose.project=hermes-grpo").holds_other_secrets("fedcba9876543210")  # before the label
    assert not trainer("io.hermes-stack.secrets=").holds_other_secrets("fedcba9876543210")  # by a plain compose up

    quiet = already_training("ppo", "hermes-ppo", 12)
    told = already_training("ppo", "hermes-ppo", 12, secrets_changed=True)
    assert told[:-1] == quiet and told[-1] == (
        "the key file's keys changed since this run started (or .hermes/ was deleted): its containers keep the old "
        "ones until make down ALGO=ppo, then make up ALGO=ppo")


def test_last_error_reads_a_bare_exception_line_and_a_timed_out_log_read_keeps_the_failure():
    """A review: an exception line without a message was skipped for an older one, and a `logs` read that timed out
    replaced the whole failure with its own message."""
    from hermes_stack.controller.compose import CommandTimedOut
    from hermes_stack.controller.status import last_error

    assert last_error(["env-1  | ValueError: old", "env-1  | RuntimeError"]) == "RuntimeError"
    assert last_error(["env-1  | asyncio.exceptions.CancelledError"]) == "asyncio.exceptions.CancelledError"
    assert last_error(["env-1  | INFO errors=0, all fine"]) == ""
    ps = "\n".join(json.dumps(r) for r in [_row("environment", state="restarting", health="")])

    def slow(argv, env):
        raise CommandTimedOut(argv, 10)

    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: ps, streamer=slow)
    err = explain_up_failure(compose, CommandFailed(["docker", "compose", "up"], 1, "environment is restarting"))
    assert err.lines() == ["service environment is restarting"]


def test_status_quotes_the_last_error_of_a_healthy_environment_and_of_crashed_services_only():
    """A user environment whose every rollout fails stays `running (healthy)` while nothing trains: status said
    `ok` for each service and `no step recorded yet`."""
    from hermes_stack.controller.status import error_lines

    states = service_states([_row("atropos"), _row("trainer", "restarting", ""), _row("inference"),
                             _row("environment"), _row("gateway-check", "exited", "", 0)])
    logs = {
        "environment": ["environment-1  | 2026-12-07 10:00:00,000 INFO hermes_stack.environment: registered",
                        ("environment-1  | 2026-12-07 10:00:01,000 ERROR hermes_stack.environment: collect_trajectories "
                        "raised KeyError: 'expected' at environments/triple_sum.py:57 (10 item(s) so far; each is "
                        "skipped)")],
        "trainer": ["trainer-1  | 2026-12-07 10:00:02,000 ERROR hermes_stack.trainer: no batch from atropos in 45 s"],
        "inference": ["inference-1  | 2026-12-07 10:00:00,000 ERROR hermes.inference: not asked for"],
    }
    asked = []

    def streamer(argv, env):
        asked.append(argv[-1])
        return iter(logs[argv[-1]])

    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: "",
                      streamer=streamer)
    assert error_lines(compose, states, "grpo", "hermes-grpo") == [
        ("  environment: its last error: collect_trajectories raised KeyError: 'expected' at environments/"
        "triple_sum.py:57 (10 item(s) so far; each is skipped) (make logs ALGO=grpo SERVICE=environment)"),
        "  trainer: its last error: no batch from atropos in 45 s (make logs ALGO=grpo SERVICE=trainer)"]
    assert asked == ["environment", "trainer"]  # a healthy inference service's log is not read
    quiet = {"environment": ["environment-1  | 2026-12-07 10:00:00,000 INFO hermes_stack.environment: batch 3"]}
    compose = Compose(ComposeParams(files=("compose.grpo.yml",)), runner=lambda argv, env, capture: "",
                      streamer=lambda argv, env: iter(quiet[argv[-1]]))
    assert error_lines(compose, service_states([_row("environment")]), "ppo", "mine") == []


def test_status_shows_a_state_event_only_until_a_step_follows_it():
    """A review: after a finished run was extended, status kept `training already complete at step 500` as its newest
    event while the run trained at step 852; a stop's events likewise after the resume. Incidents stay."""
    from hermes_stack.controller.status import current_events, event_lines

    records = [{"step": 499}, {"step": 500},
               {"event": "completed", "message": "training already complete at step 500", "time": 1.0, "at_step": 500},
               {"step": 501},
               {"event": "environment_departed", "message": "environment 1 stopped sending", "time": 2.0},
               {"step": 502},
               {"event": "stopped", "message": "stopped by SIGTERM after step 502", "time": 3.0, "at_step": 502},
               {"event": "saved", "message": "step 502 saved on stop as step-502", "time": 3.0, "at_step": 502}]
    text = "\n".join(json.dumps(r) for r in records)
    assert [e["event"] for e in current_events(text)] == ["environment_departed", "stopped", "saved"]
    resumed = text + "\n" + json.dumps({"step": 503})
    assert [e["event"] for e in current_events(resumed)] == ["environment_departed"]
    assert event_lines(current_events(resumed)) == ["event 00:00:02 UTC: environment 1 stopped sending"]

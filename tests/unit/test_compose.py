"""The compose argv is built from typed params: tested as data, no Docker needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_stack.controller.compose import (
    CommandFailed,
    Compose,
    config_argv,
    default_network,
    down_argv,
    logs_argv,
    parse_ps,
    printable,
    run_argv,
    stack_params,
    up_argv,
)

ROOT = Path("/repo")


def test_grpo_on_cpu_layers_the_cpu_override_after_the_algo_file():
    p = stack_params("grpo", "cpu", ROOT)
    assert p.files == ("compose.grpo.yml", "compose.cpu.yml")
    assert p.base_argv() == ["docker", "compose", "--project-name", "hermes-grpo", "--project-directory", "/repo",
                             "-f", "/repo/compose.grpo.yml", "-f", "/repo/compose.cpu.yml"]


def test_the_project_is_always_named_so_the_dotenv_of_the_other_algorithm_cannot_redirect_a_command(tmp_path):
    """compose ranks COMPOSE_PROJECT_NAME (the .env `up ALGO=grpo` writes) above compose.ppo.yml's `name:`: a
    `down ALGO=ppo` without --project-name took the grpo stack down, and with --volumes deleted its checkpoints."""
    p = stack_params("ppo", "cpu", tmp_path)
    assert p.base_argv()[2:4] == ["--project-name", "hermes-ppo"]
    assert down_argv(p, volumes=True)[2:4] == ["--project-name", "hermes-ppo"]
    assert p.user_argv()[2:4] == ["--project-name", "hermes-ppo"]


def test_ppo_on_gpu_uses_only_the_algo_file_and_user_overrides_come_last():
    p = stack_params("ppo", "gpu", ROOT, extra_files=["my.yml"])
    assert p.files == ("compose.ppo.yml", "my.yml")


@pytest.mark.parametrize("algo,device", [("dpo", "cpu"), ("grpo", "tpu")])
def test_unknown_algo_or_device_is_refused(algo, device):
    with pytest.raises(ValueError):
        stack_params(algo, device, ROOT)


def test_up_waits_with_a_bounded_timeout_and_never_builds_implicitly():
    argv = up_argv(stack_params("grpo", "cpu", ROOT), ["atropos"], wait_timeout=90)
    assert argv[-8:] == ["up", "--detach", "--wait", "--wait-timeout", "90", "--no-build", "--remove-orphans",
                         "atropos"]


def test_an_up_removes_what_a_bigger_replica_count_left_and_one_beside_a_run_touches_nothing_else():
    """`make up REPLICAS=2` after a dry-run with 3 left inference-3 running outside the router, holding GPU 2."""
    params = stack_params("grpo", "cpu", ROOT)
    assert "--remove-orphans" in up_argv(params, ["atropos"])
    kept = up_argv(params, ["inference"], keep=True)
    assert "--remove-orphans" not in kept and kept[-3:] == ["--no-recreate", "--no-deps", "inference"]


def test_run_is_one_shot_without_tty_or_dependencies():
    argv = run_argv(stack_params("grpo", "cpu", ROOT), "trainer", ["python", "-m", "hermes_stack.trainer", "--dry-run"])
    i = argv.index("run")
    assert argv[i:] == ["run", "--rm", "--no-TTY", "--no-deps", "trainer", "python", "-m", "hermes_stack.trainer",
                        "--dry-run"]


def test_one_off_can_carry_a_name_so_the_controller_can_remove_it():
    argv = run_argv(stack_params("grpo", "cpu", ROOT), "trainer", ["true"], name="hermes-grpo-dry-run-7")
    assert argv[argv.index("run"):] == ["run", "--rm", "--no-TTY", "--no-deps", "--name", "hermes-grpo-dry-run-7",
                                        "trainer", "true"]


def test_network_probe_is_quiet_and_answers_false_when_inspect_fails():
    seen, echoed = [], []

    def runner(argv, env, capture):
        seen.append(argv)
        if argv[-1] != default_network("hermes-grpo"):
            raise CommandFailed(argv, 1, "Error: No such network")
        return "abc123"

    compose = Compose(stack_params("grpo", "cpu", ROOT), runner=runner, echo=echoed.append)
    assert compose.network_exists("hermes-grpo_default") and not compose.network_exists("other_default")
    assert seen[0] == ["docker", "network", "inspect", "--format", "{{.Id}}", "hermes-grpo_default"]
    assert echoed == []  # polled: not echoed


def test_down_removes_volumes_only_when_asked():
    p = stack_params("grpo", "cpu", ROOT)
    assert "--volumes" not in down_argv(p)
    assert down_argv(p, volumes=True)[-1] == "--volumes"


def test_logs_for_humans_is_relative_and_copy_pasteable():
    p = stack_params("grpo", "cpu", ROOT)
    assert printable(logs_argv(p, "trainer", user=True)) == \
        "docker compose --project-name hermes-grpo -f compose.grpo.yml -f compose.cpu.yml logs trainer"
    assert logs_argv(p, "trainer", follow=True, tail=50)[-4:] == ["--follow", "--tail", "50", "trainer"]


def test_secrets_in_env_never_reach_the_argv_or_repr():
    p = stack_params("grpo", "cpu", ROOT, env={"HERMES_INFERENCE_KEY": "sk-secret-value-1234"})
    for argv in (up_argv(p), config_argv(p), down_argv(p)):
        assert "sk-secret-value-1234" not in " ".join(argv)
    assert "sk-secret-value-1234" not in repr(p)


def test_runner_receives_argv_list_and_env_and_failures_carry_command_and_stderr():
    calls = []

    def fake(argv, env, capture):
        calls.append((argv, env, capture))
        raise CommandFailed(argv, 17, "line1\nboom: it broke\n")

    p = stack_params("grpo", "cpu", ROOT, env={"HERMES_INFERENCE_KEY": "k"})
    echoed = []
    compose = Compose(p, runner=fake, echo=echoed.append)
    with pytest.raises(CommandFailed) as failed:
        compose.down()
    argv, env, _capture = calls[0]
    assert isinstance(argv, list) and argv[:2] == ["docker", "compose"]
    assert env == {"HERMES_INFERENCE_KEY": "k"}
    assert failed.value.returncode == 17
    assert "boom: it broke" in str(failed.value) and "down" in str(failed.value)
    assert echoed == [printable(argv)]


def test_with_env_adds_variables_without_mutating():
    p = stack_params("grpo", "cpu", ROOT, env={"A": "1"})
    q = p.with_env(B="2")
    assert dict(q.env) == {"A": "1", "B": "2"} and dict(p.env) == {"A": "1"}


@pytest.mark.parametrize("text", [
    '{"Service":"atropos","State":"running"}\n{"Service":"inference","State":"running"}\n',
    '[{"Service":"atropos","State":"running"},{"Service":"inference","State":"running"}]',
])
def test_ps_json_lines_and_array_forms_both_parse(text):
    assert [r["Service"] for r in parse_ps(text)] == ["atropos", "inference"]


# ---- every docker/compose call has a timeout (issue 12) ----------------------------------------------------------

def test_every_kind_of_command_gets_a_timeout_and_only_a_followed_log_runs_unbounded():
    from hermes_stack.controller import compose as c

    p = stack_params("grpo", "cpu", ROOT)
    assert c.command_timeout(c.up_argv(p, ["atropos"], wait_timeout=900)) == 900 + c.UP_MARGIN_S
    assert c.command_timeout(c.build_argv(p)) == c.BUILD_S
    assert c.command_timeout(c.down_argv(p)) == c.DOWN_S
    assert c.command_timeout(c.exec_argv(p, "trainer", ["tail", "/data/metrics.jsonl"])) == c.EXEC_S
    assert c.command_timeout(c.ps_argv(p)) == c.QUICK_S
    assert c.command_timeout(c.config_argv(p)) == c.QUICK_S
    assert c.command_timeout(c.logs_argv(p, "trainer", tail=5)) == c.QUICK_S
    assert c.command_timeout(c.logs_argv(p, "trainer", follow=True)) is None
    assert c.command_timeout(c.docker_argv("network", "inspect", "x")) == c.QUICK_S
    # a service named like a verb does not change the kind of the command
    assert c.command_timeout(c.exec_argv(p, "trainer", ["logs"])) == c.EXEC_S


@pytest.mark.parametrize("how", ["run", "stream"])
def test_a_hung_command_is_stopped_and_the_error_names_it(monkeypatch, how):
    import sys
    import time

    from hermes_stack.controller import compose as c

    monkeypatch.setattr(c, "QUICK_S", 0.5)
    argv = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"]
    started = time.monotonic()
    with pytest.raises(c.CommandTimedOut) as caught:
        if how == "run":
            c._run(argv, {}, True)
        else:
            list(c._stream(argv, {}))
    assert time.monotonic() - started < 20
    assert "did not finish within 0.5 s" in str(caught.value)
    assert "import time" in str(caught.value) and "docker info" in str(caught.value)


def test_the_real_runner_reports_exit_code_and_stderr():
    import sys

    from hermes_stack.controller import compose as c

    with pytest.raises(c.CommandFailed) as caught:
        c._run([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"], {}, True)
    assert caught.value.returncode == 3 and "boom" in str(caught.value)
    assert c._run([sys.executable, "-c", "print('hi')"], {"X": "1"}, True).strip() == "hi"


# ---- the calls around compose go through its runner: provisioning scripts and preflight's probes ------------------

def test_scripts_and_preflight_probes_get_their_own_timeouts():
    from hermes_stack.controller import compose as c

    p = stack_params("grpo", "cpu", ROOT)
    assert c.command_timeout(["bash", "/repo/scripts/base-image.sh"]) == c.SCRIPT_S
    assert c.command_timeout(c.docker_argv("version", "--format", "{{.Server.Version}}")) == c.PROBE_S
    assert c.command_timeout(c.docker_argv("info", "--format", "{{json .Runtimes}}")) == c.PROBE_S
    assert c.command_timeout(["docker", "compose", "version", "--short"]) == c.PROBE_S
    assert c.command_timeout(c.cp_argv(p, "trainer:/data/metrics.jsonl", "/tmp/m")) == c.EXEC_S


def test_a_provisioning_script_gives_its_last_line_and_a_failure_names_the_script(tmp_path, monkeypatch):
    from hermes_stack.controller import compose as c
    from hermes_stack.errors import StackError

    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "ok.sh").write_text("echo building >&2\necho first\necho \"tag:$1\"\n")
    (tmp_path / "scripts" / "bad.sh").write_text("echo one >&2\necho 'no mmdebstrap' >&2\nexit 3\n")
    (tmp_path / "scripts" / "hang.sh").write_text("sleep 30\n")
    assert c.run_script(tmp_path, "ok.sh", "x") == "tag:x"
    with pytest.raises(StackError) as failed:
        c.run_script(tmp_path, "bad.sh")
    assert str(failed.value) == "scripts/bad.sh failed (exit 3): one | no mmdebstrap"
    monkeypatch.setattr(c, "SCRIPT_S", 0.5)
    with pytest.raises(StackError) as hung:
        c.run_script(tmp_path, "hang.sh")
    assert str(hung.value).startswith("`bash scripts/hang.sh` did not finish within 0.5 s and was stopped.")


def test_preflight_asks_docker_through_the_compose_runner(monkeypatch):
    from hermes_stack.controller import compose as c
    from hermes_stack.controller.preflight import SystemProbe

    seen = []

    def runner(argv, env, capture):
        seen.append(argv)
        if "info" in argv:
            raise c.CommandFailed(argv, 1, "Cannot connect to the Docker daemon\n", "")
        if "compose" in argv:
            raise c.CommandTimedOut(argv, c.PROBE_S)
        return "27.3.1\n"

    monkeypatch.setattr(c, "_run", runner)
    probe = SystemProbe()
    assert probe.run(["docker", "version", "--format", "{{.Server.Version}}"]) == (0, "27.3.1", "")
    assert probe.run(["docker", "info"]) == (1, "", "Cannot connect to the Docker daemon")
    code, _, err = probe.run(["docker", "compose", "version", "--short"])
    assert code == 124 and "did not finish within 20 s" in err
    assert [argv[:2] for argv in seen] == [["docker", "version"], ["docker", "info"], ["docker", "compose"]]


def test_a_command_past_its_timeout_is_killed_with_what_it_started(tmp_path, monkeypatch):
    """`docker compose` runs the compose plugin as the docker CLI's child: killing the CLI alone on a timeout left
    the plugin running (at 100 % CPU on a YAML alias bomb)."""
    import subprocess
    import sys as _sys
    import time

    from hermes_stack.controller import compose as compose_module

    pidfile = tmp_path / "child.pid"
    # The child does not hold the command's pipes (as the compose plugin's own children need not): _run returns
    # once the parent is killed, so the child is seen alive or dead right then, within its 60 s sleep.
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
              f" stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL);"
              f" open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    monkeypatch.setattr(compose_module, "command_timeout", lambda argv: 2)
    with pytest.raises(compose_module.CommandTimedOut):
        compose_module._run([_sys.executable, "-c", script], {}, capture=True)
    child = int(pidfile.read_text())
    for _ in range(50):  # SIGKILL is delivered at once; the zombie is reaped by its new parent
        state = subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True,
                               check=False).stdout.strip()
        if not state or state.startswith("Z"):
            break
        time.sleep(0.1)
    assert not state or state.startswith("Z"), f"the command's child {child} still runs ({state})"

"""The stdlib healthcheck: readiness rules with a fake HTTP fetch and a fake /proc."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from hermes_stack.health import NotReady, check, loopback, main, server_root, wait_for

ENV = {"HERMES_INFERENCE_URL": "http://inference:8001/v1", "HERMES_INFERENCE_KEY": "k",
       "HERMES_ATROPOS_URL": "http://atropos:8000"}


def fake(routes):
    seen = []

    def fetch(method, url, body, headers):
        seen.append((method, url, body, headers))
        return routes[(method, url)]

    fetch.seen = seen
    return fetch


def test_server_root_strips_the_v1_suffix_not_characters():
    assert server_root("http://inference:8001/v1") == "http://inference:8001"
    assert server_root("http://inference:8001/v1/") == "http://inference:8001"
    assert server_root("http://h:8001") == "http://h:8001"


def test_loopback_keeps_port_and_path():
    assert loopback("http://inference:8001/v1") == "http://127.0.0.1:8001/v1"


def test_atropos_ready_when_status_has_the_step():
    f = fake({("GET", "http://127.0.0.1:8000/status"): (200, {"current_step": 0, "queue_size": 0})})
    assert "step 0" in check("atropos", ENV, f)


def test_atropos_root_answer_alone_is_not_ready():
    f = fake({("GET", "http://127.0.0.1:8000/status"): (404, None)})
    with pytest.raises(NotReady, match="expected 200 with current_step"):
        check("atropos", ENV, f)


def test_inference_needs_a_listed_model_and_health_generate():
    f = fake({("GET", "http://127.0.0.1:8001/v1/models"): (200, {"data": [{"id": "tiny"}]}),
              ("GET", "http://127.0.0.1:8001/health_generate"): (200, {"status": "ok"})})
    assert "tiny generates" in check("inference", ENV, f)
    _method, url, _body, headers = f.seen[1]
    assert url.endswith("/health_generate") and headers["Authorization"] == "Bearer k"


def test_inference_that_lists_models_but_cannot_generate_is_not_ready():
    f = fake({("GET", "http://127.0.0.1:8001/v1/models"): (200, {"data": [{"id": "tiny"}]}),
              ("GET", "http://127.0.0.1:8001/health_generate"): (503, None)})
    with pytest.raises(NotReady, match="one token"):
        check("inference", ENV, f)


@pytest.mark.parametrize("answer,match", [
    ((200, {"data": []}), "no model yet"),
    ((401, None), "HERMES_INFERENCE_KEY does not match"),
    ((200, {"data": [{"id": "other"}]}), "not the configured model"),
])
def test_inference_model_list_failures(answer, match):
    env = ENV | {"HERMES_SERVED_MODEL_NAME": "tiny"}
    f = fake({("GET", "http://127.0.0.1:8001/v1/models"): answer})
    with pytest.raises(NotReady, match=match):
        check("inference", env, f)


def _marker(tmp_path, service, pid):
    ready = tmp_path / "ready"
    ready.mkdir(exist_ok=True)
    (ready / service).write_text(json.dumps({"pid": pid}))


def test_environment_ready_only_with_a_marker_of_a_live_process(tmp_path):
    env = ENV | {"HERMES_DATA_DIR": str(tmp_path)}
    with pytest.raises(NotReady, match="no readiness marker"):
        check("environment", env)
    _marker(tmp_path, "environment", os.getpid())
    assert f"pid {os.getpid()}" in check("environment", env)


def test_marker_of_a_dead_pid_is_stale(tmp_path):
    _marker(tmp_path, "environment", 2**22 + 12345)  # above pid_max: never a live process
    with pytest.raises(NotReady, match="stale marker"):
        check("environment", ENV | {"HERMES_DATA_DIR": str(tmp_path)})


def test_marker_older_than_its_process_is_stale(tmp_path):
    _marker(tmp_path, "environment", os.getpid())
    marker = tmp_path / "ready" / "environment"
    os.utime(marker, (1_000_000, 1_000_000))  # written in 1970, long before this process started
    with pytest.raises(NotReady, match="predates"):
        check("environment", ENV | {"HERMES_DATA_DIR": str(tmp_path)})


def test_trainer_needs_marker_and_inference_answering(tmp_path):
    _marker(tmp_path, "trainer", os.getpid())
    env = ENV | {"HERMES_DATA_DIR": str(tmp_path)}
    down = fake({("GET", "http://inference:8001/v1/models"): (503, None)})
    with pytest.raises(NotReady, match="expected 200"):
        check("trainer", env, down)
    up = fake({("GET", "http://inference:8001/v1/models"): (200, {"data": [{"id": "tiny"}]})})
    assert "inference answers" in check("trainer", env, up)


def test_main_exit_codes_and_one_stderr_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HERMES_DATA_DIR", str(tmp_path))
    assert main(["environment"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("environment not ready: no readiness marker")


def test_health_module_imports_only_the_stdlib():
    # The one package module it may import, service_defaults (the defaults it shares with ServiceEnv), imports nothing.
    package = Path(__file__).resolve().parents[2] / "hermes_stack"
    source = (package / "health.py").read_text()
    lines = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    imports = {line.split()[1].split(".")[0] for line in lines}
    assert imports <= {"__future__", "json", "os", "sys", "time", "urllib", "collections", "pathlib", "hermes_stack"}
    assert [line for line in lines if "hermes_stack" in line] == [
        "from hermes_stack import service_defaults as defaults"]
    assert not [line for line in (package / "service_defaults.py").read_text().splitlines()
                if line.startswith(("import ", "from "))]


class _Clock:
    """A fake monotonic clock that sleep() advances: waits are tested without waiting."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def test_wait_for_retries_a_not_ready_probe_until_it_passes():
    clock, answers = _Clock(), iter([NotReady("refused"), NotReady("refused"), "ready"])

    def probe():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_for(probe, 5.0, poll_s=0.2, clock=clock, sleep=clock.sleep) == "ready"
    assert clock.sleeps == [0.2, 0.2]


def test_wait_for_gives_up_at_the_deadline_with_the_last_reason():
    clock, calls = _Clock(), []

    def probe():
        calls.append(clock.now)
        raise NotReady(f"refused at {clock.now:.1f}")

    with pytest.raises(NotReady, match=r"refused at 1\.0 \(waited 1 s\)"):
        wait_for(probe, 1.0, poll_s=0.25, clock=clock, sleep=clock.sleep)
    assert calls == [0.0, 0.25, 0.5, 0.75, 1.0]  # never past the deadline


def test_wait_for_gives_up_at_once_when_waiting_cannot_help():
    clock, calls = _Clock(), []

    def probe():
        calls.append(clock.now)
        f = fake({("GET", "http://127.0.0.1:8001/v1/models"): (401, None)})
        return check("inference", ENV, f)

    with pytest.raises(NotReady, match="HERMES_INFERENCE_KEY does not match"):
        wait_for(probe, 60.0, clock=clock, sleep=clock.sleep)
    assert calls == [0.0]


def test_wait_for_without_a_wait_probes_once():
    clock = _Clock()

    def probe():
        raise NotReady("no marker")

    with pytest.raises(NotReady, match="^no marker$"):
        wait_for(probe, 0.0, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []


@pytest.mark.parametrize("argv", [["bogus"], ["atropos", "--wait"], ["atropos", "--wait", "x"],
                                  ["atropos", "--bogus", "1"], ["atropos", "--wait", "-1"]])
def test_main_refuses_bad_arguments_with_exit_1_not_dockers_reserved_2(argv, capsys):
    assert main(argv) == 1
    assert "usage: python -m hermes_stack.health" in capsys.readouterr().err


def _fake_proc(root: Path, start_ticks: int) -> Path:
    """A /proc with a PID 1 started `start_ticks` clock ticks after boot."""
    (root / "1").mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text("cpu  1 2 3\nbtime 1700000000\n")
    fields = ["S"] + ["0"] * 18 + [str(start_ticks)] + ["0"] * 10  # field 22 is the 20th after the comm
    (root / "1" / "stat").write_text("1 (docker-init) " + " ".join(fields))
    return root


def test_a_container_passes_afresh_once_and_is_held_from_its_second_pass_until_it_restarts(tmp_path):
    from hermes_stack.health import passed_before

    proc, state = _fake_proc(tmp_path / "proc", 500), tmp_path / "tmp"
    state.mkdir()
    assert passed_before("inference", state, proc) is False  # its first pass returns at once
    assert passed_before("inference", state, proc) is True
    assert passed_before("atropos", state, proc) is False  # per service
    _fake_proc(tmp_path / "proc", 900)  # the container restarted: a new PID 1
    assert passed_before("inference", state, proc) is False
    assert passed_before("inference", tmp_path / "absent", proc) is False  # no note can be kept: never held
    assert passed_before("inference", tmp_path / "absent", proc) is False


def test_a_held_probe_checks_every_poll_after_its_pass_until_its_hold_runs_out():
    from hermes_stack.health import hold

    clock, calls = _Clock(), []

    def probe():
        calls.append(clock.now)
        return f"ready at {clock.now:g}"

    assert hold(probe, "ready at 0", 20.0, poll_s=2.0, clock=clock, sleep=clock.sleep) == "ready at 20"
    assert calls == [2.0 * k for k in range(1, 11)]  # not again at 0: the pass it holds was that check


def test_a_hold_ends_at_its_deadline_not_its_length_after_a_slow_first_pass():
    from hermes_stack.health import hold

    clock, calls = _Clock(), []
    clock.now = 13.0  # the probe's first check took its wait and a request's timeout

    def probe():
        calls.append(clock.now)
        return "ready"

    hold(probe, "ready", 20.0, poll_s=2.0, clock=clock, sleep=clock.sleep)
    assert calls == [15.0, 17.0, 19.0]  # so a probe ends within max(wait, hold) + one check (compose's timeout)


def test_a_held_probe_fails_at_the_first_failed_check():
    from hermes_stack.health import hold

    clock, answers = _Clock(), iter(["ready", NotReady("no readiness marker")])

    def probe():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with pytest.raises(NotReady, match="no readiness marker"):
        hold(probe, "ready", 20.0, poll_s=2.0, clock=clock, sleep=clock.sleep)
    assert clock.now == 4.0  # seen within a poll, not at the end of the hold


@pytest.fixture
def held_main(tmp_path, monkeypatch):
    """main() with a PID 1 that passed nothing yet, checks that answer `state["answer"]`, and `hold` recorded."""
    from hermes_stack import health

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    state = {"answer": "ready", "held": []}

    def fake_check(service, env, url=None):
        if state["answer"] != "ready":
            raise NotReady(state["answer"])
        return f"{service} ready"

    monkeypatch.setattr(health, "check", fake_check)
    monkeypatch.setattr(health, "process_start_ticks", lambda pid, proc=None: 12345)
    monkeypatch.setattr(health, "time", SimpleNamespace(monotonic=lambda: 100.0))  # when main() started
    monkeypatch.setattr(health, "hold", lambda probe, answer, until: state["held"].append(until) or probe())
    return state


def test_main_holds_only_a_container_that_passed_before(held_main):
    assert main(["atropos", "--wait", "5", "--hold", "20"]) == 0 and held_main["held"] == []  # the first pass
    assert main(["atropos", "--wait", "5", "--hold", "20"]) == 0
    assert held_main["held"] == [120.0]  # until 20 s after the probe started, whatever its first check took
    assert main(["atropos", "--wait", "5"]) == 0 and held_main["held"] == [120.0]  # no --hold: never held


def test_a_failed_probe_forgets_the_pass_so_a_recovering_container_is_seen_healthy_at_once(held_main, tmp_path):
    assert main(["inference", "--hold", "20"]) == 0
    assert (tmp_path / "hermes-health-inference").is_file()
    held_main["answer"] = "GET /health_generate answered 503"
    assert main(["inference", "--hold", "20"]) == 1
    assert not (tmp_path / "hermes-health-inference").exists()
    held_main["answer"] = "ready"
    assert main(["inference", "--hold", "20"]) == 0 and held_main["held"] == []  # not held 20 s on its recovery


@pytest.mark.parametrize("hold_s", ["-1", "inf", "nan"])
def test_main_refuses_a_hold_that_is_not_a_finite_number_of_seconds(hold_s, capsys):
    assert main(["atropos", "--hold", hold_s]) == 1
    assert "usage: python -m hermes_stack.health" in capsys.readouterr().err

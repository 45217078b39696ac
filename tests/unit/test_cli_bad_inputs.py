"""Bad input to the commands other than `validate` (round 5, an exploratory sweep of ~250 mistakes on 2026-12-07):
`up`, `dry-run`, `render`, `logs`, `report`, `mcp` and `test-inference`.

Same contract as test_validate_bad_inputs.py: one exact line, exit 2, nothing started (no call reached the compose
choke point) and, for `up` and `dry-run`, nothing written into the project either (no .env, no .hermes state).
Before, `--wait-timeout 0` and a missing `-f` file went on to the build and `docker compose up`, and the others ended
in a traceback or docker's own exit 1.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_validate_bad_inputs import error_lines

from hermes_stack.controller.cli import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("isolated_secrets")
F_HINT = "Hint: -f names a compose file layered over the stack's, e.g. -f compose.override.yml (paths from the checkout)"
WAIT = ("command line: --wait-timeout: found {n}, expected seconds from 1 to 86400 (a day; default 900). Hint: it bounds "
        "how long `up --wait` waits for the services to be healthy")
SERVICES = "gateway-check, atropos, inference, trainer, environment"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A checkout's configs and compose files, the working directory, and no key file (offline)."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    for compose_file in ROOT.glob("compose.*.yml"):
        shutil.copy(compose_file, tmp_path / compose_file.name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HERMES_ROOT", raising=False)
    # No docker binary for these tests: a check that regressed must fail here, not create a volume or build.
    (tmp_path / "no-docker").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-docker"))
    return tmp_path


def refused(argv: list[str], capsys, compose_calls, project: Path) -> list[str]:
    """The error lines of a command that must be refused: exit 2, no compose call, nothing written."""
    before = sorted(p.name for p in project.iterdir() if p.name != "no-docker")
    rc = main(argv)
    lines = error_lines(capsys.readouterr().err)
    assert rc == 2, lines
    assert compose_calls == []
    assert sorted(p.name for p in project.iterdir() if p.name != "no-docker") == before  # no .env, no .hermes/
    return lines


@pytest.mark.parametrize("command", ["up", "dry-run", "render"])
@pytest.mark.parametrize("seconds", [0, -5])
def test_a_wait_timeout_below_one_second_is_refused_before_anything(command, seconds, project, capsys,
                                                                     compose_calls):
    """compose reads 0 or less as no wait at all."""
    assert refused([command, "--device", "cpu", "--wait-timeout", str(seconds)], capsys, compose_calls,
                   project) == [WAIT.format(n=seconds)]


@pytest.mark.parametrize("command", ["up", "dry-run", "render"])
def test_a_missing_override_file_is_refused_before_anything(command, project, capsys, compose_calls):
    assert refused([command, "--device", "cpu", "-f", "missing.yml"], capsys, compose_calls, project) == [
        (f"command line: -f: found missing.yml (no such file: {project / 'missing.yml'}), expected a compose override "
        f"file. {F_HINT}")]


def test_an_empty_override_name_is_refused_as_empty(project, capsys, compose_calls):
    """`-f ''` (an unset shell variable) was "found  (not a file)": the project folder itself."""
    assert refused(["dry-run", "--device", "cpu", "-f", ""], capsys, compose_calls, project) == [
        f"command line: -f: found '' (an empty name), expected a compose override file. {F_HINT}"]


@pytest.mark.parametrize(("content", "found"), [
    ("root:x:0:0:root:/root:/bin/bash\n", "YAML whose top is not a mapping"),
    ("services: [unclosed\n", "not readable YAML: ParserError"),
    # compose refuses a key given twice ("mapping key ... already defined", exit 1); PyYAML kept the last
    ("services:\n  trainer: {}\n  inference: {}\n  trainer:\n    image: x\n",
     "mapping key 'trainer' given twice: lines 2 and 4"),
    # a "billion laughs": compose expanded it at 100 % CPU past our timeout, and kept running after it
    ("a: &a [x, x, x, x, x, x, x, x, x]\n"
     + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
     + "services: {}\n", "YAML aliases that expand to more than 100000 values"),
])
def test_an_override_that_is_no_compose_file_is_refused(content, found, project, capsys, compose_calls):
    (project / "bad.yml").write_text(content)
    expected = ("a compose override file (services:, volumes:, … at its top)" if "top is not a mapping" in found
                else "a compose override file")
    assert refused(["dry-run", "--device", "cpu", "-f", "bad.yml"], capsys, compose_calls, project) == [
        f"command line: -f: found bad.yml ({found}), expected {expected}. {F_HINT}"]


def test_an_override_with_composes_own_tags_is_a_compose_file(project):
    """`!reset` and `!override` are compose's YAML tags (compose.cpu.yml uses them): such a file must pass."""
    from hermes_stack.controller.compose import override_file_problem

    (project / "mine.yml").write_text("services:\n  trainer:\n    ulimits: !reset {}\n    ports: !override []\n")
    assert override_file_problem(project, "mine.yml") is None
    assert override_file_problem(project, "compose.cpu.yml") is None


def test_an_override_naming_a_service_the_stack_lacks_is_refused_with_the_near_one(project, capsys, compose_calls):
    """`trainr:` with only an environment: compose refused it at render or up, exit 1, in its own words ("has
    neither an image nor a build context"). A new service with an image, and the replicas' own, still pass."""
    from hermes_stack.controller.compose import override_file_problem

    (project / "typo.yml").write_text("services:\n  trainr:\n    environment:\n      X: '1'\n")
    assert refused(["dry-run", "--device", "cpu", "-f", "typo.yml"], capsys, compose_calls, project) == [
        ("command line: -f: found typo.yml (service 'trainr': none of the stack's, and no image or build), expected "
        "one of the stack's services (gateway-check, atropos, inference, trainer, environment), or a new one with an "
        "image. Hint: did you mean trainer?")]
    (project / "own.yml").write_text("services:\n  gateway:\n    image: x/y:1\n  inference-2:\n    cpus: 1\n")
    assert override_file_problem(project, "own.yml") is None


def test_render_prints_the_wait_timeout_up_uses(project, capsys, compose_calls, monkeypatch):
    """`render` says it prints the exact commands `up` runs; it printed compose.up's 600 s where `up` waits 900."""
    from hermes_stack.controller import compose

    monkeypatch.setattr(compose.Compose, "config", lambda self: "services: {}\n")
    assert main(["render", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("--wait-timeout 900 ") == 2 and "--wait-timeout 600" not in out
    # pasted by hand they stop at the secrets (a review): the output says so, and which make command runs them
    assert "typed as they are, they stop at the first secret; make up ALGO=grpo runs them)" in out
    assert main(["render", "--device", "cpu", "--wait-timeout", "300"]) == 0
    assert capsys.readouterr().out.count("--wait-timeout 300 ") == 2


@pytest.mark.parametrize(("service", "hint"), [("foo", "leave it out for every service's log"),
                                               ("Trainer", "did you mean trainer?"),
                                               ("envirnoment", "did you mean environment?")])
def test_logs_of_a_service_the_stack_has_not_is_refused(service, hint, project, capsys, compose_calls):
    """docker said "no such service" twice, with exit 1 and no names."""
    assert refused(["logs", service], capsys, compose_calls, project) == [
        f"command line: SERVICE: found {service!r}, expected one of {SERVICES}. Hint: {hint}"]


def test_logs_with_a_negative_tail_is_refused(project, capsys, compose_calls):
    assert refused(["logs", "trainer", "--tail", "-5"], capsys, compose_calls, project) == [
        ("command line: --tail: found -5, expected a number of lines, 0 or more. Hint: e.g. --tail 100; leave it out "
        "for the whole log")]


def test_logs_of_a_service_an_override_adds_is_let_through(project, capsys, compose_calls, monkeypatch):
    """A service the user's own -f file declares (remembered by `up`) is the stack's too."""
    from hermes_stack.controller import stack_state

    (project / "extra.yml").write_text("services:\n  sidecar:\n    image: busybox\n")
    plan = stack_state.Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml", "extra.yml"))
    monkeypatch.setattr("hermes_stack.controller.commands.stack.load_plan", lambda state, algo: plan)
    monkeypatch.setattr("hermes_stack.controller.compose.Compose.ps", lambda self: [{"Service": "sidecar"}])
    assert main(["logs", "sidecar"]) == 0
    assert compose_calls and compose_calls[0][1][-1] == "sidecar"


@pytest.mark.parametrize(("argv", "expected"), [
    (["--out", "/etc/hostname"], ("command line: --out: found /etc/hostname (a file), expected a folder for report.png "
                                 "and report.html. Hint: name a folder; it is made when missing")),
    (["--out", "/proc/nope"], ("command line: --out: found /proc/nope (No such file or directory), expected a folder "
                              "this user can write. Hint: name another folder with --out")),
])
def test_report_to_a_place_it_cannot_write_is_one_line(argv, expected, project, capsys, compose_calls):
    metrics = project / "m.jsonl"
    metrics.write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    assert refused(["report", "--metrics", str(metrics), *argv], capsys, compose_calls, project) == [expected]


@pytest.mark.parametrize("content", ['{"step": null}\n', "not a metrics file\n", '{"step": "3"}\n'])
def test_report_of_a_file_without_step_records_is_bad_input(content, project, capsys, compose_calls):
    """Not "no training step yet (start with: make up)": the user named a file that is no trainer's metrics."""
    metrics = project / "weird.jsonl"
    metrics.write_text(content)
    assert refused(["report", "--metrics", str(metrics)], capsys, compose_calls, project) == [
        (f"command line: --metrics: found {metrics} (no step records), expected a trainer's metrics.jsonl (one JSON "
        "object with a \"step\" per line). Hint: the running stack's is read when --metrics is left out")]


@pytest.mark.parametrize("port", ["99999", "-1", "0"])
def test_mcp_with_a_port_out_of_range_is_one_line(port, project, capsys, compose_calls):
    """bind() ended it in a 40-line traceback."""
    assert refused(["mcp", "--transport", "http", "--port", port], capsys, compose_calls, project) == [
        (f"command line: --port: found {port}, expected a TCP port from 1 to 65535 (default 8765). Hint: pick a free "
        "one, e.g. --port 8765")]


def test_mcp_with_a_wait_timeout_below_one_second_is_refused(project, capsys, compose_calls):
    """Every run the tools start would get it."""
    assert refused(["mcp", "--wait-timeout", "0"], capsys, compose_calls, project) == [WAIT.format(n=0)]


@pytest.mark.parametrize("url", ["localhost:8001/v1", "http://[::1/v1", "http://127.0.0.1:18991",
                                 "http://127.0.0.1:99999/v1", "ftp://127.0.0.1:8001/v1"])
def test_test_inference_with_a_local_url_that_is_no_v1_url_is_refused(url, project, capsys, compose_calls):
    assert refused(["test-inference", "--algo", "grpo", "--local", url], capsys, compose_calls, project) == [
        (f"command line: --local: found {url!r}, expected an http(s) URL ending in /v1. Hint: e.g. --local "
        "http://localhost:8001/v1 (the stack's inference service)")]


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_test_inference_with_a_tokenizer_that_is_no_folder_is_refused(kind, project, capsys, compose_calls):
    """transformers printed ~90 lines about a repo id from the child process."""
    given = project / "tok"
    if kind == "a file":
        given.write_text("{}")
    found = "no such folder" if kind == "missing" else "a file, not a folder"
    assert refused(["test-inference", "--algo", "grpo", "--tokenizer", str(given)], capsys, compose_calls,
                   project) == [
        (f"command line: --tokenizer: found {str(given)!r} ({found}), expected a local tokenizer folder "
        "(tokenizer.json, tokenizer_config.json) or a hub id. Hint: leave it out to use the inference model's "
        "tokenizer")]


def test_mcp_with_a_model_the_catalog_has_not_is_refused_at_start(project, capsys, compose_calls):
    """As `up --model` does; before, the server started and every run it began failed later."""
    assert refused(["mcp", "--model", "foo"], capsys, compose_calls, project) == [
        ("command line: --model: found 'foo', expected one of smollm2-135m. Hint: another model: set "
        "inference.model_path in settings_<algo>.json to a local model directory (or a hub id on GPU)")]


def test_a_multi_document_override_is_a_compose_file(project):
    """compose reads several YAML documents, `---` apart, as one file."""
    from hermes_stack.controller.compose import override_file_problem

    (project / "two.yml").write_text("services:\n  trainer:\n    environment: {A: '1'}\n---\nvolumes: {}\n")
    assert override_file_problem(project, "two.yml") is None


@pytest.mark.parametrize("content", ["services: [unclosed\n", "services:\n  - trainer: {}\n", "services: trainer\n"])
def test_a_broken_file_in_the_saved_plan_does_not_break_logs(content, project):
    """A user's -f file edited after `up`: the service list skips it (compose itself reports the file)."""
    from hermes_stack.controller.compose import compose_services

    (project / "edited.yml").write_text(content)
    assert compose_services(project, ["compose.grpo.yml", "edited.yml"]) == [
        "gateway-check", "atropos", "inference", "trainer", "environment"]


def test_logs_of_a_replica_or_the_router_is_let_through(project, capsys, compose_calls, monkeypatch):
    """REPLICAS=3: the override `up` writes and the plan it saves name inference-2, inference-3 and the router."""
    from hermes_stack.controller.replicas import write_override
    from hermes_stack.controller.stack_state import STATE_DIR, Plan, save_plan

    monkeypatch.setattr("hermes_stack.controller.compose.Compose.ps", lambda self: [{"Service": "router"}])

    extra = write_override(project, "grpo", "cpu", 3)
    save_plan(project / STATE_DIR, Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml", extra)))
    for service in ("inference-2", "inference-3", "router"):
        compose_calls.clear()
        assert main(["logs", "--algo", "grpo", service]) == 0, capsys.readouterr().err
        assert compose_calls and compose_calls[0][1][-1] == service


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_environments_of_a_root_that_is_no_folder_is_refused(kind, project, capsys, compose_calls):
    """A typo'd --root listed the built-ins with a notice and exit 0, as if the checkout had no environments."""
    root = project / "no-such-checkout"
    if kind == "file":
        root = project / "compose.grpo.yml"
    state = "no such folder" if kind == "missing" else "a file"
    assert refused(["environments", "--root", str(root)], capsys, compose_calls, project) == [
        (f"command line: --root: found {root} ({state}), expected the project folder holding environments/. Hint: "
        "leave --root out to use this folder, or name the checkout")]


def test_environments_under_a_hermes_root_that_is_no_folder_is_refused(project, capsys, compose_calls, monkeypatch):
    monkeypatch.setenv("HERMES_ROOT", str(project / "typo"))
    assert refused(["environments"], capsys, compose_calls, project) == [
        (f"(environment): HERMES_ROOT: found {project / 'typo'} (no such folder), expected the project folder holding "
         "environments/. Hint: unset it to use this folder, or name the checkout")]


def test_logs_status_and_down_with_no_stack_say_so(project, capsys, compose_calls, monkeypatch):
    """With no containers `logs` printed nothing and exited 0, `down VOLUMES=1` said "stopped; volumes removed", and
    `status` after `down` did not say the run was still on the volume (a lifecycle sweep, 2026-12-07)."""
    from hermes_stack.controller import compose

    monkeypatch.setattr(compose.Compose, "ps", lambda self: [])
    volume = {"there": False}

    def docker(self, args):
        if args[:2] == ["volume", "inspect"] and not volume["there"]:
            raise compose.CommandFailed(["docker", *args], 1, "Error: No such volume")
        return ""

    monkeypatch.setattr(compose.Compose, "docker", docker)
    assert main(["logs", "--algo", "grpo", "trainer"]) == 0
    assert capsys.readouterr().out.strip() == ("hermes-grpo: no containers, so no logs (start with: make up "
                                               "ALGO=grpo)")
    assert main(["down", "--algo", "grpo", "--volumes"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "hermes-grpo: nothing to stop (no containers, no volume)"
    volume["there"] = True
    assert main(["status", "--algo", "grpo"]) == 0
    assert capsys.readouterr().out.strip() == (
        "hermes-grpo: no containers; its run is on the kept volume (make report ALGO=grpo draws it; make up ALGO=grpo "
        "resumes it)")


def test_render_leaves_the_override_of_the_stack_up_started(project, capsys, compose_calls, monkeypatch):
    """`render REPLICAS=1` removed .hermes/replicas-grpo.yml, which the last up's plan still named: `status`, `logs`
    and `down` of that 2-replica stack then failed on a file that was gone. Render writes its own copy, and prints
    the commands with it (they work as typed) and the name up writes it to."""
    from hermes_stack.controller import compose
    from hermes_stack.controller.replicas import write_override

    monkeypatch.setattr(compose.Compose, "config", lambda self: "services: {}\n")
    ups = write_override(project, "grpo", "cpu", 2)
    before = (project / ups).read_text()
    assert main(["render", "--device", "cpu", "--replicas", "1"]) == 0
    assert (project / ups).read_text() == before and ".hermes/replicas-grpo.yml" not in capsys.readouterr().out
    assert main(["render", "--device", "cpu", "--replicas", "3"]) == 0
    out = capsys.readouterr().out
    assert (project / ups).read_text() == before
    assert out.count(f"-f {project}/.hermes/render/replicas-grpo.yml ") == 2
    assert (project / ".hermes/render/replicas-grpo.yml").is_file()
    assert "# (up writes the same override to .hermes/replicas-grpo.yml)" in out


def test_status_and_logs_after_down_name_the_replica_count_to_resume_with(project, capsys, compose_calls,
                                                                          monkeypatch):
    """After `make down` of a REPLICAS=2 run, status said `make up ALGO=grpo resumes it`: one replica, another
    stack than the one stopped."""
    from hermes_stack.controller import compose
    from hermes_stack.controller.compose import stack_files
    from hermes_stack.controller.replicas import write_override
    from hermes_stack.controller.stack_state import Plan, save_plan

    monkeypatch.setattr(compose.Compose, "ps", lambda self: [])
    monkeypatch.setattr(compose.Compose, "docker", lambda self, args: "")  # the volume is there
    save_plan(project / ".hermes", Plan("grpo", "cpu", stack_files("grpo", "cpu", [write_override(project, "grpo",
                                                                                                   "cpu", 2)])))
    assert main(["status", "--algo", "grpo"]) == 0
    assert capsys.readouterr().out.strip().endswith("make up ALGO=grpo REPLICAS=2 resumes it)")
    assert main(["logs", "--algo", "grpo"]) == 0
    assert capsys.readouterr().out.strip().endswith("(start with: make up ALGO=grpo REPLICAS=2)")
    write_override(project, "grpo", "cpu", 1)  # a later one-replica up removed it: one replica, no REPLICAS
    assert main(["status", "--algo", "grpo"]) == 0
    assert capsys.readouterr().out.strip().endswith("make up ALGO=grpo resumes it)")


def test_a_second_down_says_nothing_was_stopped_and_names_the_other_stack_still_running(project, capsys,
                                                                                       compose_calls, monkeypatch):
    """up grpo, up ppo, then `make down` twice: both said "hermes-ppo stopped; volumes kept" (the volume was there),
    and hermes-grpo ran on unmentioned, with .env gone."""
    from hermes_stack.controller import compose
    from hermes_stack.controller.compose import project_of
    from hermes_stack.controller.stack_state import Plan, save_plan

    save_plan(project / ".hermes", Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml")))
    save_plan(project / ".hermes", Plan("ppo", "cpu", ("compose.ppo.yml", "compose.cpu.yml")))
    running = {"hermes-grpo"}
    monkeypatch.setattr(compose.Compose, "ps", lambda self: [{"Service": "trainer"}]
                        if project_of(self.params) in running else [])
    monkeypatch.setattr(compose.Compose, "docker", lambda self, args: "")  # every volume is there
    monkeypatch.setattr(compose.Compose, "down", lambda self, volumes=False: "")
    assert main(["down"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-2:] == [
        "hermes-ppo: nothing to stop (no containers); its run stays on the kept volume",
        "hermes-grpo still runs: make down ALGO=grpo stops it"]
    running.clear()
    assert main(["down", "--algo", "grpo", "--volumes"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "hermes-grpo: no containers; volumes removed"


def test_down_with_volumes_of_a_named_run_sends_the_algorithms_commands_back_to_the_default_stack(
        project, capsys, compose_calls, monkeypatch):
    """After `HERMES_PROJECT_NAME=hermes-grpo-2 make up` (the refusal's hint) and `make down ALGO=grpo VOLUMES=1`,
    `make status ALGO=grpo` kept reading the deleted hermes-grpo-2, not the hermes-grpo run on its kept volume; and
    with HERMES_PROJECT_NAME given for one command, the printed make commands reached the last up's project."""
    from hermes_stack.controller import compose
    from hermes_stack.controller.stack_state import Plan, load_plan, save_plan

    save_plan(project / ".hermes", Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml"), "hermes-grpo-2"))
    monkeypatch.setattr(compose.Compose, "ps", lambda self: [])
    monkeypatch.setattr(compose.Compose, "docker", lambda self, args: "")  # every volume is there
    monkeypatch.setattr(compose.Compose, "down", lambda self, volumes=False: "")
    assert main(["down", "--algo", "grpo", "--volumes"]) == 0
    assert load_plan(project / ".hermes", "grpo").project is None  # the default stack's again
    save_plan(project / ".hermes", Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml"), "hermes-grpo-2"))
    monkeypatch.setenv("HERMES_PROJECT_NAME", "hermes-grpo")
    capsys.readouterr()
    assert main(["status", "--algo", "grpo"]) == 0
    assert capsys.readouterr().out.strip() == ("hermes-grpo: no containers; its run is on the kept volume (make report "
                                               "ALGO=grpo draws it; make up ALGO=grpo resumes it)")
    monkeypatch.delenv("HERMES_PROJECT_NAME")
    assert main(["status", "--algo", "grpo"]) == 0
    assert capsys.readouterr().out.strip() == (
        "hermes-grpo-2: no containers; its run is on the kept volume (HERMES_PROJECT_NAME=hermes-grpo-2 make report "
        "ALGO=grpo draws it; HERMES_PROJECT_NAME=hermes-grpo-2 make up ALGO=grpo resumes it)")


def test_status_after_down_names_one_replica_where_the_settings_ask_for_more(project, capsys, compose_calls,
                                                                            monkeypatch):
    """A run of REPLICAS=1 under settings that say 2: the `make up ALGO=grpo` status printed would start 2."""
    from hermes_stack.controller import compose
    from hermes_stack.controller.stack_state import Plan, save_plan

    settings = project / "configs" / "settings_grpo.json"
    data = json.loads(settings.read_text())
    data["inference"]["replicas"] = 2
    settings.write_text(json.dumps(data))
    save_plan(project / ".hermes", Plan("grpo", "cpu", ("compose.grpo.yml", "compose.cpu.yml")))
    monkeypatch.setattr(compose.Compose, "ps", lambda self: [])
    monkeypatch.setattr(compose.Compose, "docker", lambda self, args: "")  # the volume is there
    assert main(["status", "--algo", "grpo"]) == 0
    assert capsys.readouterr().out.strip().endswith("make up ALGO=grpo REPLICAS=1 resumes it)")


def test_an_override_nested_past_pythons_limit_is_refused_not_a_crash(project, capsys, compose_calls):
    (project / "deep.yml").write_text("services: " + "[" * 3000 + "]" * 3000 + "\n")
    assert refused(["dry-run", "--device", "cpu", "-f", "deep.yml"], capsys, compose_calls, project) == [
        f"command line: -f: found deep.yml (YAML nested too deeply to read), expected a compose override file. {F_HINT}"]

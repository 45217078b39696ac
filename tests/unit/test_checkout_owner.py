"""Two checkouts on one machine keep separate runs (issue 25): a marker volume names the checkout that owns the
project's run and the containers carry compose's working directory, so a second checkout's `up` (which would resume the first one's
checkpoints) and its `down --volumes` (which would delete them) are refused with one line naming the owner."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_stack.controller import checkout_owner as co
from hermes_stack.controller.cli import main

A, B = "/home/u/hermes", "/home/u/hermes-copy"
THERE = {"exists": lambda _d: True}  # the other checkout's directory is still on this machine


def fake_docker(volume_owner: str | None, dirs: list[str]):
    asked = []

    def run(argv):
        asked.append(list(argv))
        if argv[:3] == ["docker", "volume", "inspect"]:
            return (0, volume_owner, "") if volume_owner is not None else (1, "", "Error: No such volume")
        if argv[:2] == ["docker", "ps"]:
            return 0, "\n".join(dirs), ""
        return 1, "", "unexpected"

    return run, asked


def test_this_checkouts_own_run_or_none_passes():
    assert co.owner_problem("hermes-grpo", "grpo", A, A, [A], **THERE) is None
    assert co.owner_problem("hermes-grpo", "grpo", A, None, [], **THERE) is None
    assert co.owner_problem("hermes-grpo", "grpo", A, None, [A + "/"], **THERE) is None  # the same directory, written twice


def test_a_volume_made_by_another_checkout_refuses_up_naming_it():
    problem = co.owner_problem("hermes-grpo", "grpo", B, A, [], **THERE)
    assert problem.line() == (
        "hermes-grpo (data volume hermes-grpo_hermes-data): checkout: found the run of /home/u/hermes, expected a run "
        "of this checkout (/home/u/hermes-copy). Hint: `HERMES_PROJECT_NAME=hermes-grpo-hermes-copy make up "
        "ALGO=grpo` runs this checkout's own stack beside it (its own volume; while that one runs, other host ports too: [atropos] api_port, inference.port); `make down ALGO=grpo` in "
        "/home/u/hermes stops that one")


def test_containers_started_in_another_checkout_refuse_too():
    assert co.owner_problem("hermes-ppo", "ppo", B, None, [A], **THERE) is not None


def test_down_volumes_in_another_checkout_names_where_to_run_it():
    problem = co.owner_problem("hermes-grpo", "grpo", B, A, [], action="down", **THERE)
    assert problem.line() == (
        "hermes-grpo (data volume hermes-grpo_hermes-data): checkout: found the run of /home/u/hermes, expected a "
        "volume of this checkout (/home/u/hermes-copy) to delete. Hint: `make down ALGO=grpo VOLUMES=1` deletes "
        "only this checkout's run; run it in /home/u/hermes to delete that one")


def test_docker_is_asked_read_only_for_the_marker_and_the_containers():
    run, asked = fake_docker(A, [A])
    assert co.probe_owners("hermes-grpo", run) == (A, [A])
    assert asked == [["docker", "volume", "inspect", "hermes-grpo_checkout", "--format",
                      '{{index .Labels "io.hermes-stack.checkout"}}'],
                     ["docker", "ps", "-a", "--filter", "label=com.docker.compose.project=hermes-grpo", "--format",
                      '{{.Label "com.docker.compose.project.working_dir"}}']]
    run, _ = fake_docker(None, [])  # no marker (a run from before markers, or none): adopted as before
    assert co.probe_owners("hermes-grpo", run) == (None, [])


def test_a_checkout_that_is_gone_owns_nothing():
    assert co.owner_problem("hermes-grpo", "grpo", B, A, [A], exists=lambda _d: False) is None


def test_up_claims_a_run_once_and_down_volumes_releases_it(tmp_path):
    calls = []

    def run(argv):
        calls.append(list(argv))
        return (1, "", "no such volume") if argv[2] == "inspect" else (0, "", "")

    co.claim("hermes-grpo", tmp_path, run)
    assert calls[-1] == ["docker", "volume", "create", "--label",
                         f"io.hermes-stack.checkout={tmp_path.resolve()}", "hermes-grpo_checkout"]
    mine, _ = fake_docker(str(tmp_path.resolve()), [])
    calls.clear()
    co.claim("hermes-grpo", tmp_path, lambda argv: calls.append(argv) or mine(argv))  # already this checkout's
    assert [argv[2] for argv in calls] == ["inspect", "-a"]
    gone, _ = fake_docker("/gone/checkout", [])
    calls.clear()
    co.claim("hermes-grpo", tmp_path, lambda argv: calls.append(argv) or gone(argv))  # a stale owner: replaced
    assert calls[-2:] == [["docker", "volume", "rm", "-f", "hermes-grpo_checkout"],
                          ["docker", "volume", "create", "--label", f"io.hermes-stack.checkout={tmp_path.resolve()}",
                           "hermes-grpo_checkout"]]
    co.release("hermes-grpo", run)
    assert calls[-1] == ["docker", "volume", "rm", "-f", "hermes-grpo_checkout"]


def test_the_compose_files_keep_the_data_volume_definition_unchanged():
    """Compose 2.40 asks "Recreate (data will be lost)?" for a volume whose definition changed since it was made:
    the owner lives in a marker volume, never in hermes-data's definition."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    assert yaml.safe_load((root / "compose.base.yml").read_text())["volumes"]["hermes-data"] == {}


@pytest.mark.usefixtures("isolated_secrets")
def test_down_volumes_of_another_checkouts_run_exits_2_and_deletes_nothing(tmp_path, monkeypatch, capsys,
                                                                          compose_calls):
    from hermes_stack.controller import compose

    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    monkeypatch.delenv("HERMES_PROJECT_NAME", raising=False)
    first = tmp_path / "first-checkout"
    first.mkdir()
    run, _ = fake_docker(str(first), [])
    monkeypatch.setattr(compose, "probe", run)
    assert main(["down", "--algo", "grpo", "--volumes"]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        "error: " + co.owner_problem("hermes-grpo", "grpo", str(Path(tmp_path).resolve()), str(first), [], "down").line()]
    assert compose_calls == []  # `compose down --volumes` never ran


@pytest.mark.usefixtures("isolated_secrets")
def test_down_of_another_checkouts_running_stack_exits_2_and_stops_nothing(tmp_path, monkeypatch, capsys,
                                                                          compose_calls):
    """Two checkouts with the same HERMES_PROJECT_NAME: `up` and `down VOLUMES=1` were refused in the second, but a
    plain `down` there stopped the first checkout's running stack (a lifecycle sweep, 2026-12-07)."""
    from hermes_stack.controller import compose

    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    monkeypatch.delenv("HERMES_PROJECT_NAME", raising=False)
    first = tmp_path / "first-checkout"
    first.mkdir()
    run, _ = fake_docker(str(first), [str(first)])
    monkeypatch.setattr(compose, "probe", run)
    assert main(["down", "--algo", "grpo"]) == 2
    ours = str(Path(tmp_path).resolve())
    line = co.owner_problem("hermes-grpo", "grpo", ours, str(first), [str(first)], "stop").line()
    assert capsys.readouterr().err.splitlines()[-1] == "error: " + line
    assert f"run `make down ALGO=grpo` in {first} to stop that one" in line
    assert compose_calls == []  # `compose down` never ran

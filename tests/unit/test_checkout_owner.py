"""Two checkouts on one machine keep separate runs (issue 25): the data volume carries the checkout that made it
and the containers compose's working directory, so a second checkout's `up` (which would resume the first one's
checkpoints) and its `down --volumes` (which would delete them) are refused with one line naming the owner."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_stack import checkout_owner as co
from hermes_stack.cli import main

A, B = "/home/u/hermes", "/home/u/hermes-copy"


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
    assert co.owner_problem("hermes-grpo", "grpo", A, A, [A]) is None
    assert co.owner_problem("hermes-grpo", "grpo", A, None, []) is None
    assert co.owner_problem("hermes-grpo", "grpo", A, None, [A + "/"]) is None  # the same directory, written twice


def test_a_volume_made_by_another_checkout_refuses_up_naming_it():
    problem = co.owner_problem("hermes-grpo", "grpo", B, A, [])
    assert problem.line() == (
        "hermes-grpo (data volume hermes-grpo_hermes-data): checkout: found the run of /home/u/hermes, expected a run "
        "of this checkout (/home/u/hermes-copy). Hint: `HERMES_PROJECT_NAME=hermes-grpo-hermes-copy make up "
        "ALGO=grpo` runs this checkout's own stack beside it (its own volume); `make down ALGO=grpo` in "
        "/home/u/hermes stops that one")


def test_containers_started_in_another_checkout_refuse_too():
    assert co.owner_problem("hermes-ppo", "ppo", B, None, [A]) is not None


def test_down_volumes_in_another_checkout_names_where_to_run_it():
    problem = co.owner_problem("hermes-grpo", "grpo", B, A, [], action="down")
    assert problem.line() == (
        "hermes-grpo (data volume hermes-grpo_hermes-data): checkout: found the run of /home/u/hermes, expected a "
        "volume of this checkout (/home/u/hermes-copy) to delete. Hint: `make down ALGO=grpo VOLUMES=1` deletes "
        "only this checkout's run; run it in /home/u/hermes to delete that one")


def test_docker_is_asked_read_only_for_the_volume_label_and_the_containers():
    run, asked = fake_docker(A, [A])
    assert co.probe_owners("hermes-grpo", run) == (A, [A])
    assert asked == [["docker", "volume", "inspect", "hermes-grpo_hermes-data", "--format",
                      '{{index .Labels "io.hermes-stack.checkout"}}'],
                     ["docker", "ps", "-a", "--filter", "label=com.docker.compose.project=hermes-grpo", "--format",
                      '{{.Label "com.docker.compose.project.working_dir"}}']]
    run, _ = fake_docker("<no value>", [])  # a volume made before the label: adopted as before
    assert co.probe_owners("hermes-grpo", run) == (None, [])


def test_up_passes_the_checkout_to_compose_for_the_volume_label(tmp_path, monkeypatch):
    from hermes_stack.compose_env import compose_env

    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    assert compose_env(None, "k", None)[co.CHECKOUT_ENV] == str(tmp_path.resolve())


@pytest.mark.usefixtures("isolated_secrets")
def test_down_volumes_of_another_checkouts_run_exits_2_and_deletes_nothing(tmp_path, monkeypatch, capsys,
                                                                          compose_calls):
    from hermes_stack import compose

    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    monkeypatch.delenv("HERMES_PROJECT_NAME", raising=False)
    run, _ = fake_docker(A, [])
    monkeypatch.setattr(compose, "probe", run)
    assert main(["down", "--algo", "grpo", "--volumes"]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error: ")] == [
        "error: " + co.owner_problem("hermes-grpo", "grpo", str(Path(tmp_path).resolve()), A, [], "down").line()]
    assert compose_calls == []  # `compose down --volumes` never ran

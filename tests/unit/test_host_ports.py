"""Preflight of the host ports (issue 25): `up` of a second algorithm beside a running stack exits 2 with one line
naming the stack, where it was started and the command that stops it, and creates nothing (no compose call)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from hermes_stack.controller import host_ports
from hermes_stack.controller.cli import main
from hermes_stack.controller.host_ports import Holder, parse_ps, taken_ports

ROOT = Path(__file__).resolve().parents[2]
GRPO_PS = "hermes-grpo\t/home/u/hermes\t127.0.0.1:8000->8000/tcp\nhermes-grpo\t/home/u/hermes\t127.0.0.1:8001->8001/tcp\n" \
          "hermes-grpo\t/home/u/hermes\t\n"
NEEDED = {"[atropos] api_port": 8000, "inference.port": 8001}


def test_docker_ps_lines_become_port_holders():
    holders = parse_ps(GRPO_PS + "\t\t0.0.0.0:9000-9001->9000-9001/tcp, :::9000-9001->9000-9001/tcp\n")
    assert Holder("hermes-grpo", "/home/u/hermes", 8000) in holders
    assert Holder("hermes-grpo", "/home/u/hermes", 8001) in holders
    assert {h.port for h in holders if not h.project} == {9000, 9001}


def test_the_other_algorithms_stack_is_named_with_the_command_that_stops_it():
    """One line for the one stack that holds both ports (two before, one per port, for the one mistake)."""
    problems = taken_ports(NEEDED, parse_ps(GRPO_PS), "hermes-ppo")
    assert [p.line() for p in problems] == [
        ("host ports 8000 and 8001: [atropos] api_port, inference.port: found the running stack hermes-grpo (started "
        "in /home/u/hermes) holding them, expected free ports for hermes-ppo. Hint: stop it with `make down "
        "ALGO=grpo` in /home/u/hermes (or `docker compose -p hermes-grpo down` anywhere)")]


def test_the_stacks_own_ports_are_not_in_its_way():
    assert taken_ports(NEEDED, parse_ps(GRPO_PS), "hermes-grpo") == []


def test_a_program_outside_docker_is_named_too():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        problems = taken_ports({"inference.port": port}, [], "hermes-grpo", host_ports.port_in_use)
    assert [p.line() for p in problems] == [
        (f"host port {port}: inference.port: found a program outside Docker listening on it, expected a free port for "
        f"hermes-grpo. Hint: stop that program (`ss -ltnp 'sport = :{port}'` names it), or change inference.port")]


def test_free_ports_pass():
    assert taken_ports(NEEDED, [], "hermes-ppo", lambda _p: False) == []


@pytest.mark.usefixtures("isolated_secrets")
def test_up_of_a_second_algorithm_exits_2_before_anything_is_created(tmp_path, monkeypatch, capsys, compose_calls):
    from hermes_stack.controller import bring_up, compose, preflight

    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HERMES_ROOT", str(tmp_path))
    monkeypatch.delenv("HERMES_PROJECT_NAME", raising=False)
    monkeypatch.setattr(preflight, "preflight", lambda device, probe=None: [])
    asked = []

    def fake_probe(argv):
        asked.append(list(argv))
        if argv[:3] == ["docker", "ps", "--format"]:
            return 0, GRPO_PS, ""
        return 0, "", ""  # no ppo volume, no ppo containers: this checkout's own, fresh run

    monkeypatch.setattr(compose, "probe", fake_probe)
    monkeypatch.setattr(host_ports, "port_in_use", lambda _port: False)
    monkeypatch.setattr(bring_up, "build_inputs", lambda: pytest.fail("nothing may be built"))
    assert main(["up", "--algo", "ppo", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert lines == [("error: host ports 8000 and 8001: [atropos] api_port, inference.port: found the running stack "
                      "hermes-grpo (started in /home/u/hermes) holding them, expected free ports for hermes-ppo. Hint: "
                      "stop it with `make down ALGO=grpo` in /home/u/hermes (or `docker compose -p hermes-grpo down` "
                      "anywhere)")]
    assert "Traceback" not in err
    assert compose_calls == []  # no compose command ran: no container created
    assert not (tmp_path / ".env").exists()  # nor the .env a started stack leaves
    assert ["docker", "ps", "--format", host_ports.PS_FORMAT] in asked
    assert all(argv[1] in ("ps", "volume") and argv[2] in ("--format", "-a", "inspect") for argv in asked)  # read-only


def test_before_the_docker_tier_a_users_stack_on_the_shipped_ports_is_named_and_the_tests_own_are_not(
        monkeypatch, capsys):
    """`make up` then `make test` (the README's quickstart order): the Docker tier's stacks publish the same ports.
    scripts/run-tests.sh asks this first, so the user's stack is named once instead of failing each Docker test."""
    from hermes_stack.controller import compose, host_ports

    ps = ("hermes-grpo\t/home/u/hermes-stack\t127.0.0.1:8000->8000/tcp\n"
          "hermes-test-day2\t/work/main\t127.0.0.1:8001->8001/tcp\n")
    monkeypatch.setattr(compose, "probe", lambda argv: (0, ps, ""))
    monkeypatch.setattr(host_ports, "port_in_use", lambda port, host="127.0.0.1": f":{port}->" in ps)
    assert host_ports.main(["--for-tests"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the Docker tests need this port: host port 8000: ")
    assert "hermes-grpo" in lines[0] and "make down ALGO=grpo" in lines[0]
    ps = ps.splitlines()[1] + "\n"
    monkeypatch.setattr(compose, "probe", lambda argv: (0, ps, ""))
    assert host_ports.main(["--for-tests"]) == 0  # a leftover test stack: the tests take it down themselves

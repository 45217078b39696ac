"""The CLI root: one line per error, exit codes, traceback only with --debug."""

from __future__ import annotations

import pytest
import typer

from hermes_stack import keyfile as kf
from hermes_stack import redaction
from hermes_stack.controller.cli import main
from hermes_stack.controller.commands import validate as validate_cmd

ARGS = ["validate", "--algo", "grpo", "--device", "cpu"]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv(kf.PATH_ENV, str(tmp_path / "no-key-file"))
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


def test_unexpected_error_is_one_line_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(validate_cmd, "evaluate", _boom)
    assert main(ARGS) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: unexpected error: RuntimeError: boom"]


def test_debug_adds_the_traceback(monkeypatch, capsys):
    monkeypatch.setattr(validate_cmd, "evaluate", _boom)
    assert main(["--debug", *ARGS]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unexpected error: RuntimeError: boom\n") and "Traceback" in err


def test_typer_exit_code_is_returned(monkeypatch):
    def leave(*args, **kwargs):
        raise typer.Exit(3)

    monkeypatch.setattr(validate_cmd, "evaluate", leave)
    assert main(ARGS) == 3


def test_unknown_command_is_one_line(capsys):
    assert main(["valdate"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: hermes-stack: No such command 'valdate'. Did you mean 'validate'? Hint: run `hermes-stack --help`"]


@pytest.mark.parametrize(("argv", "command", "option"), [(["logs", "--tail"], "logs", "--tail"),
                                                       (["--debug", "mcp", "--port"], "mcp", "--port"),
                                                       (["dry-run", "--algo"], "dry-run", "--algo")])
def test_an_option_without_its_value_points_at_its_commands_help(argv, command, option, capsys):
    """click raises this before the command's context exists, and the hint named the top-level help (which lists
    commands, not the option)."""
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        (f"error: hermes-stack {command}: Option '{option}' requires an argument. Hint: run `hermes-stack {command} "
        "--help`")]


def test_no_arguments_prints_help_and_no_error_line(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert "Usage: hermes-stack" in out + err and "error:" not in out + err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "validate" in capsys.readouterr().out


def test_validate_help_exits_0(capsys):
    assert main(["validate", "--help"]) == 0
    assert "--algo" in capsys.readouterr().out


def test_secret_in_an_error_line_is_redacted(monkeypatch, capsys):
    redaction.register_secrets({"TAOTOKEN_API_KEY": "sk-leaky0123456789abc"})

    def leak(*args, **kwargs):
        raise RuntimeError("bad key sk-leaky0123456789abc")

    monkeypatch.setattr(validate_cmd, "evaluate", leak)
    assert main(ARGS) == 1
    err = capsys.readouterr().err
    assert "sk-leaky0123456789abc" not in err and "sk-…9abc" in err


def test_a_usage_hint_names_the_program_as_it_was_typed(tmp_path, monkeypatch):
    """`hermes-stack` is not on PATH after `make venv`: the README runs `.venv/bin/hermes-stack` and the Makefile
    `.venv/bin/python -m hermes_stack`, so a hint saying `hermes-stack up --help` did not work as typed."""
    import os
    import sys

    from hermes_stack.controller.cli import invoked_as

    script = tmp_path / ".venv" / "bin" / "hermes-stack"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert invoked_as(str(script)) == os.path.join(".venv", "bin", "hermes-stack")
    monkeypatch.setattr(sys, "executable", str(tmp_path / ".venv" / "bin" / "python"))  # the Makefile's $(PY)
    assert invoked_as(str(tmp_path / "src" / "hermes_stack" / "__main__.py")) == (
        os.path.join(".venv", "bin", "python") + " -m hermes_stack")
    assert invoked_as("/usr/lib/python3/site-packages/pytest") == "hermes-stack"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # above the working directory: the whole path, not ../.venv/…
    assert invoked_as(str(script)) == str(script)
    monkeypatch.setenv("PATH", str(script.parent))  # found on PATH: the bare name works
    assert invoked_as(str(script)) == "hermes-stack"


@pytest.mark.parametrize("raised", ["ctrl-c", "compose-exited-130"])
def test_ctrl_c_during_up_is_one_line_saying_how_to_see_and_clear_a_partly_started_stack(raised, monkeypatch, capsys):
    """Ctrl-C during `up` ended with exit 130 and nothing said (or, when docker compose got the signal first,
    `error: docker compose … exited 130`, exit 1), leaving containers created and the user guessing."""
    from hermes_stack.controller import bring_up
    from hermes_stack.controller.compose import CommandFailed

    def interrupted(*args, **kwargs):
        if raised == "ctrl-c":
            raise KeyboardInterrupt
        raise CommandFailed(["docker", "compose", "up"], 130, "Container hermes-grpo-atropos-1 Waiting")

    monkeypatch.setattr(bring_up, "bring_up", interrupted)
    assert main(["up", "--algo", "ppo", "--device", "cpu"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [
        ("error: interrupted: the stack may be partly started; `make status ALGO=ppo` shows it, `make down ALGO=ppo` "
        "stops it, `make up ALGO=ppo` starts it again")]

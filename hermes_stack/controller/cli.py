"""The `hermes-stack` command. Subcommands live in hermes_stack/controller/commands/<name>.py and register on `app`
(hermes_stack/controller/commands/app.py); this module imports them and runs the app.

Heavy imports (torch, transformers, atroposlib, httpx) stay inside command functions so `validate` starts fast.
"""

from __future__ import annotations

import os
import sys

from hermes_stack.controller.commands.app import app, state
from hermes_stack.errors import HermesError

# Commands whose module is imported alone when they are the one invoked: `validate` must not pay for the imports
# of the others (the stack commands' modules and what they import when loaded).
_LIGHT_COMMANDS = {"validate": "hermes_stack.controller.commands.validate",
                   "environments": "hermes_stack.controller.commands.environments"}


def _register_commands(argv: list[str] | None = None) -> None:
    # Each module adds its commands to `app` on import.
    import importlib

    command = next((a for a in argv or [] if not a.startswith("-")), None)
    if command in _LIGHT_COMMANDS and "--help" not in (argv or []):
        importlib.import_module(_LIGHT_COMMANDS[command])
        return
    from hermes_stack.controller.commands import agent, environments, stack, test_inference, validate  # noqa: F401


def invoked_as(argv0: str | None = None) -> str:
    """The program as the user typed it, for a hint they can paste: `hermes-stack` when that is what PATH finds,
    else the script's path (the README's `.venv/bin/hermes-stack`, made relative to the working directory)."""
    import shutil
    from pathlib import Path

    argv0 = sys.argv[0] if argv0 is None else argv0

    def typed(path: str) -> str:
        # abspath, not resolve(): a virtual environment's python is a symlink to one without its packages.
        relative = os.path.relpath(os.path.abspath(path))
        return relative if not relative.startswith("..") else os.path.abspath(path)

    if Path(argv0).name == "__main__.py" and Path(argv0).parent.name == "hermes_stack":  # the Makefile's way
        return f"{typed(sys.executable)} -m hermes_stack"
    if Path(argv0).name != "hermes-stack":  # a test runner, an embedding program: the command's own name
        return "hermes-stack"
    found = shutil.which("hermes-stack")
    if found and Path(found).resolve() == Path(argv0).resolve():
        return "hermes-stack"
    return typed(argv0)


def _usage_line(exc: Exception, argv: list[str]) -> str:
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "hermes-stack"
    # An option missing its value (`logs --tail`) fails before the command's own context exists, so click names
    # no command: point at the command's help, which lists its options, not at the list of commands.
    typed = next((arg for arg in argv if not arg.startswith("-")), None)
    names = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}  # typer's naming
    if ctx is None and typed in names:
        where = f"hermes-stack {typed}"
    message = " ".join(exc.format_message().split())  # click may wrap; we print exactly one line
    if message and message[-1] not in ".?!":
        message += "."
    return f"{where}: {message} Hint: run `{invoked_as()}{where.removeprefix('hermes-stack')} --help`"


def _is_click(exc: Exception, name: str) -> bool:
    # Checked only when click is already imported: importing it just for this would slow every command.
    click = sys.modules.get("click")
    return click is not None and isinstance(exc, getattr(click.exceptions, name))


def _interrupted(argv: list[str]) -> int:
    """Ctrl-C: one line, exit 130. `up` and `dry-run` may leave the stack partly started (containers created, some
    running): the line says how to see and clear that; the next `up` starts it again either way."""
    from hermes_stack.controller.console import report_error

    command = next((a for a in argv if not a.startswith("-")), None)
    line = "interrupted"
    if command in ("up", "dry-run"):
        algo = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--algo"), None)
        make = f" ALGO={algo}" if algo in ("ppo", "grpo") else ""
        line += (f": the stack may be partly started; `make status{make}` shows it, `make down{make}` stops it, "
                 f"`make {command}{make}` starts it again")
    report_error([line], debug=False)
    return 130


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # pydantic's plugin discovery scans every installed distribution's metadata on the first model; the controller
    # uses no pydantic plugins, and `validate` must stay fast.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _register_commands(argv)
    from typer.exceptions import Abort as TyperAbort
    from typer.exceptions import TyperException

    from hermes_stack.controller.console import report_error

    debug = state["debug"] or "--debug" in argv
    try:
        rv = app(args=argv, prog_name="hermes-stack", standalone_mode=False)
    except HermesError as exc:
        if getattr(exc, "returncode", None) == 130:  # Ctrl-C reached docker compose first: it exited 130
            return _interrupted(argv)
        report_error(exc.lines(), debug=debug)
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (KeyboardInterrupt, TyperAbort):
        return _interrupted(argv)
    except Exception as exc:  # noqa: BLE001 - the one place unexpected errors are turned into a line
        if _is_click(exc, "Abort"):  # Ctrl-C as click reports it
            return _interrupted(argv)
        if isinstance(exc, TyperException) or _is_click(exc, "ClickException"):
            # Usage errors. Typer vendors its own click; a module may still use the real one.
            if exc.format_message().strip():  # no arguments: the help was printed, nothing else to say
                report_error([_usage_line(exc, argv)], debug=False)
            return 2
        report_error([f"unexpected error: {type(exc).__name__}: {exc}"], debug=debug)
        return 1
    # standalone_mode=False hands back a command's return value, or the code of a raised typer.Exit; typer turns
    # Ctrl-C into Exit(130), which is handed back so, without a word.
    if rv == 130:
        return _interrupted(argv)
    return rv if isinstance(rv, int) else 0

"""The `hermes-stack` command. Subcommands live in hermes_stack/commands/<name>.py and register on `app`.

Heavy imports (python-on-whales, torch, atroposlib) stay inside command functions so `validate` starts fast.
"""

from __future__ import annotations

import sys

import typer

from hermes_stack.errors import HermesError

app = typer.Typer(
    name="hermes-stack",
    help="PPO and GRPO training on Atropos as one validated Docker Compose stack.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

state = {"debug": False}


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for unexpected errors.")) -> None:
    state["debug"] = debug


def _register_commands() -> None:
    # Each module adds its commands to `app` on import.
    from hermes_stack.commands import stack, test_inference, validate  # noqa: F401


def main(argv: list[str] | None = None) -> int:
    _register_commands()
    argv = list(sys.argv[1:] if argv is None else argv)
    from hermes_stack.console import report_error

    try:
        app(args=argv, standalone_mode=False)
    except HermesError as exc:
        report_error(exc.lines(), debug=state["debug"] or "--debug" in argv)
        return exc.exit_code
    except SystemExit as exc:  # typer.Exit inside commands
        return int(exc.code or 0)
    except KeyboardInterrupt:
        report_error(["interrupted"], debug=False)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place unexpected errors are turned into a line
        import click

        if isinstance(exc, click.exceptions.Abort):
            return 130
        if isinstance(exc, click.ClickException):
            report_error([f"{' '.join(argv) or 'hermes-stack'}: {exc.format_message()}"
                          " Hint: run `hermes-stack --help`"], debug=False)
            return 2
        report_error([f"unexpected error: {type(exc).__name__}: {exc}"], debug=state["debug"] or "--debug" in argv)
        return 1
    return 0

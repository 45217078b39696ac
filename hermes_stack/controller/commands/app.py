"""The typer `app` every command module registers on. Its own module so that the command modules import it and
cli.py imports the command modules, without either importing the other back (tests/static/test_import_boundaries.py).
"""

from __future__ import annotations

import typer

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

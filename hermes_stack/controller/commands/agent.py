"""`hermes-stack mcp` (the rl_* tools for Hermes Agent or any MCP client) and `hermes-stack report` (a run's
PNG + HTML). The work lives in hermes_stack.controller.agent_tools and hermes_stack.controller.report; this module checks the command line
and hands over."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from hermes_stack.controller.commands.app import app
from hermes_stack.errors import InputError, Problem


@app.command()
def mcp(
    project: Annotated[Path | None, typer.Option(
        "--project", help="The hermes-stack project folder (default: $HERMES_ROOT, else the current directory)")] = None,
    algo: str = typer.Option("grpo", "--algo", help="ppo or grpo: the stack the tools drive"),
    device: str = typer.Option("auto", "--device", help="auto, cpu or gpu (as for up)"),
    unlock: bool = typer.Option(False, "--unlock", help="Let rl_edit_config change the locked tinker fields (the "
                                                        "runs start with up --unlock)"),
    model: str = typer.Option(None, "--model", help="A catalog model for the runs (as up --model)"),
    no_build: bool = typer.Option(False, "--no-build", help="Runs use the images already built"),
    wait_timeout: int = typer.Option(900, "--wait-timeout", help="Seconds each run's `up --wait` may take"),
    transport: str = typer.Option("stdio", "--transport", help="stdio, or http (Streamable HTTP at /mcp)"),
    host: str = typer.Option("127.0.0.1", "--host", help="http: the address to bind (not loopback: needs "
                                                         "$HERMES_MCP_TOKEN)"),
    port: int = typer.Option(8765, "--port", help="http: the port"),
) -> None:
    """Serve the rl_* training tools over MCP (stdio by default) for Hermes Agent or any MCP client."""
    from hermes_stack.controller import console
    from hermes_stack.controller.agent_tools.server import (
        bind_http,
        build_server,
        is_host,
        is_loopback,
        open_project,
        serve_stdio,
    )

    if algo not in ("ppo", "grpo"):
        raise InputError(Problem("command line", "--algo", repr(algo), "ppo or grpo", "e.g. --algo grpo"))
    if device not in ("auto", "cpu", "gpu"):
        raise InputError(Problem("command line", "--device", repr(device), "auto, cpu or gpu", "e.g. --device cpu"))
    if transport not in ("stdio", "http"):
        raise InputError(Problem("command line", "--transport", repr(transport), "stdio or http",
                                 "Hermes Agent's command/args entry uses stdio"))
    from hermes_stack.config.loader import check_model
    from hermes_stack.controller.compose import wait_timeout_problem

    check_model(model)  # as `up --model` does: a run started with a model the catalog has not would fail later

    if (problem := wait_timeout_problem(wait_timeout)) is not None:
        raise InputError(problem)
    if not 1 <= port <= 65535:  # bind() would end in a traceback
        raise InputError(Problem("command line", "--port", str(port), "a TCP port from 1 to 65535 (default 8765)",
                                 "pick a free one, e.g. --port 8765"))
    if not is_host(host):  # the SDK's auth settings and the bind would end in a pydantic report or a traceback
        raise InputError(Problem("command line", "--host", repr(host), "an IP address (e.g. 0.0.0.0, ::1) or a "
                                 "host name (letters, digits and '-', labels joined by '.')", "e.g. --host 127.0.0.1 (this machine only) or "
                                 "--host 0.0.0.0 (every interface, with HERMES_MCP_TOKEN)"))
    token = os.environ.get("HERMES_MCP_TOKEN") or None
    if transport == "http" and not is_loopback(host) and not token:
        raise InputError(Problem("command line", "--host", repr(host), "a loopback address, or HERMES_MCP_TOKEN set",
                                 "binding beyond this machine needs a bearer token: export HERMES_MCP_TOKEN=<long "
                                 "random value> and send it as `Authorization: Bearer …`"))
    blank = token is not None and any(c.isspace() for c in token)
    if transport == "http" and not is_loopback(host) and token and (len(token) < 32 or blank):
        # The token is all that guards the tools beyond this machine: a guessable one (or a pasted blank) is refused.
        # Its length is named, never its value.
        found = f"a value of {len(token)} characters" + (" with whitespace" if blank else "")
        raise InputError(Problem("(environment)", "HERMES_MCP_TOKEN", found, "a random value of at least 32 "
                                 f"characters without whitespace to serve beyond loopback (--host {host})",
                                 'export HERMES_MCP_TOKEN="$(python3 -c "import secrets; '
                                 'print(secrets.token_urlsafe(32))")"'))
    if transport == "http":
        # A port in use is the one line of this command (InputError), before the banner; serving binds again.
        for sock in bind_http(host, port):
            sock.close()
    tools, problem = open_project(project, {"algo": algo, "device": device, "unlock": unlock, "model": model,
                                            "wait_timeout": wait_timeout, "build": not no_build})
    if problem is not None:
        # Still served: the client gets the same line from every tool (a server that exits only says "closed").
        console.report_error([f"{problem}. Hint: pass --project <the hermes-stack checkout> or set HERMES_ROOT"],
                             debug=False)
    else:
        console.err.print(f"hermes-stack mcp: project {tools.root}, {algo}, device {device}, "
                          f"{'unlocked' if unlock else 'locked fields locked'}, {transport}", markup=False)
    server = build_server(tools, problem, host=host, port=port, token=token)
    if transport == "stdio":
        serve_stdio(server)
    else:
        server.run(transport="streamable-http")


@app.command()
def report(
    algo: str | None = typer.Option(None, "--algo", help="ppo or grpo: the stack whose metrics are read (default: "
                                    "the last `up`'s here, else grpo)"),
    metrics: Annotated[Path | None, typer.Option(
        "--metrics", help="A metrics.jsonl file instead of the running stack's")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Folder for report.png and report.html (default: .hermes/reports/<algo>)")] = None,
) -> None:
    """Write a PNG and a self-contained HTML page of a run's metrics: reward, held-out accuracy, KL, entropy, clip
    fraction and step times against step, with checkpoints, restarts and events marked."""
    from hermes_stack.controller import console
    from hermes_stack.controller.compose import project_of
    from hermes_stack.controller.report import write_report
    from hermes_stack.controller.stack_state import STATE_DIR, load_plan, plan_compose, project_root, stack_algo
    from hermes_stack.controller.status import parse_events, parse_metrics, read_metrics
    from hermes_stack.errors import StackError

    algo = stack_algo(project_root() / STATE_DIR, algo)

    if algo not in ("ppo", "grpo"):
        raise InputError(Problem("command line", "--algo", repr(algo), "ppo or grpo", "e.g. --algo grpo"))
    if out is not None and out.exists() and not out.is_dir():
        raise InputError(Problem("command line", "--out", f"{out} (a file)", "a folder for report.png and report.html",
                                 "name a folder; it is made when missing"))
    if metrics is not None:
        if not metrics.is_file():
            raise InputError(Problem("command line", "--metrics", str(metrics), "a metrics.jsonl file",
                                     "omit --metrics to read the running stack's"))
        text, source = metrics.read_text(errors="replace"), str(metrics)
        if not parse_metrics(text):  # the user's file, not a stack that has not trained yet
            raise InputError(Problem("command line", "--metrics", f"{metrics} (no step records)",
                                     "a trainer's metrics.jsonl (one JSON object with a \"step\" per line)",
                                     "the running stack's is read when --metrics is left out"))
    else:
        compose = plan_compose(load_plan(project_root() / STATE_DIR, algo), echo=False)
        text, source = read_metrics(compose, lines=None), f"the {project_of(compose.params)} stack"
    records = parse_metrics(text)
    if not records:
        raise StackError(f"no training step in the metrics of {source} yet (start with: make up ALGO={algo})")
    target = out or project_root() / STATE_DIR / "reports" / algo
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        where = ("command line", "--out") if out is not None else (str(target), "(folder)")
        raise InputError(Problem(*where, f"{target} ({exc.strerror})", "a folder this user can write",
                                 "name another folder with --out")) from exc
    done = write_report(records, parse_events(text), target, f"hermes-stack {algo}: {source}")
    # Steps, not records: a trainer restarted from its checkpoint records the steps after it again.
    steps = len({r["step"] for r in records})
    redone = f", {len(records) - steps} redone after a restart" if len(records) > steps else ""
    console.info(f"report of {steps} steps (last step {done.summary['last_step']}){redone}:")
    console.info(f"  {done.png}")
    console.info(f"  {done.html}")
    sys.stdout.flush()

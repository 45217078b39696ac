"""`hermes-stack mcp`: the rl_* tools over MCP, on the official `mcp` SDK (FastMCP, mcp 1.26: Hermes Agent 0.19's).

stdio by default (Hermes Agent's `mcp_servers` entry with `command`/`args`). On stdio, file descriptor 1 is handed to
the MCP transport alone and every other write to stdout (the controller's progress lines, a docker child's output)
goes to stderr, so nothing can corrupt the protocol.

Streamable HTTP (`--transport http`) binds 127.0.0.1 by default; any other address needs a bearer token
($HERMES_MCP_TOKEN), checked on every request.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any

from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools, call

INSTRUCTIONS = """\
hermes-stack trains a language model with PPO or GRPO on Atropos, as one validated Docker Compose stack.
Typical flow: rl_list_environments -> rl_select_environment -> rl_get_current_config -> rl_edit_config (optional)
-> rl_start_training (returns run_id, status "starting") -> rl_check_status(run_id) every minute or two (no rate
limit) -> rl_get_results(run_id) (summary, history, report PNG/HTML) -> rl_stop_training(run_id).
Every answer is a JSON object; a failure is {"error": ..., "hint": ...}: follow the hint."""

DESCRIPTIONS = {
    "rl_list_environments": "List the environments this stack can train on (the built-in one's datasets and the "
                            "user's own atroposlib files in environments/), with the one currently configured. "
                            "Cheap, no side effects. Call first.",
    "rl_select_environment": "Select the environment to train on by name (from rl_list_environments): writes "
                             "[environment] dataset (a built-in dataset) or [environment] name (a file of "
                             "environments/) in the config after validating it. Cheap; does not start anything. A "
                             "refused value leaves the files unchanged.",
    "rl_get_current_config": "Read the training configuration: every configurable field (name, type, default, "
                             "description, current_value, and effective_value where the CPU/GPU profile overrides "
                             "it) and the locked fields with their locked_value. Cheap, read-only.",
    "rl_edit_config": "Change one configuration field, e.g. field='rollout.group_size', value=8. Validated with the "
                      "stack's own checks before anything is written; a refused value (the error says file, key, "
                      "found, expected) leaves the files unchanged. Locked fields are refused unless the user "
                      "unlocked them in the server's configuration. Cheap; affects the next rl_start_training.",
    "rl_start_training": "Validate the configuration and start a training run in the background (build, health "
                         "checks, dry-run, then training). Returns run_id and status 'starting' at once; the stack "
                         "takes minutes to come up and training runs until num_steps. Costs compute (and gateway "
                         "money when a key file is used). One run per algorithm at a time.",
    "rl_check_status": "Status of a run: starting / running / completed / failed / stopped, health of each service, "
                       "the training step, reward mean, held-out accuracy and the last checkpoint. Cheap; call as "
                       "often as needed (no rate limit), e.g. every minute or two while training.",
    "rl_stop_training": "Stop a run: the stack's containers are removed, checkpoints and metrics kept; writes the "
                        "report. Use when the goal is reached or the run misbehaves.",
    "rl_get_results": "Results of a run: final metrics (last step, reward, held-out accuracy first/last/best, last "
                      "checkpoint), the per-step history, and the paths of the report PNG and HTML. Cheap.",
    "rl_list_runs": "List every run this project has (also those of earlier server sessions) with its status. "
                    "Cheap, read-only.",
    "rl_test_inference": "Generate and score a few groups before paying for training: with a key file, from the "
                         "gateway model (costs gateway money); offline, from the running stack's inference service. "
                         "num_steps groups of the config's group_size. Takes seconds to minutes.",
}


def argument_failure(tool: str, params: dict[str, Any], arguments: dict[str, Any], error=None) -> dict[str, Any] | None:
    """{"error", "hint"} for arguments a tool does not take (the SDK would drop them silently) or, given the SDK's
    pydantic ValidationError, for the first argument it refused; None when there is nothing to say."""
    from hermes_stack.controller.agent_tools.tools import failure
    from hermes_stack.errors import shorten

    def kind(schema: dict[str, Any]) -> str:  # "string", "integer", "array of string or null"
        if "anyOf" in schema:
            return " or ".join(kind(s) for s in schema["anyOf"])
        if schema.get("type") == "array":
            return f"array of {kind(schema.get('items', {}))}"
        return schema.get("type", "any value")

    takes = f"{tool} takes " + (", ".join(f"{k} ({kind(v)})" for k, v in params.items()) if params else "no arguments")
    unknown = sorted(set(arguments) - set(params))
    if unknown:
        return failure(f"{tool}: unknown argument {unknown[0]!r}", takes)
    for arg, value in arguments.items():
        # pydantic's lax mode reads true as 1 (rl_test_inference(num_steps=true) ran one step); a boolean is no number
        kinds = kind(params[arg]).split(" or ")
        if isinstance(value, bool) and "boolean" not in kinds and {"integer", "number"} & set(kinds):
            return failure(f"{tool}: argument {arg}: found {value!r}, expected a valid {kind(params[arg])}", takes)
    if error is None:
        return None
    first = error.errors(include_url=False)[0]
    arg = ".".join(str(p) for p in first["loc"]) or "(arguments)"
    # cut as validate cuts what it echoes: a 5,000-digit number whole would push `expected` past the answer's clip
    found = "nothing" if first["type"] == "missing" else shorten(repr(first.get("input")))
    msg = first["msg"]
    if first["type"] == "missing":
        expected = f"a {kind(params.get(arg, {}))}"
    elif msg.startswith("Input should be "):
        expected = msg.removeprefix("Input should be ")
    else:  # "Unable to parse input string as an integer, exceeded maximum size": what was wanted first
        expected = f"a valid {kind(params.get(arg, {}))} ({msg[:1].lower()}{msg[1:]})"
    return failure(f"{tool}: argument {arg}: found {found}, expected {expected}", takes)


def build_server(tools: Tools | None, problem: str | None, host: str = "127.0.0.1", port: int = 8765,
                 token: str | None = None):
    """The FastMCP server with the ten tools; each returns the JSON string of tools.call."""
    import warnings

    # mcp 1.26's FastMCP settings under pydantic-settings 2.16 warn about a forward reference on every start; it is
    # the SDK's own field (lifespan, which we do not set), and the line would reach every client's log.
    warnings.filterwarnings("ignore", message="Field 'lifespan' has an incomplete definition")
    from mcp.server.fastmcp import FastMCP

    kwargs: dict[str, Any] = {}
    if token:
        from mcp.server.auth.provider import AccessToken
        from mcp.server.auth.settings import AuthSettings

        class StaticToken:
            async def verify_token(self, presented: str) -> AccessToken | None:
                if secrets.compare_digest(presented.encode(), token.encode()):
                    return AccessToken(token=presented, client_id="hermes-stack-user", scopes=[])
                return None

        url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"  # an IPv6 address in brackets
        kwargs = {"auth": AuthSettings(issuer_url=url, resource_server_url=url), "token_verifier": StaticToken()}

    class HermesMCP(FastMCP):
        async def call_tool(self, name: str, arguments: dict[str, Any]):
            # The SDK checks arguments against the tool's signature and answers a pydantic report (several lines,
            # a URL) as an error; the instructions promise {"error", "hint"}, which is what a bad argument gets here.
            from mcp.server.fastmcp.exceptions import ToolError
            from mcp.types import TextContent
            from pydantic import ValidationError

            from hermes_stack.controller.agent_tools.tools import redacted

            root = tools.root if tools is not None else None  # as call() redacts: the stored inference key too
            found = self._tool_manager.get_tool(name)
            if found is not None:
                answer = argument_failure(name, found.parameters.get("properties", {}), arguments or {})
                if answer is not None:
                    return [TextContent(type="text", text=redacted(answer, root))]
            try:
                return await super().call_tool(name, arguments)
            except ToolError as exc:
                if not isinstance(exc.__cause__, ValidationError) or found is None:
                    raise
                answer = argument_failure(name, found.parameters.get("properties", {}), arguments or {},
                                          exc.__cause__)
                return [TextContent(type="text", text=redacted(answer, root))]

    server = HermesMCP("hermes-stack", instructions=INSTRUCTIONS, host=host, port=port, log_level="WARNING", **kwargs)

    from mcp.server.fastmcp.utilities.func_metadata import FuncMetadata

    class KeepUnreadable(FuncMetadata):
        def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
            # The SDK reads a string argument as JSON and keeps text that is not JSON as it is, but json's other
            # refusals (an integer past Python's 4300 digits: ValueError; deep nesting: RecursionError) escaped as a
            # bare error answer. Such text is kept as it is too: the argument check or the tool (rl_edit_config: the
            # field's range) refuses it as {"error", "hint"}.
            out = dict(data)
            for key, value in data.items():
                try:
                    out[key] = super().pre_parse_json({key: value})[key]
                except Exception:  # noqa: BLE001 - any of them
                    out[key] = value
            return out

    def tool(fn):
        # structured_output=False: the answer is the JSON string alone (as the old tools), not also wrapped in
        # {"result": …} structured content, which an agent would read twice.
        server.tool(name=fn.__name__, description=DESCRIPTIONS[fn.__name__], structured_output=False)(fn)
        registered = server._tool_manager.get_tool(fn.__name__)
        registered.fn_metadata = KeepUnreadable(**dict(registered.fn_metadata))
        return fn

    @tool
    def rl_list_environments() -> str:
        return call(tools, problem, "rl_list_environments")

    @tool
    def rl_select_environment(name: str) -> str:
        return call(tools, problem, "rl_select_environment", name=name)

    @tool
    def rl_get_current_config() -> str:
        return call(tools, problem, "rl_get_current_config")

    @tool
    def rl_edit_config(field: str, value: Any) -> str:
        return call(tools, problem, "rl_edit_config", field=field, value=value)

    @tool
    def rl_start_training() -> str:
        return call(tools, problem, "rl_start_training")

    @tool
    def rl_check_status(run_id: str) -> str:
        return call(tools, problem, "rl_check_status", run_id=run_id)

    @tool
    def rl_stop_training(run_id: str) -> str:
        return call(tools, problem, "rl_stop_training", run_id=run_id)

    @tool
    def rl_get_results(run_id: str) -> str:
        return call(tools, problem, "rl_get_results", run_id=run_id)

    @tool
    def rl_list_runs() -> str:
        return call(tools, problem, "rl_list_runs")

    @tool
    def rl_test_inference(num_steps: int = 3, group_size: int = 16, models: list[str] | None = None) -> str:
        return call(tools, problem, "rl_test_inference", num_steps=num_steps, group_size=group_size,
                    models=models or [])

    return server


def is_host(host: str) -> bool:
    """An IP address (v4 or v6) or a host name by RFC 1123: labels of letters, digits and '-', at most 63 characters
    each, joined by '.', the last not all digits (999.1.1.1 is a bad address, not a name)."""
    import ipaddress
    import re

    try:
        return getattr(ipaddress.ip_address(host), "scope_id", None) is None  # the auth URL cannot carry a %zone
    except ValueError:
        pass
    label = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    return (len(host) <= 253 and re.fullmatch(rf"{label}(?:\.{label})*\.?", host) is not None
            and not host.rstrip(".").rsplit(".", 1)[-1].isdigit())


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve_stdio(server) -> None:
    """FastMCP's stdio transport on a private copy of fd 1; fd 1 itself then points at stderr."""
    from io import TextIOWrapper

    import anyio
    from mcp.server.stdio import stdio_server

    protocol = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    out = anyio.wrap_file(TextIOWrapper(os.fdopen(protocol, "wb", buffering=0), encoding="utf-8",
                                        write_through=True))

    async def main() -> None:
        async with stdio_server(stdout=out) as (read, write):
            await server._mcp_server.run(read, write, server._mcp_server.create_initialization_options())

    anyio.run(main)


def open_project(project: Path | None, cfg_kwargs: dict[str, Any]) -> tuple[Tools | None, str | None]:
    """The project: --project, else $HERMES_ROOT, else the current directory. The server chdirs there (the
    controller's functions work relative to the project) and sets HERMES_ROOT for the commands it starts."""
    from hermes_stack.controller.agent_tools.tools import project_problem

    root = (project or Path(os.environ.get("HERMES_ROOT") or Path.cwd())).expanduser().resolve()
    if root.exists() and not root.is_dir():
        # A file is a mistyped argument, not a project that may yet be made: refused before serving (exit 2).
        from hermes_stack.errors import InputError, Problem

        where = ("command line", "--project") if project is not None else ("(environment)", "HERMES_ROOT")
        raise InputError(Problem(*where, f"{root} (a file)", "the hermes-stack project folder (holding configs/ and "
                                 f"compose.{cfg_kwargs.get('algo', 'grpo')}.yml)",
                                 f"name the checkout's folder with {where[1]}, not a file in it"))
    problem = project_problem(root, cfg_kwargs.get("algo", "grpo"))
    if problem is not None:
        return None, problem
    os.chdir(root)
    os.environ["HERMES_ROOT"] = str(root)
    import contextlib

    from hermes_stack.errors import InputError
    from hermes_stack.keyfile import load_keyfile

    # The key file's values join the redactor now, so no answer can show one, whichever tool runs first; a broken key
    # file is reported by the tools that validate.
    with contextlib.suppress(InputError, OSError):
        load_keyfile(None, register=True)
    return Tools(ServerConfig(root=root, **cfg_kwargs)), None

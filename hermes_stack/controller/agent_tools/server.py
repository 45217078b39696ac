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
                         "num_steps groups (default 3) of group_size completions each (default 16, the old tool's; "
                         "not the config's rollout.group_size); models may name only the key file's TAOTOKEN_MODEL. "
                         "Takes seconds to minutes.",
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
        return schema.get("type", "any JSON value")

    def a(kinds: str) -> str:  # "a string", "an integer", "any JSON value" (not "a any value")
        return kinds if kinds.startswith("any ") else ("an " if kinds[:1] in "aeiou" else "a ") + kinds

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
        expected = a(kind(params.get(arg, {})))
    elif msg.startswith("Input should be "):
        expected = msg.removeprefix("Input should be ")
    else:  # "Unable to parse input string as an integer, exceeded maximum size": what was wanted first
        expected = f"a valid {kind(params.get(arg, {}))} ({msg[:1].lower()}{msg[1:]})"
    return failure(f"{tool}: argument {arg}: found {found}, expected {expected}", takes)


def build_server(tools: Tools | None, problem: str | None, host: str = "127.0.0.1", port: int = 8765,
                 token: str | None = None):
    """The FastMCP server with the ten tools; each returns the JSON string of tools.call."""
    import functools
    import warnings

    import anyio.to_thread

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

        async def run_streamable_http_async(self) -> None:
            # As the SDK's, but on a socket bound here first: a port in use (or an address not of this machine) is
            # the CLI's one line and exit 2 (InputError), not uvicorn's log line and exit 3. Handing uvicorn the
            # bound socket leaves no gap for another program to take the port between the check and the serve.
            import uvicorn

            sockets = bind_http(self.settings.host, self.settings.port)
            config = uvicorn.Config(self.streamable_http_app(), host=self.settings.host, port=self.settings.port,
                                    log_level=self.settings.log_level.lower())
            try:
                await uvicorn.Server(config).serve(sockets=sockets)
            finally:
                for sock in sockets:
                    sock.close()

    if is_loopback(host) and host not in ("127.0.0.1", "localhost", "::1"):
        # The SDK turns DNS-rebinding protection on for those three names only: 127.0.0.2 (loopback, so served
        # without a token) took any Host header. The same protection, with this address allowed too.
        from mcp.server.transport_security import TransportSecuritySettings

        named = f"[{host}]" if ":" in host else host
        kwargs["transport_security"] = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{named}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=[f"http://{named}:*", "http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
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

    async def run(tool_name: str, **kwargs: Any) -> str:
        # Off the event loop: a tool waits on files, docker and child processes (rl_stop_training up to ~20 s), and a
        # sync tool ran on the loop, so a ping or an rl_list_runs of the same client waited behind it.
        return await anyio.to_thread.run_sync(functools.partial(call, tools, problem, tool_name, **kwargs))

    # The signatures stay as they were: the SDK validates arguments against them (and KeepUnreadable pre-parses).
    @tool
    async def rl_list_environments() -> str:
        return await run("rl_list_environments")

    @tool
    async def rl_select_environment(name: str) -> str:
        return await run("rl_select_environment", name=name)

    @tool
    async def rl_get_current_config() -> str:
        return await run("rl_get_current_config")

    @tool
    async def rl_edit_config(field: str, value: Any) -> str:
        return await run("rl_edit_config", field=field, value=value)

    @tool
    async def rl_start_training() -> str:
        return await run("rl_start_training")

    @tool
    async def rl_check_status(run_id: str) -> str:
        return await run("rl_check_status", run_id=run_id)

    @tool
    async def rl_stop_training(run_id: str) -> str:
        return await run("rl_stop_training", run_id=run_id)

    @tool
    async def rl_get_results(run_id: str) -> str:
        return await run("rl_get_results", run_id=run_id)

    @tool
    async def rl_list_runs() -> str:
        return await run("rl_list_runs")

    @tool
    async def rl_test_inference(num_steps: int = 3, group_size: int = 16, models: list[str] | None = None) -> str:
        return await run("rl_test_inference", num_steps=num_steps, group_size=group_size, models=models or [])

    return server


def bind_http(host: str, port: int) -> list:
    """TCP sockets bound to host:port as uvicorn's own create_server binds them (one per address the host resolves
    to, SO_REUSEADDR, IPv6 sockets v6-only); InputError naming the port (in use, or not allowed) or the host (no
    address of this machine, a name that does not resolve)."""
    import errno
    import socket

    from hermes_stack.errors import InputError, Problem

    bound: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as exc:
        for sock in bound:
            sock.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            problem = Problem(f"host port {port}", "--port", f"{port} on {host}: a program listening on it",
                              "a free port for the MCP server (default 8765)",
                              f"stop that program (`ss -ltnp 'sport = :{port}'` names it), or pick another with "
                              "--port N")
        elif exc.errno == errno.EACCES:
            problem = Problem("command line", "--port", f"{port} ({reason})", "a port this user may bind (1024 "
                              "and up without privileges)", "e.g. --port 8765")
        else:  # EADDRNOTAVAIL, or a name that does not resolve (gaierror)
            problem = Problem("command line", "--host", f"{host!r} ({reason})", "an address of this machine",
                              "e.g. --host 127.0.0.1 (this machine only) or --host 0.0.0.0 (every interface, with "
                              "HERMES_MCP_TOKEN)")
        raise InputError(problem) from None
    return bound


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
    from hermes_stack.textfile import path_unusable

    named = (project or Path(os.environ.get("HERMES_ROOT") or Path.cwd())).expanduser()
    unusable = path_unusable(named)  # a name over 255 characters: exists() raises instead of answering
    if unusable is not None:
        from hermes_stack.errors import InputError, Problem

        where = ("command line", "--project") if project is not None else ("(environment)", "HERMES_ROOT")
        raise InputError(Problem(*where, f"{unusable}: {named}", "the hermes-stack project folder",
                                 f"name the checkout's folder with {where[1]}"))
    root = named.resolve()
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

"""Driving `hermes-stack mcp` the way Hermes Agent does: the official `mcp` client over stdio, the server started
from another directory with only the environment Hermes Agent passes to a stdio server (tools/mcp_tool.py: PATH,
HOME, USER, LANG, LC_ALL, TERM, SHELL, TMPDIR, plus the entry's `env:`)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from contextlib import asynccontextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERMES_BASELINE = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TERM", "SHELL", "TMPDIR")


def copy_project(target: Path) -> Path:
    """The files a project needs (configs and compose files), so tests edit a copy, never the repository."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "configs", target / "configs")
    for f in REPO.glob("compose.*.yml"):
        shutil.copy(f, target / f.name)
    return target


def open_project(tmp_path: Path, monkeypatch) -> Path:
    """A copied project, made the working directory and HERMES_ROOT, as the server's own open_project does: the
    controller's functions work relative to the project."""
    root = copy_project(tmp_path / "project").resolve()
    monkeypatch.chdir(root)
    monkeypatch.setenv("HERMES_ROOT", str(root))
    return root


def hermes_env(entry_env: dict[str, str] | None = None) -> dict[str, str]:
    return {**{k: os.environ[k] for k in HERMES_BASELINE if k in os.environ}, **(entry_env or {})}


@asynccontextmanager
async def mcp_session(args: list[str], cwd: Path, entry_env: dict[str, str] | None = None, errlog=None):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "hermes_stack", "mcp", *args],
                                   env=hermes_env(entry_env), cwd=str(cwd))
    kwargs = {"errlog": errlog} if errlog is not None else {}
    async with stdio_client(params, **kwargs) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session, tool: str, **arguments) -> dict:
    result = await session.call_tool(tool, arguments)
    assert not result.isError, result.content
    return json.loads(result.content[0].text)


def config_bytes(project: Path) -> dict[str, bytes]:
    """Every file of the project's configs/, by name: what an edit must (not) change."""
    return {p.name: p.read_bytes() for p in sorted((project / "configs").iterdir())}


def tool_answer(t, tool: str, **kwargs) -> dict:
    """One tool called in-process as the server calls it (tools.call), its JSON answer parsed."""
    from hermes_stack.controller.agent_tools import tools

    return json.loads(tools.call(t, None, tool, **kwargs))

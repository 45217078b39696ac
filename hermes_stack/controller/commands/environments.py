"""`hermes-stack environments`: every environment `[environment] name` can select: the built-in ones and the
atroposlib BaseEnv files of the project's environments/ folder (read with ast, never run), one line each with name,
class, file and description (the class's docstring, first line). A file that cannot be read (a syntax error, not
text, too large to scan) is named on stderr, with its fix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hermes_stack.controller.commands.app import app


def listing_lines(project_root: Path) -> list[str]:
    from hermes_stack import environments_catalog as catalog

    envs = catalog.list_environments(project_root)
    width = max(len(e.name) for e in envs)
    cls_width = max(len(e.class_name) for e in envs)
    lines = []
    for env in envs:
        where = env.file + ("" if env.builtin else f":{env.line}")
        description = (env.description.splitlines() or ["(no docstring)"])[0]
        lines.append(f"{env.name:<{width}}  {env.class_name:<{cls_width}}  {where}  {description}")
    return lines


@app.command("environments")
def environments(
    root: Annotated[Path | None, typer.Option(
        "--root", help="Project folder holding environments/ (default: $HERMES_ROOT or the current folder).")] = None,
) -> None:
    """List the environments: built-in and environments/*.py (name, class, file, description)."""
    from hermes_stack import environments_catalog as catalog
    from hermes_stack.controller import console
    from hermes_stack.controller.stack_state import project_root

    base = root or project_root()
    if not base.is_dir():  # a typo'd --root or $HERMES_ROOT would otherwise list the built-ins and exit 0
        from hermes_stack.errors import InputError, Problem

        state = "a file" if base.exists() else "no such folder"
        where, key, fix = (("command line", "--root", "leave --root out to use this folder, or name the checkout")
                           if root is not None else
                           ("(environment)", "HERMES_ROOT", "unset it to use this folder, or name the checkout"))
        raise InputError(Problem(where, key, f"{base} ({state})", f"the project folder holding {catalog.FOLDER}/",
                                 fix))
    _register_keyfile_secrets(base)  # an environment's name or docstring is the user's text: it may hold a key
    for line in listing_lines(base):
        console.info(line)
    for scan in catalog.scan_folder(base):
        if scan.error:  # a syntax error, UTF-16, too deeply nested, too large to scan: with its fix
            console.warn(f"{scan.error}; its environments are not listed. Hint: {scan.fix[1]}")
    if not catalog.folder(base).is_dir():
        console.notice(f"no {catalog.FOLDER}/ folder in {base}: only the built-in environments")


def _register_keyfile_secrets(base: Path) -> None:
    """The key file's secrets, for the redactor every printed line goes through (validate and the MCP tools load the
    key file too): the one named by $HERMES_KEYFILE, else the listed project's. The listing needs nothing else from
    it, so a key file with problems is left to validate."""
    import os

    from hermes_stack.errors import HermesError
    from hermes_stack.keyfile import DEFAULT_PATH, PATH_ENV, load_keyfile

    try:
        load_keyfile(None if os.environ.get(PATH_ENV) else base / DEFAULT_PATH, register=True)
    except HermesError:
        pass  # its values are registered once parsed, before the checks that raise (a BOM stops it before)

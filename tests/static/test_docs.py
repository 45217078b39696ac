"""The README and docs/ as data: every command they show works as typed, every path and link they name exists, and
their tables that copy a model (the key file's variables, the config sections) equal the model."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import runpy
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
ALGOS = ("ppo", "grpo")

CODE_BLOCK = re.compile(r"^```([^\n]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[<>\[\]…|*]|\.\.\.")  # `<model dir>`, `[--steps N]`, `ALGO=ppo|grpo`: not typed as is


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


@cache
def text(page: Path) -> str:
    return page.read_text()


def prose(page: Path) -> str:
    """The page without its code blocks (inline code is looked at separately)."""
    return CODE_BLOCK.sub("", text(page))


def snippets(page: Path, *, shell_only: bool = False) -> list[str]:
    """Every command-like piece of a page: each line of its code blocks (only the ```sh ones with `shell_only`: a
    plain block may be a tree or a program's output), each inline code span."""
    lines = [line.split(" #")[0].strip() for lang, block in CODE_BLOCK.findall(text(page))
             if lang in ("sh", "bash") or not shell_only for line in block.splitlines()]
    return [s for s in lines + INLINE_CODE.findall(prose(page)) if s]


def commands(prefix: str) -> list[tuple[str, str]]:
    """(page, command) for each snippet that starts with `prefix` and holds no placeholder."""
    found = []
    for page in PAGES:
        for snippet in snippets(page):
            snippet = snippet.removeprefix("$ ")
            if re.match(rf"{re.escape(prefix)}(\s|$)", snippet) and not PLACEHOLDER.search(snippet):
                found.append((rel(page), snippet))
    return sorted(set(found))


@cache
def parses_as_cli(args: tuple[str, ...]) -> tuple[int, str]:
    """`python -m hermes_stack <args> --help`, in this process (a subprocess each costs a second): the controller's
    own parser refuses unknown commands and options (exit 2) before it honours `--help`. -> (exit code, output)."""
    out = io.StringIO()
    argv, sys.argv = sys.argv, ["hermes-stack", *args, "--help"]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_module("hermes_stack", run_name="__main__", alter_sys=False)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return code, out.getvalue()


MAKE = commands("make")
CLI = commands("hermes-stack") + commands(".venv/bin/hermes-stack")


def test_the_docs_show_commands_at_all():
    """The checks below must have something to check: the README's two commands among them."""
    assert ("README.md", "make up ALGO=grpo") in MAKE and ("README.md", "make test") in MAKE
    assert len(MAKE) >= 15 and len(CLI) >= 3


@pytest.mark.parametrize(("page", "command"), MAKE, ids=[f"{p}: {c}" for p, c in MAKE])
def test_every_make_command_in_the_docs_works_as_typed(page, command):
    """`make -n` is make's own reading of the line (target, ALGO check), without running anything; every controller
    command the target runs then parses with the controller's own CLI."""
    made = subprocess.run(["make", "-n", *shlex.split(command)[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert made.returncode == 0, f"{page}: `{command}`: {made.stderr.strip()}"
    for line in made.stdout.splitlines():
        if " -m hermes_stack " in line:
            code, output = parses_as_cli(tuple(shlex.split(line.split(" -m hermes_stack ", 1)[1])))
            assert code == 0, f"{page}: `{command}` runs `{line}`: {output.strip()[-400:]}"


@pytest.mark.parametrize(("page", "command"), CLI, ids=[f"{p}: {c}" for p, c in CLI])
def test_every_controller_command_in_the_docs_parses(page, command):
    code, output = parses_as_cli(tuple(shlex.split(command)[1:]))
    assert code == 0, f"{page}: `{command}`: {output.strip()[-400:]}"


def test_make_and_the_controller_refuse_what_the_docs_must_not_show():
    """The two checks above can fail: a target or an option that does not exist is refused."""
    assert subprocess.run(["make", "-n", "no-such-target"], cwd=ROOT, capture_output=True, timeout=60,
                          check=False).returncode != 0
    assert subprocess.run(["make", "-n", "up", "ALGO=dpo"], cwd=ROOT, capture_output=True, timeout=60,
                          check=False).returncode != 0
    assert parses_as_cli(("up", "--no-such-option"))[0] == 2
    assert parses_as_cli(("no-such-command",))[0] == 2
    code, output = parses_as_cli(("up", "--algo", "grpo"))
    assert code == 0 and "--wait-timeout" in output  # the help really was printed


PATH_LIKE = re.compile(r"^(?:\./)?(?:(?:configs|bench|tests|scripts|docs|docker|hermes_stack)/[\w./<>-]+"
                       r"|compose\.[\w]+\.yml|Makefile|pyproject\.toml|requirements\.lock|\.env\.taotoken\.example)$")


def named_paths() -> list[tuple[str, str]]:
    found = set()
    for page in PAGES:
        for snippet in snippets(page, shell_only=True):
            for word in snippet.split():
                word = word.strip("(),;:")
                if PATH_LIKE.match(word):
                    found.add((rel(page), word))
    return sorted(found)


PATHS = named_paths()


@pytest.mark.parametrize(("page", "path"), PATHS, ids=[f"{p}: {w}" for p, w in PATHS])
def test_every_repository_path_the_docs_name_exists(page, path):
    """`configs/config_<algo>.toml` stands for both algorithms' files."""
    assert PLACEHOLDER.sub("", path.replace("<algo>", "")) == path.replace("<algo>", ""), \
        f"{page}: `{path}` holds a placeholder other than <algo>"
    for algo in ALGOS:
        assert (ROOT / path.replace("<algo>", algo)).exists(), f"{page}: `{path}` does not exist"


def test_the_docs_name_paths_at_all():
    assert ("README.md", "configs/config_<algo>.toml") in PATHS and len(PATHS) >= 20


MODULES = sorted({(rel(page), m) for page in PAGES for s in snippets(page)
                  for m in re.findall(r"python -m ([\w.]+)", s)})


@pytest.mark.parametrize(("page", "module"), MODULES, ids=[f"{p}: {m}" for p, m in MODULES])
def test_every_python_module_the_docs_run_exists(page, module):
    assert importlib.util.find_spec(module) is not None, f"{page}: `python -m {module}`: no such module"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation (backticks included) dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(page), re.MULTILINE):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


LINKS = sorted({(rel(page), target) for page in PAGES for target in LINK.findall(prose(page))
                if not re.match(r"[a-z]+:", target)})


@pytest.mark.parametrize(("page", "target"), LINKS, ids=[f"{p}: {t}" for p, t in LINKS])
def test_every_link_between_the_pages_resolves(page, target):
    path, _, anchor = target.partition("#")
    file = (ROOT / page).parent / path if path else ROOT / page
    assert file.exists(), f"{page}: link to {target}: no file {file.relative_to(ROOT)}"
    if anchor:
        assert anchor in anchors(file), f"{page}: link to {target}: no heading with that anchor"


def test_the_link_check_sees_the_readme_links_and_can_fail():
    assert ("README.md", "docs/benchmarks.md") in LINKS
    assert slug("When something goes wrong") == "when-something-goes-wrong"
    assert slug("Real model on CPU (`bench/real_model.py`)") == "real-model-on-cpu-benchreal_modelpy"
    assert "no-such-heading" not in anchors(README)


# ---------------------------------------------------------------- the README leads with the quickstart


def test_the_readme_leads_with_the_quickstart_and_keeps_the_troubleshooting_table():
    sections = re.split(r"^## ", text(README), flags=re.MULTILINE)
    titles = [s.split("\n", 1)[0] for s in sections[1:]]
    assert titles[0] == "Quickstart"
    assert "make up ALGO=grpo" in sections[1] and "make test" in sections[1]
    trouble = sections[1 + titles.index("When something goes wrong")]
    assert trouble.count("\n| ") >= 15, "the troubleshooting table left the README"


# Issue 22 asks the README to show the CPU run's learning curve; every other picture stays on the benchmarks page.
README_PICTURES = {"stack-learning.png"}


def test_the_figures_live_in_the_benchmarks_page():
    """The README links to the figures; the pictures are shown on the benchmarks page (the README shows only the
    CPU stack's learning curve)."""
    bench = text(ROOT / "docs" / "benchmarks.md")
    assert bench.index("## Current figures") < bench.index("\n## ", bench.index("## Current figures") + 1)
    for picture in sorted((ROOT / "docs").glob("*.png")):
        assert f"]({picture.name})" in bench, f"docs/benchmarks.md does not show {picture.name}"
        if picture.name in README_PICTURES:
            assert f"](docs/{picture.name})" in text(README)
        else:
            assert picture.name not in text(README)


# ---------------------------------------------------------------- tables that copy a model


def table(page: Path, header_start: str) -> list[dict[str, str]]:
    """The markdown table whose header row starts with `header_start`, as dicts keyed by the header cells."""
    lines = text(page).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    header = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, [c.strip() for c in line.strip().strip("|").split("|")], strict=True)))
    return rows


def names(cell: str) -> set[str]:
    return set(re.findall(r"`\[?([\w.-]+)\]?`", cell))


def test_the_readme_key_file_table_is_the_key_file_model():
    """One row per variable the controller hands out (service_env.RECEIVERS), each with its receivers, whether it is
    secret (keyfile: every value but the non-secret names) and whether the key file must hold it (keyfile.REQUIRED)."""
    from hermes_stack import keyfile
    from hermes_stack.service_env import RECEIVERS

    rows = table(README, "| variable | secret |")
    named = {row["variable"].strip("`"): row for row in rows if row["variable"].startswith("`")}
    assert set(named) == set(RECEIVERS)
    for name, row in named.items():
        assert names(row["received by"]) == set(RECEIVERS[name]), name
        assert row["secret"] == ("yes" if keyfile.is_keyfile_secret(name) else "no"), name
        assert (row["required"] == "yes") == (name in keyfile.REQUIRED), name
    (other,) = [row for row in rows if not row["variable"].startswith("`")]
    assert other["received by"] == "none"
    # "secret: yes" for any other name, except the non-secret names the table does not list: the row names them
    assert names(other["meaning"]) >= keyfile.NON_SECRET_NAMES - set(RECEIVERS)


def test_the_key_file_example_holds_every_variable_of_the_table():
    from hermes_stack.service_env import RECEIVERS

    example = (ROOT / ".env.taotoken.example").read_text()
    assert set(re.findall(r"^#?([A-Z][A-Z0-9_]+)=", example, re.MULTILINE)) == set(RECEIVERS)


@pytest.mark.parametrize(("header", "model_name"), [("| section | keys | notes |", "AlgoConfig"),
                                                     ("| section | keys | notes |", "Settings")])
def test_the_configuration_tables_list_every_field_of_the_config_models(header, model_name):
    """docs/configuration.md: the TOML table and the JSON table, one row per section, keys = the model's fields."""
    from hermes_stack.config import models

    model = getattr(models, model_name)
    page = ROOT / "docs" / "configuration.md"
    marker = "## `config_<algo>.toml`" if model_name == "AlgoConfig" else "## `settings_<algo>.json`"
    section_text = text(page).split(marker, 1)[1].split("\n## ", 1)[0]
    start = section_text.index(header)
    rows = {}
    for line in section_text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`[]")] = names(cells[1])
    assert set(rows) == set(model.model_fields)
    for section, keys in rows.items():
        assert keys == set(model.model_fields[section].annotation.model_fields), section


def test_the_readme_names_the_sections_of_both_config_files():
    from hermes_stack.config.models import AlgoConfig, Settings

    configs = text(README).split("## The configs", 1)[1].split("\n## ", 1)[0]
    toml = next(line for line in configs.splitlines() if line.startswith("- `configs/config_<algo>.toml`"))
    json = next(line for line in configs.splitlines() if line.startswith("- `configs/settings_<algo>.json`"))
    assert names(toml.split(":", 1)[1]) == set(AlgoConfig.model_fields)
    assert names(json.split(":", 1)[1]) == set(Settings.model_fields)

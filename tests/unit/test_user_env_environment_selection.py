"""Selecting a user environment (review round): a folder file named like the built-in environment, a link out of
environments/, a broken module the environment imports, a NUL in the name, a class `name` ending in `.py`. Each bad
case is one line, exit 2, nothing started; a file the config does not select never breaks the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_environment_files_bad_inputs import RUNS, make_project, select, validate

from hermes_stack.controller.cli import main

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "fixtures" / "user_environments" / "upstream_sums.py"
pytestmark = pytest.mark.usefixtures("isolated_secrets")

HEAD = "from atroposlib.envs.base import BaseEnv\n\n\n"
# Atropos' own gsm8k_server.py calls itself "gsm8k" (its class GSM8kEnv), the built-in environment's name.
GSM8K_SERVER = HEAD + "class GSM8kEnv(BaseEnv):\n    name = \"gsm8k\"\n" + RUNS


@pytest.fixture
def project(tmp_path, monkeypatch):
    return make_project(tmp_path, monkeypatch)


def put(project: Path, name: str, text: str) -> Path:
    path = project / "environments" / name
    path.write_text(text)
    return path


def config_line(project: Path, found: str) -> str:
    return f"{project}/configs/config_grpo.toml: environment.name: found {found}"


# ---------------------------------------------------------------- 1. a file named like the built-in environment


def test_a_folder_file_named_like_the_built_in_does_not_break_the_shipped_config(project, capsys, compose_calls):
    """Atropos' gsm8k_server.py in environments/: the shipped config (the built-in gsm8k) was refused ("defined by
    the built-in environment and by environments/gsm8k_server.py … rename yours"). The bare name stays the
    built-in's; a warning says how to select the file."""
    put(project, "gsm8k_server.py", GSM8K_SERVER)
    code, errors, warnings = validate(project, capsys, compose_calls)
    assert (code, errors) == (0, [])
    assert warnings == [
        (f"{project}/configs/config_grpo.toml: environment.name: found 'gsm8k' (the built-in environment; "
        "environments/gsm8k_server.py:4 (GSM8kEnv) is named gsm8k too), expected the built-in environment or your "
        "file's path. Hint: to run your file, set [environment] name = \"environments/gsm8k_server.py\": the bare "
        "name gsm8k is the built-in's")]


def test_a_folder_file_named_like_the_built_in_is_listed_and_selected_by_its_path(project, capsys, compose_calls):
    from hermes_stack.controller.agent_tools.environments import list_environments as agent_list
    from hermes_stack.environments_catalog import environment_names, list_environments

    put(project, "gsm8k_server.py", GSM8K_SERVER)
    mine = [e for e in list_environments(project) if not e.builtin and e.class_name == "GSM8kEnv"]
    assert [e.name for e in mine] == ["environments/gsm8k_server.py"]
    assert environment_names(project).count("gsm8k") == 1
    agent = [e for e in agent_list(project) if e.get("class_name") == "GSM8kEnv"]
    assert [e["environment_name"] for e in agent] == ["environments/gsm8k_server.py"]
    assert main(["environments", "--root", str(project)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["environments/gsm8k_server.py", "GSM8kEnv"] for line in listed), listed
    select(project, "environments/gsm8k_server.py")
    assert validate(project, capsys, compose_calls) == (0, [], [])


def test_a_path_without_its_folder_suggests_no_built_in_name(project, capsys, compose_calls):
    put(project, "gsm8k_server.py", GSM8K_SERVER)
    select(project, "gsm8k_server.py")
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 2 and errors == [config_line(
        project, "'gsm8k_server.py' (no such file in the project root; environments/gsm8k_server.py is one), "
                 "expected 'environments/gsm8k_server.py'. Hint: write the path from the project root")]


# ---------------------------------------------------------------- 2. a link out of environments/


LINK_HINT = ("put the file itself in environments/ in place of the link (cp --remove-destination {target} "
             "environments/linked.py): only that folder reaches the containers, where the link leads nowhere")


@pytest.mark.parametrize("name", ["linked-env", "environments/linked.py"])
def test_a_link_out_of_the_folder_is_refused_by_name_and_by_path_alike(project, tmp_path_factory, capsys,
                                                                       compose_calls, name):
    outside = tmp_path_factory.mktemp("elsewhere") / "outside_env.py"
    outside.write_text(HEAD + "class Linked(BaseEnv):\n    name = 'linked-env'\n" + RUNS)
    (project / "environments" / "linked.py").symlink_to(outside)
    select(project, name)
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 2
    assert errors == [config_line(project, f"'{name}' (environments/linked.py, a link to {outside}, outside "
                                           "environments/), expected a file in environments/. Hint: "
                                           + LINK_HINT.format(target=outside))]


def test_a_link_within_the_folder_written_absolute_is_refused(project, capsys, compose_calls):
    """environments/alias.py -> /home/…/environments/upstream_sums.py: inside the folder here, but in the containers
    (the project at /app) that absolute path does not exist."""
    target = project / "environments" / "upstream_sums.py"
    (project / "environments" / "alias.py").symlink_to(target)
    select(project, "environments/alias.py")
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 2 and errors == [config_line(
        project, f"'environments/alias.py' (environments/alias.py, a link to the absolute path {target}), expected "
                 "a file in environments/, or a relative link within it. Hint: link it relative "
                 "(ln -sfr environments/upstream_sums.py environments/alias.py): in the containers the project is "
                 "at /app, so an absolute path of this machine's leads nowhere")]


def test_a_relative_link_within_the_folder_is_accepted(project, capsys, compose_calls):
    (project / "environments" / "alias.py").symlink_to("upstream_sums.py")
    select(project, "environments/alias.py")
    assert validate(project, capsys, compose_calls) == (0, [], [])


# ---------------------------------------------------------------- 3. what the environment's imports run


USES_HELPER = "from helper import score\n" + HEAD + "class UsesHelper(BaseEnv):\n    name = 'uses-helper'\n" + RUNS


@pytest.mark.parametrize("name", ["uses-helper", "environments/usehelper.py"])
def test_a_syntax_error_in_a_module_the_environment_imports_is_one_line(project, capsys, compose_calls, name):
    put(project, "usehelper.py", USES_HELPER)
    put(project, "helper.py", "def score(x):\n    return x +\n")
    select(project, name)
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 2
    assert errors == [
        ("environments/helper.py:2: import: found a syntax error (invalid syntax), in a module that "
        "environments/usehelper.py:1 imports, expected a file that Python can parse. Hint: fix the syntax error: "
        "the environment service runs environments/helper.py when it loads the environment")]


def test_the_service_fails_where_validate_now_refuses(project):
    """The evidence: user_env.load_class, as the service loads the file, stops at the helper's syntax error."""
    pytest.importorskip("atroposlib")
    from hermes_stack.environment import user_env
    from hermes_stack.environments_catalog import scan_folder
    from hermes_stack.errors import StackError

    put(project, "usehelper.py", USES_HELPER)
    put(project, "helper.py", "def score(x):\n    return x +\n")
    (info,) = [e for s in scan_folder(project) for e in s.environments if e.name == "uses-helper"]
    with pytest.raises(StackError, match="SyntaxError"):
        user_env.load_class(project, info)


def test_a_broken_module_the_environment_does_not_import_is_not_its_problem(project, capsys, compose_calls):
    put(project, "usehelper.py", USES_HELPER)
    put(project, "helper.py", "def score(x):\n    return x\n")
    put(project, "other.py", "def broken(:\n")
    select(project, "uses-helper")
    assert validate(project, capsys, compose_calls) == (0, [], [])


def test_a_relative_import_in_an_imported_module_is_one_line(project, capsys, compose_calls):
    put(project, "usehelper.py", USES_HELPER)
    put(project, "helper.py", "from .scoring import score\n")
    select(project, "uses-helper")
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 2 and len(errors) == 1
    assert errors[0].startswith("environments/helper.py:1: import: found a relative import (from .scoring import "
                                "score), in a module that environments/usehelper.py:1 imports"), errors


H_OUT_OF_SIGHT = ("unless the module binds it out of sight, Python stops at this import (ImportError)")


def test_a_name_an_installed_module_lacks_is_a_warning(project, capsys, compose_calls):
    """A warning, not a refusal: the module's text may not show every name it binds (a review found numpy's
    setattr'd dtypes, compiled submodules and guarded imports refused as missing, though they import fine)."""
    pytest.importorskip("atroposlib")
    put(project, "nosuch.py", "from atroposlib.envs.base import BaseEnv, NoSuchThing\n\n\n"
                              "class NoSuch(BaseEnv):\n    name = 'no-such'\n" + RUNS)
    select(project, "no-such")
    assert validate(project, capsys, compose_calls) == (0, [], [
        ("environments/nosuch.py:1: import: found NoSuchThing, which atroposlib.envs.base does not define (read from "
         "this machine's installed copy), expected names the module defines. Hint: check the spelling and the "
         f"installed version: {H_OUT_OF_SIGHT}")])


def test_a_name_bound_out_of_sight_is_never_refused(project, capsys, compose_calls):
    """numpy.dtypes sets StringDType with setattr inside a helper function: its text cannot show it; at most a
    warning, never exit 2 (it was refused before the review)."""
    pytest.importorskip("numpy")
    put(project, "fine.py", "from numpy.dtypes import StringDType\nfrom atroposlib.envs.base import BaseEnv\n\n\n"
                            "class Fine(BaseEnv):\n    name = 'fine'\n" + RUNS)
    select(project, "fine")
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 0 and errors == []


def test_a_name_missing_from_a_sibling_module_is_a_warning(project, capsys, compose_calls):
    put(project, "usehelper.py", USES_HELPER)
    put(project, "helper.py", "def scores(x):\n    return x\n")
    select(project, "uses-helper")
    assert validate(project, capsys, compose_calls) == (0, [], [
        ("environments/usehelper.py:1: import: found score, which environments/helper.py does not define, expected "
         f"names the module defines. Hint: check the spelling: {H_OUT_OF_SIGHT}")])


@pytest.mark.parametrize("line", [
    "from safetensors import _safetensors_rust",  # a compiled submodule
    "from atroposlib.envs.base import BaseEnv, ScoredDataGroup, APIServerConfig",  # defined or imported there
    "from atroposlib.envs import base",  # a submodule of the package
    "from os import path, getcwd",  # os binds names by a star import: not judged
    "from typing import List",
])
def test_names_an_installed_module_provides_are_accepted(project, capsys, compose_calls, line):
    pytest.importorskip("atroposlib")
    put(project, "fine.py", line + "\nfrom atroposlib.envs.base import BaseEnv\n\n\nclass Fine(BaseEnv):\n"
                            "    name = 'fine'\n" + RUNS)
    select(project, "fine")
    assert validate(project, capsys, compose_calls) == (0, [], [])


def test_the_upstream_fixture_passes_the_name_check(project, capsys, compose_calls):
    select(project, "upstream-sums")
    assert validate(project, capsys, compose_calls) == (0, [], [])


# ---------------------------------------------------------------- 4. a NUL in the name


@pytest.mark.parametrize("name", ["environments/a\u0000.py", "mine\u0000"])
def test_a_nul_in_the_name_is_one_line(project, capsys, compose_calls, name):
    select(project, name)
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 2
    assert errors == [config_line(project, f"{name!r} (a NUL character), expected an environment's name or a path "
                                           "of environments/. Hint: remove the \\u0000 from [environment] name")]


def test_a_nul_in_the_name_is_a_failure_of_the_mcp_tool_not_a_traceback(project):
    from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools, call

    tools = Tools(ServerConfig(root=project, device="cpu"))
    select(project, "environments/a\u0000.py")
    answer = json.loads(call(tools, None, "rl_get_current_config"))
    assert "failed unexpectedly" not in answer.get("error", "") and "NUL" in json.dumps(answer), answer


# ---------------------------------------------------------------- 5. a class name ending in .py


def test_a_class_name_ending_in_py_is_selected_by_that_name(project, capsys, compose_calls):
    """Listed as `sums.py`; selecting it said "found 'sums.py' (outside environments/)"."""
    from hermes_stack.environments_catalog import environment_names

    put(project, "sums.py", HEAD + "class Sums(BaseEnv):\n    name = 'sums.py'\n" + RUNS)
    assert "sums.py" in environment_names(project)
    select(project, "sums.py")
    assert validate(project, capsys, compose_calls) == (0, [], [])


def test_a_class_name_that_is_also_another_files_path_is_refused_as_ambiguous(project, capsys, compose_calls):
    put(project, "sums.py", HEAD + "class Sums(BaseEnv):\n    name = 'environments/upstream_sums.py'\n" + RUNS)
    select(project, "environments/upstream_sums.py")
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 2 and errors == [config_line(
        project, "'environments/upstream_sums.py', the name of environments/sums.py:4 (Sums) and the path of "
                 "environments/upstream_sums.py (UpstreamSumsEnv), expected one environment with that name. Hint: "
                 "rename the class's `name` (a name ending in .py reads as a path)")]

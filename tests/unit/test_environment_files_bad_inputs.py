"""Bad input in the project's environments/ folder (a bad-input sweep of the BaseEnv files and
environments/requirements.txt): each is one exact line, exit 2, nothing started, or, where the file is right, accepted.

Before: a requirements.txt that is not UTF-8, a symlink loop or a file Python's parser cannot take ended validate and
every MCP tool in `unexpected error`; a correct requirements.txt whose package imports under another name
(scikit-learn: sklearn) was refused; a selected file with a byte Python refuses or a relative import, an absolute
path, and requirements pip refuses (a pin against requirements.lock, two versions, `==latest`) passed validate and
failed at the image build or the environment's start.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import shutil
from pathlib import Path

import pytest
from test_validate_bad_inputs import error_lines

from hermes_stack.controller.cli import main

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "fixtures" / "user_environments" / "upstream_sums.py"
pytestmark = pytest.mark.usefixtures("isolated_secrets")

# What BaseEnv leaves to a subclass defined, as a file that runs must (environments_catalog: BASE_ENV_ABSTRACT,
# BASE_ENV_STUBS, BASE_ENV_ONE_OF)
RUNS = ("\n    async def get_next_item(self): ...\n\n    async def evaluate(self, *args, **kwargs): ...\n"
        "\n    async def setup(self): ...\n\n    async def collect_trajectories(self, item): ...\n")
ENV = b"from atroposlib.envs.base import BaseEnv\n\n\nclass Mine(BaseEnv):\n    name = 'mine'\n" + RUNS.encode()
H_UTF16 = 'Hint: save it as "UTF-8" (not "Unicode"); `iconv -f UTF-16 -t UTF-8` converts it'
H_PY_BYTE = ("Hint: save it as UTF-8, or declare its encoding on its first line (# -*- coding: latin-1 -*-): Python "
             "reads source files as UTF-8")
H_DEEP = ("Hint: split the long expression (thousands of chained or nested operations): Python cannot compile it "
          "either")
H_LARGE = ("Hint: keep data out of environments/*.py, which every command parses: a .json or .jsonl file read in "
           "setup(), or a package folder (environments/mydata/__init__.py), is not parsed")
H_LOCK = ("Hint: the image installs this file constrained by requirements.lock, so only the lock's version can be "
          "installed; the image build stops at any other")
TINY = "on the embedded profile's tiny model"
DEEP = "X = " + '"a" + ' * 3000 + '"a"\n'  # RecursionError in ast.parse (and in compile)


@pytest.fixture
def project(tmp_path, monkeypatch):
    return make_project(tmp_path, monkeypatch)


def make_project(tmp_path: Path, monkeypatch) -> Path:
    """A checkout's configs, compose files and lock, environments/ with the upstream-style file, no docker."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    for compose_file in ROOT.glob("compose.*.yml"):
        shutil.copy(compose_file, tmp_path / compose_file.name)
    shutil.copy(ROOT / "requirements.lock", tmp_path / "requirements.lock")
    (tmp_path / "environments").mkdir()
    shutil.copy(UPSTREAM, tmp_path / "environments" / "upstream_sums.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HERMES_ROOT", raising=False)
    monkeypatch.delenv("HERMES_KEYFILE", raising=False)
    (tmp_path / "no-docker").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-docker"))
    return tmp_path


def put(project: Path, name: str, data: bytes | str) -> Path:
    path = project / "environments" / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def select(project: Path, name: str, current: str = "gsm8k") -> None:
    """[environment] name = name (a TOML basic string, as json.dumps writes it: backslashes escaped)."""
    config = project / "configs" / "config_grpo.toml"
    text = config.read_text()
    changed = text.replace(f"name = {json.dumps(current)}", f"name = {json.dumps(name)}", 1)
    assert changed != text
    config.write_text(changed)


def validate(project: Path, capsys, compose_calls) -> tuple[int, list[str], list[str]]:
    """(exit code, error lines, warning lines) of validate, which started nothing."""
    code = main(["validate", "--algo", "grpo", "--device", "cpu", "--config-dir", str(project / "configs")])
    err = capsys.readouterr().err
    assert "unexpected error" not in err and "Traceback" not in err, err
    assert compose_calls == []
    warnings = [line.removeprefix("warning: ") for line in err.splitlines() if line.startswith("warning: ")]
    # Every user environment here runs on the CPU profile's tiny model, which earns each the same advice
    # (rules.environment_readable_by_the_tiny_model, tested below): left out of what the cases compare.
    return code, error_lines(err), [w for w in warnings if TINY not in w]


def refused(project: Path, capsys, compose_calls) -> list[str]:
    code, errors, _ = validate(project, capsys, compose_calls)
    assert code == 2, errors
    return errors


def config_line(project: Path, found: str) -> str:
    return f"{project}/configs/config_grpo.toml: environment.name: found {found}"


# ---------------------------------------------------------------- 1. requirements.txt that is not UTF-8


def test_a_requirements_txt_byte_that_is_not_utf8_is_one_line(project, capsys, compose_calls):
    put(project, "requirements.txt", b"sympy==1.14.0 # caf\xe9\n")
    assert refused(project, capsys, compose_calls) == [
        ("environments/requirements.txt:1: (file): found a byte that is not UTF-8 (0xe9), expected UTF-8 text. Hint: "
         "save it as UTF-8: pip reads it as UTF-8 in the image")]


def test_a_requirements_txt_with_a_utf8_bom_is_accepted(project, capsys, compose_calls):
    """pip skips the mark; so does validate (it ended in UnicodeDecodeError before only for other bytes)."""
    put(project, "requirements.txt", b"\xef\xbb\xbfsympy==1.14.0\n")
    assert validate(project, capsys, compose_calls) == (0, [], [])


def test_a_requirements_txt_in_utf16_without_its_mark_is_one_line_not_garbled_ones(project, capsys, compose_calls):
    put(project, "requirements.txt", "sympy==1.14.0\nmpmath==1.3.0\n".encode("utf-16-le"))
    assert refused(project, capsys, compose_calls) == [
        f"environments/requirements.txt:1: (file): found UTF-16 text, expected UTF-8 text. {H_UTF16}"]


def test_a_requirements_txt_in_utf16_with_its_mark_is_read_as_pip_reads_it(project):
    """pip decodes a requirements file by its UTF-16/32 byte-order mark (req_file.auto_decode), so the image build
    installs it: not refused (a review found the first version of this check stricter than pip)."""
    from hermes_stack.environments_requirements import read_requirements, requirement_problems

    put(project, "requirements.txt", "sympy==1.14.0\nmpmath==1.3.0\n".encode("utf-16"))
    assert read_requirements(project).lines == ((1, "sympy==1.14.0"), (2, "mpmath==1.3.0"))
    assert requirement_problems(project) == []


# ---------------------------------------------------------------- 2. import names that differ from the package's


def _not_installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return True
    return False


@pytest.mark.parametrize(("requirement", "module"), [
    ("scikit-learn==1.5.2", "sklearn"), ("beautifulsoup4==4.12.3", "bs4"), ("opencv-python==4.10.0.84", "cv2"),
    ("pillow==13.0.0", "PIL"), ("python-Levenshtein==0.26.1", "Levenshtein")])
def test_an_import_a_listed_requirement_provides_under_another_name_is_not_refused(requirement, module, project,
                                                                                   capsys, compose_calls):
    pytest.importorskip("atroposlib")  # the import check runs where atroposlib is installed
    put(project, "requirements.txt", requirement + "\n")
    put(project, "mine.py", f"import {module}\n".encode() + ENV)
    select(project, "mine")
    code, errors, warnings = validate(project, capsys, compose_calls)
    assert (code, errors) == (0, [])
    if _not_installed(requirement.split("==")[0]):  # its modules are unknown here: said, not refused
        assert warnings == [
            (config_line(project, f"'mine', whose file imports {module} (environments/mine.py:1)") + ", expected "
             f"imports the environment image has. Hint: not checked: {requirement} (environments/requirements.txt) is "
             "not installed on this host, so the modules it provides are unknown here; fine if it provides these")]
    else:  # installed here (pillow, through matplotlib): its modules are read, nothing to say
        assert warnings == []


def test_an_import_no_listed_requirement_provides_is_refused_when_every_requirement_is_known(project, capsys,
                                                                                              compose_calls):
    pytest.importorskip("atroposlib")
    if not _not_installed("scikit-learn"):
        pytest.skip("scikit-learn is installed here")
    put(project, "requirements.txt", "packaging==26.4\n")  # installed here: its modules are known (packaging)
    put(project, "mine.py", b"import sklearn\n" + ENV)
    select(project, "mine")
    assert refused(project, capsys, compose_calls) == [
        (config_line(project, "'mine', whose file imports sklearn (environments/mine.py:1)") + ", expected imports "
         "the environment image has. Hint: add the package, pinned (name==version), to environments/requirements.txt "
         "and rebuild the images: make images (make up rebuilds them too)")]


def test_an_import_under_type_checking_is_not_required(project, capsys, compose_calls):
    put(project, "mine.py", b"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import surely_not_here\n"
        + ENV)
    select(project, "mine")
    assert validate(project, capsys, compose_calls) == (0, [], [])


# ---------------------------------------------------------------- 3. links that loop or lead nowhere


def test_a_selected_symlink_loop_is_one_line(project, capsys, compose_calls):
    (project / "environments" / "loop.py").symlink_to("loop.py")
    select(project, "environments/loop.py")
    assert refused(project, capsys, compose_calls) == [
        config_line(project, "'environments/loop.py' (a symlink that loops), expected a BaseEnv file. Hint: point the "
                             "link at the file (ls -l environments/loop.py shows where it leads), or put the file "
                             "itself in its place")]


def test_a_selected_dangling_link_says_where_it_leads(project, capsys, compose_calls):
    (project / "environments" / "dangling.py").symlink_to("/nonexistent/x.py")
    select(project, "environments/dangling.py")
    assert refused(project, capsys, compose_calls) == [
        config_line(project, "'environments/dangling.py' (a link to /nonexistent/x.py, a file that does not exist), "
                             "expected a BaseEnv file. Hint: point the link at an existing file in environments/, or "
                             "put the file itself there: only that folder reaches the containers")]


def test_an_unselected_symlink_loop_is_skipped(project, capsys, compose_calls):
    (project / "environments" / "loop.py").symlink_to("loop.py")
    select(project, "upstream-sums")
    assert validate(project, capsys, compose_calls) == (0, [], [])


# ---------------------------------------------------------------- 4. files the parser cannot take, files too large


def test_a_file_too_deeply_nested_is_an_unreadable_file_not_a_crash(project, capsys, compose_calls):
    put(project, "deep.py", DEEP)
    select(project, "upstream-sums")  # another file: validate goes on
    assert validate(project, capsys, compose_calls) == (0, [], [])
    assert main(["environments", "--root", str(project)]) == 0
    captured = capsys.readouterr()
    assert any(line.startswith("upstream-sums") for line in captured.out.splitlines())
    assert error_lines(captured.err) == []
    assert [line for line in captured.err.splitlines() if line.startswith("warning: ")] == [
        f"warning: environments/deep.py cannot be read (too deeply nested); its environments are not listed. {H_DEEP}"]


def test_a_selected_file_too_deeply_nested_is_one_line(project, capsys, compose_calls):
    put(project, "deep.py", "X = " + "-" * 5000 + "1\n")  # MemoryError or RecursionError in ast.parse
    select(project, "environments/deep.py")
    assert refused(project, capsys, compose_calls) == [
        config_line(project, "'environments/deep.py' (environments/deep.py cannot be read (too deeply nested)), "
                             f"expected a file that Python can parse. {H_DEEP}")]


def test_a_file_above_the_size_cap_is_not_parsed(project, capsys, compose_calls):
    from hermes_stack.environments_catalog import MAX_SCAN_BYTES, scan_folder

    put(project, "data.py", "X = 1\n" * (MAX_SCAN_BYTES // 6 + 1))
    (error,) = [scan.error for scan in scan_folder(project) if scan.error]
    assert error == "environments/data.py is too large to scan (1.0 MB, above the 1 MB limit)"
    select(project, "environments/data.py")
    assert refused(project, capsys, compose_calls) == [
        config_line(project, f"'environments/data.py' ({error}), expected an environment file under 1 MB. {H_LARGE}")]


def test_the_mcp_tools_answer_despite_an_unreadable_folder_file(project):
    from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools, call

    put(project, "deep.py", DEEP)
    put(project, "requirements.txt", b"sympy==1.14.0 # caf\xe9\n")
    (project / "environments" / "loop.py").symlink_to("loop.py")
    select(project, "environments/loop.py")
    tools = Tools(ServerConfig(root=project, device="cpu"))
    for tool in ("rl_list_environments", "rl_get_current_config"):
        answer = json.loads(call(tools, None, tool))
        assert "failed unexpectedly" not in answer.get("error", ""), answer
    listed = json.loads(call(tools, None, "rl_list_environments"))
    assert listed["unreadable_files"] == ["environments/deep.py cannot be read (too deeply nested)"]


# ---------------------------------------------------------------- 5. selected files Python would not decode


def test_a_selected_file_with_a_byte_that_is_not_utf8_is_one_line(project, capsys, compose_calls):
    put(project, "latin.py", ENV.replace(b"\nclass", b"\n# caf\xe9\nclass"))
    select(project, "mine")
    assert refused(project, capsys, compose_calls) == [
        f"environments/latin.py:4: (file): found a byte that is not UTF-8 (0xe9), expected UTF-8 text. {H_PY_BYTE}"]


def test_a_file_with_such_a_byte_is_accepted_when_not_selected_or_when_it_declares_its_encoding(project, capsys,
                                                                                                compose_calls):
    put(project, "latin.py", ENV.replace(b"\nclass", b"\n# caf\xe9\nclass"))
    select(project, "upstream-sums")
    assert validate(project, capsys, compose_calls) == (0, [], [])
    put(project, "latin.py", b"# -*- coding: latin-1 -*-\n" + ENV.replace(b"\nclass", b"\n# caf\xe9\nclass"))
    select(project, "mine", current="upstream-sums")
    assert validate(project, capsys, compose_calls) == (0, [], [])


def test_a_byte_that_is_not_utf8_in_code_is_named_not_the_syntax_error_it_reads_as():
    from hermes_stack.environments_catalog import scan_bytes

    scan = scan_bytes(ENV + b"caf\xe9 = 1\n", "environments/latin.py")
    line = ENV.count(b"\n") + 1  # the line after ENV's
    assert scan.error == f"environments/latin.py cannot be read (a byte that is not UTF-8 (0xe9) on line {line})"
    assert scan.fix[0] == "UTF-8 text"


def test_a_selected_utf16_file_says_utf16_without_none(project, capsys, compose_calls):
    put(project, "u16.py", ENV.decode().encode("utf-16"))
    select(project, "environments/u16.py")
    assert refused(project, capsys, compose_calls) == [
        config_line(project, "'environments/u16.py' (environments/u16.py cannot be read (UTF-16 text)), expected "
                             f"UTF-8 text. {H_UTF16}")]


def test_a_nul_byte_names_its_line():
    from hermes_stack.environments_catalog import scan_bytes

    scan = scan_bytes(ENV + b"X = 1\x00\n", "environments/nul.py")
    line = ENV.count(b"\n") + 1  # the line after ENV's
    assert (scan.error, scan.fix) == (f"environments/nul.py cannot be read (a NUL byte (0x00) on line {line})",
                                      ("text without NUL bytes",
                                       "the file is binary or damaged: save it again as UTF-8 text"))


# ---------------------------------------------------------------- 6. relative imports


def test_a_selected_file_with_a_relative_import_is_one_line(project, capsys, compose_calls):
    put(project, "helpers.py", "def score(x):\n    return x\n")
    put(project, "rel.py", b'"""Scores with the helpers."""\n\n\n' + ENV.replace(b"\n\n\nclass",
                                                                               b"\nfrom .helpers import score\n\n\nclass"))
    select(project, "mine")
    assert refused(project, capsys, compose_calls) == [
        ("environments/rel.py:5: import: found a relative import (from .helpers import score), expected an absolute "
         "import. Hint: write `from helpers import score`: the environment service loads the file as a top-level "
         "module, with environments/ on sys.path, not as part of a package")]


def test_a_relative_import_with_an_absolute_fallback_is_accepted(project, capsys, compose_calls):
    put(project, "helpers.py", "def score(x):\n    return x\n")
    put(project, "rel.py", b"try:\n    from .helpers import score\nexcept ImportError:\n    from helpers import score\n"
        + ENV)
    select(project, "mine")
    assert validate(project, capsys, compose_calls) == (0, [], [])


# ---------------------------------------------------------------- 7. paths the services would not find


def test_a_file_of_the_folder_named_without_the_folder_says_the_path(project, capsys, compose_calls):
    select(project, "upstream_sums.py")
    assert refused(project, capsys, compose_calls) == [
        config_line(project, "'upstream_sums.py' (no such file in the project root; environments/upstream_sums.py is "
                             "one), expected 'environments/upstream_sums.py'. Hint: write the path from the project "
                             "root, or use the environment's name 'upstream-sums'")]


def test_a_windows_path_is_told_to_use_slashes(project, capsys, compose_calls):
    select(project, "environments\\upstream_sums.py")
    assert refused(project, capsys, compose_calls) == [
        config_line(project, "'environments\\\\upstream_sums.py' (a Windows path), expected "
                             "'environments/upstream_sums.py', a path from the project root with /. Hint: separate "
                             "folders with /: the services read the path on Linux, where \\ is part of a file name")]


def test_an_absolute_path_into_the_folder_is_refused(project, capsys, compose_calls):
    path = project / "environments" / "upstream_sums.py"
    select(project, str(path))
    assert refused(project, capsys, compose_calls) == [
        config_line(project, f"'{path}' (an absolute path), expected 'environments/upstream_sums.py', relative to the "
                             "project root. Hint: write it relative: in the containers the project is at /app, so a "
                             "path of this machine's does not exist there")]


# ---------------------------------------------------------------- 8. requirements pip would refuse


def test_requirements_the_image_build_would_refuse_are_one_line_each(project, capsys, compose_calls):
    put(project, "requirements.txt", "# ours\npydantic==1.10.0\nsympy==1.14.0\nSymPy==1.13.0\nmpmath==latest\n"
                                     "sympy==1.14\npydantic_core==2.50.5\n")
    assert refused(project, capsys, compose_calls) == [
        ("environments/requirements.txt:2: requirement: found 'pydantic==1.10.0' (requirements.lock pins "
         f"pydantic==2.14.4), expected pydantic==2.14.4. {H_LOCK}"),
        ("environments/requirements.txt:4: requirement: found 'SymPy==1.13.0' (line 3 pins sympy==1.14.0), expected "
         "each package pinned to one version. Hint: keep one of the two lines: pip cannot install both, and the image "
         "build stops"),
        ("environments/requirements.txt:5: requirement: found 'mpmath==latest' ('latest' is not a version), expected "
         "name==version with a version pip reads (PEP 440: 1.14.0, 2.0rc1). Hint: pin the release to install, as "
         "requirements.lock does; pip refuses the line"),
    ]  # sympy==1.14 is 1.14.0 to pip, and pydantic_core's pin is the lock's (names compared as pip does)


def test_without_a_lock_the_lock_is_not_compared(project, capsys, compose_calls):
    (project / "requirements.lock").unlink()
    put(project, "requirements.txt", "pydantic==1.10.0\n")
    assert validate(project, capsys, compose_calls) == (0, [], [])


def test_the_catalog_reads_a_bom_and_a_coding_line_as_pip_does(tmp_path):
    from hermes_stack.environments_requirements import read_requirements, requirement_problems

    (tmp_path / "environments").mkdir()
    req = tmp_path / "environments" / "requirements.txt"
    req.write_bytes(b"# -*- coding: latin-1 -*-\nsympy==1.14.0  # caf\xe9\n")
    assert (list(read_requirements(tmp_path).lines), requirement_problems(tmp_path)) == ([(2, "sympy==1.14.0")], [])
    req.write_bytes(b"\xef\xbb\xbfsympy==1.14.0\r\n")
    assert (list(read_requirements(tmp_path).lines), requirement_problems(tmp_path)) == ([(1, "sympy==1.14.0")], [])


def test_a_users_environment_on_the_tiny_model_gets_one_warning_and_with_a_real_model_none(project, capsys,
                                                                                          compose_calls):
    """Round 6: the CPU profile's tiny model reads digits and + = # only, so an upstream environment's prompts would
    be <unk> tokens; validate said nothing. Advice, not a refusal: upstream_sums.py is made for it."""
    select(project, "upstream-sums")
    code = main(["validate", "--algo", "grpo", "--device", "cpu", "--config-dir", str(project / "configs")])
    err = capsys.readouterr().err
    assert code == 0 and [line for line in err.splitlines() if line.startswith("warning: ")] == [
        (f"warning: {project}/configs/config_grpo.toml: environment.name: found 'upstream-sums' {TINY}, expected "
         "prompts of digits and + = # within 16 tokens. Hint: its tokenizer knows only digits, + = # and blanks: fine "
         "for sums like 3+4=, but a prompt with other characters arrives as <unk> tokens; for such a task train a "
         "real model on CPU with --model smollm2-135m (make up MODEL=smollm2-135m), or use a GPU")]
    code = main(["validate", "--algo", "grpo", "--device", "cpu", "--model", "smollm2-135m", "--config-dir",
                 str(project / "configs")])
    assert code == 0 and "warning: " not in capsys.readouterr().err
    assert compose_calls == []


def test_a_class_deriving_from_another_files_environment_is_an_environment(project, capsys, compose_calls):
    """Round 6: `from common_base import MathBase` then `class MyTask(MathBase)` was refused ("defines no BaseEnv
    subclass"), a false refusal; the service imports the file with environments/ on sys.path, where it resolves.
    A chain across three files resolves too, by name and by path."""
    put(project, "common_base.py", "from atroposlib.envs.base import BaseEnv\n\n\nclass MathBase(BaseEnv):\n"
                                   "    name = 'math-base'\n")
    put(project, "my_task.py", "from common_base import MathBase\n\n\nclass MyTask(MathBase):\n    name = 'my-task'\n")
    put(project, "z_more.py", "from my_task import MyTask as Task\n\n\nclass More(Task):\n    name = 'more'\n")
    put(project, "unrelated.py", "from common_base import helper\n\n\nclass Other(object):\n    name = 'other'\n")
    from hermes_stack.environments_catalog import environment_names

    assert {"math-base", "my-task", "more"} <= set(environment_names(project)) and "other" not in environment_names(
        project)
    for name, current in (("my-task", "gsm8k"), ("more", "my-task"), ("environments/z_more.py", "more")):
        select(project, name, current)
        code, errors, warnings = validate(project, capsys, compose_calls)
        assert (code, errors, warnings) == (0, [], []), (name, errors, warnings)


def test_environments_never_prints_a_key_of_the_key_file(project, capsys):
    """Round 6: `environments` did not load the key file, so a key pasted into an environment's docstring or name
    was printed in clear (validate and the MCP tools redact it)."""
    key = "plainsecret" + "a1b2c3" * 3  # no key shape: only the key file says it is secret
    keyfile = project / ".env.taotoken"
    keyfile.write_text(f"TAOTOKEN_API_KEY={key}\nTAOTOKEN_BASE_URL=http://127.0.0.1:9\n")
    keyfile.chmod(0o600)
    put(project, "leaky.py", "from atroposlib.envs.base import BaseEnv\n\n\nclass Leaky(BaseEnv):\n"
                             f'    """Scored with {key} on the gateway."""\n\n    name = "leaky"\n')
    assert main(["environments"]) == 0
    out, err = capsys.readouterr()
    assert key not in out + err and "leaky" in out and "Scored with " in out


def test_a_coding_line_naming_no_text_encoding_is_an_unreadable_file_not_a_crash(project, capsys, compose_calls):
    """Review: `# -*- coding: hex -*-` (a codec, not a text encoding) ended every command in LookupError."""
    put(project, "hexed.py", "# -*- coding: hex -*-\nx = 1\n")
    code, errors, _warnings = validate(project, capsys, compose_calls)  # the built-in gsm8k selected: still valid
    assert (code, errors) == (0, [])
    from hermes_stack.environments_catalog import unreadable

    assert unreadable(project) == [("environments/hexed.py cannot be read (a coding line naming hex, which is not a "
                                   "text encoding)")]


def test_environments_of_another_checkout_redacts_that_checkouts_key(project, tmp_path, capsys, monkeypatch):
    """The key file of the project listed (--root), not of the folder the command runs in."""
    key = "plainsecret" + "d4e5f6" * 3
    keyfile = project / ".env.taotoken"
    keyfile.write_text(f"TAOTOKEN_API_KEY={key}\nTAOTOKEN_BASE_URL=http://127.0.0.1:9\n")
    keyfile.chmod(0o600)
    put(project, "leaky.py", "from atroposlib.envs.base import BaseEnv\n\n\nclass Leaky(BaseEnv):\n"
                             f'    """Scored with {key}."""\n\n    name = "leaky"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["environments", "--root", str(project)]) == 0
    out, err = capsys.readouterr()
    assert key not in out + err and "Scored with " in out



def test_a_class_leaving_atroposlibs_abstract_methods_undefined_is_one_line(project, capsys, compose_calls):
    """atroposlib cannot create such a class (TypeError: Can't instantiate abstract class), so the environment
    stopped at its start; validate accepted it. A base of the same file that defines them counts; a base from
    elsewhere (an import, another file) may define them, so it is not judged."""
    from atroposlib.envs.base import BaseEnv

    from hermes_stack.environments_catalog import BASE_ENV_ABSTRACT

    assert tuple(sorted(BaseEnv.__abstractmethods__)) == BASE_ENV_ABSTRACT  # the names validate reads from source
    put(project, "half.py", "from atroposlib.envs.base import BaseEnv\n\n\nclass Half(BaseEnv):\n"
                            "    name = 'half'\n\n    async def get_next_item(self): ...\n\n"
                            "    async def collect_trajectory(self, item): ...\n")
    select(project, "half")
    assert refused(project, capsys, compose_calls) == [
        ("environments/half.py:4: class: found Half without evaluate, setup, expected a class defining what "
         "atroposlib's BaseEnv leaves to it (evaluate, get_next_item, setup and collect_trajectories or "
         "collect_trajectory). Hint: define them (async def evaluate(self, *args, **kwargs): ...; async def "
         "setup(self): ...): atroposlib cannot create the class without the first two, and BaseEnv's own setup and "
         "collect_trajectory raise NotImplementedError, so the environment would stop at its start")]
    put(project, "half.py", "from atroposlib.envs.base import BaseEnv\n\n\nclass Half(BaseEnv):\n"
                            "    name = 'half'\n" + RUNS.replace("    async def collect_trajectories(self, item): ...\n",
                                                              ""))
    # The review's case: evaluate and get_next_item defined, BaseEnv's setup and collect_trajectory left as they are
    assert refused(project, capsys, compose_calls) == [
        ("environments/half.py:4: class: found Half without collect_trajectories, expected a class defining what "
         "atroposlib's BaseEnv leaves to it (evaluate, get_next_item, setup and collect_trajectories or "
         "collect_trajectory). Hint: define them (async def collect_trajectories(self, item): ...): atroposlib cannot "
         "create the class without the first two, and BaseEnv's own setup and collect_trajectory raise "
         "NotImplementedError, so the environment would stop at its start")]
    put(project, "half.py", "from atroposlib.envs.base import BaseEnv\n\n\nclass Half(BaseEnv):\n"
                            "    name = 'half'\n" + RUNS)
    put(project, "whole.py", "from half import Half\n\n\nclass Whole(Half):\n    name = 'whole'\n")
    put(project, "mixed.py", "from atroposlib.envs.base import BaseEnv\nfrom somewhere import Mixin\n\n\n"
                             "class Mixed(Mixin, BaseEnv):\n    name = 'mixed'\n")
    for name, current in (("whole", "half"), ("mixed", "whole")):
        select(project, name, current)
        _code, errors, _ = validate(project, capsys, compose_calls)
        assert not any("BaseEnv leaves to it" in line for line in errors), (name, errors)



def test_basenvs_stubs_are_the_ones_validate_requires():
    """BASE_ENV_STUBS and BASE_ENV_ONE_OF track atroposlib: BaseEnv's bodies of those methods raise."""
    import asyncio

    from atroposlib.envs.base import BaseEnv

    from hermes_stack.environments_catalog import BASE_ENV_ONE_OF, BASE_ENV_STUBS

    class Bare(BaseEnv):
        async def get_next_item(self): ...

        async def evaluate(self, *args, **kwargs): ...

    bare = Bare.__new__(Bare)  # the methods below read nothing of an instance's state before they raise
    for method, args in ((BASE_ENV_STUBS[0], ()), (BASE_ENV_ONE_OF[1], (None,))):
        with pytest.raises(NotImplementedError):
            asyncio.run(getattr(bare, method)(*args))


def test_a_class_on_basenv_without_its_import_is_one_line(project, capsys, compose_calls):
    """The file's import stopped at NameError in the environment's start; validate accepted it (the scanner reads
    `BaseEnv` by name)."""
    put(project, "orphan.py", "class Orphan(BaseEnv):\n    name = 'orphan'\n" + RUNS)
    select(project, "orphan")
    assert refused(project, capsys, compose_calls) == [
        ("environments/orphan.py:1: class: found class Orphan(BaseEnv) without an import of BaseEnv, expected BaseEnv "
        "imported from atroposlib. Hint: add `from atroposlib.envs.base import BaseEnv` at the top: Python stops at "
        "the class otherwise (NameError)")]
    put(project, "starred.py", "from atroposlib.envs.base import *\n\n\nclass Starred(BaseEnv):\n"
                               "    name = 'starred'\n" + RUNS)
    select(project, "starred", "orphan")
    code, errors, _ = validate(project, capsys, compose_calls)
    assert (code, errors) == (0, []), errors


@pytest.mark.parametrize("body", [
    "class E(ToolMixin[str], BaseEnv):\n    name = 'e'\n",  # a base written as an expression may supply them
    ("def _s(self): ...\n\n\ndef _c(self, item): ...\n\n\nclass E(BaseEnv):\n    name = 'e'\n"
     "    setup, collect_trajectory = _s, _c\n"),  # bound by a tuple assignment
    "def deco(cls):\n    return cls\n\n\n@deco\nclass E(BaseEnv):\n    name = 'e'\n",  # a decorator may add them
    "class E(BaseEnv, metaclass=type):\n    name = 'e'\n",
    ("class E(BaseEnv):\n    name = 'e'\n    if True:\n        async def setup(self): ...\n    try:\n"
     "        async def collect_trajectories(self, item): ...\n    except Exception:\n        pass\n"),
    ("class E(BaseEnv):\n    name = 'e'\n    match 1:\n        case 1:\n            async def setup(self): ...\n"
     "            async def collect_trajectory(self, item): ...\n"),
    "class E(BaseEnv):\n    name = 'e'\n    from mixins import setup, collect_trajectory\n",
    "class E(BaseEnv):\n    name = 'e'\n    x = [(setup := 1), (collect_trajectories := 2)]\n",
    ("class B(BaseEnv):\n    def __init_subclass__(cls, **kwargs):\n        cls.setup = None\n\n\n"
     "class E(B):\n    name = 'e'\n"),
])
def test_setup_and_collect_supplied_out_of_plain_sight_are_not_refused(body):
    """A review found valid files the new setup / collect_trajectories rule refused: a wrongly refused file is worse
    than a late error, so what the class's text cannot show is not judged."""
    from hermes_stack.environments_catalog import scan_source

    source = ("from atroposlib.envs.base import BaseEnv\nfrom mixins import ToolMixin\n\n\n" + body
              + "\n    async def get_next_item(self): ...\n\n    async def evaluate(self, *args, **kwargs): ...\n")
    env = next(e for e in scan_source(source, "environments/e.py").environments if e.class_name == "E")
    assert env.abstract == ()
    patched = source.replace("    setup, collect_trajectory = _s, _c\n", "") + "\n\nE.setup = E.collect_trajectory = _s\n"
    if patched != source + "\n\nE.setup = E.collect_trajectory = _s\n":  # set from outside the class: not judged
        (env,) = scan_source(patched, "environments/e.py").environments
        assert env.abstract == ()
    missing = source.replace("    setup, collect_trajectory = _s, _c\n", "")
    if missing != source:  # the same class without the assignment is judged, and lacks both
        (env,) = scan_source(missing, "environments/e.py").environments
        assert env.abstract == ("setup", "collect_trajectories")

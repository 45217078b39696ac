"""`hermes-stack validate` (and the commands and MCP tools that share its checks) on bad inputs, round 9, found by a
review:
1. a config file that is a named pipe or a link to /dev/zero hung validate or filled the memory;
2. a key-file line python-dotenv cannot read was echoed with its upper-case pieces, which may be a key's;
3. a zero-width space, a blank or port 0 in a key file's URL, or blanks in TAOTOKEN_MODEL, passed validate;
4. a path component over 255 characters was "unexpected error: OSError … File name too long", exit 1;
5. `${VAR}` inside a key-file value was filled in from this machine's environment without a word;
6. `up --wait-timeout` had no upper bound;
7. HERMES_SGLANG_IMAGE / HERMES_BASE_IMAGE were not checked as image references;
8. invisible Unicode controls (U+0085, U+2028, U+202E) passed the "printable text" rule.

Same contract as test_validate_bad_inputs.py, whose machinery this reuses: the exact one-line messages, exit 2, no
call to the compose choke point, no new container, the key never printed.
"""

from __future__ import annotations

import os
import threading

import pytest
from test_cli_bad_inputs import project, refused  # noqa: F401 - the fixture
from test_validate_bad_inputs import CONFIGS, GOOD_KEYFILE, KEY, Case, error_lines, run_case

from hermes_stack.controller.cli import main

pytestmark = pytest.mark.usefixtures("isolated_secrets")


# ---------------------------------------------------------------- 1: a config file that is a pipe or a device


@pytest.mark.parametrize(("name", "make", "found"), [
    ("settings_grpo.json", "fifo", "a named pipe"),
    ("config_grpo.toml", "fifo", "a named pipe"),
    ("config_grpo.toml", "zero", "a character device"),
    ("settings_grpo.json", "zero", "a character device"),
])
def test_a_config_file_that_is_a_pipe_or_a_device_is_one_line(name, make, found, tmp_path, monkeypatch, capsys,
                                                              compose_calls):
    """read_bytes() on a pipe waited for a writer forever; on a link to /dev/zero it filled the memory."""
    import shutil

    cdir = tmp_path / "configs"
    shutil.copytree(CONFIGS, cdir)
    target = cdir / name
    target.unlink()
    if make == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    monkeypatch.chdir(tmp_path)
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(main(["validate", "--algo", "grpo", "--config-dir",
                                                               str(cdir), "--device", "cpu"])), daemon=True)
    worker.start()
    worker.join(30)
    if not done:  # unblock the reader so the thread ends, then fail
        if make == "fifo":
            with open(target, "wb"):
                pass
        pytest.fail("validate hung on the file")
    kind = "JSON" if name.endswith(".json") else "TOML"
    assert error_lines(capsys.readouterr().err) == [
        (f"{target}: (file): found {found}, expected a regular {kind} file. Hint: restore it from git (`git checkout "
         f"-- {target}`); a device or a pipe cannot be read as a config file")]
    assert done == [2] and compose_calls == []


# ---------------------------------------------------------------- the key file (2, 3, 5)

H_SYNTAX = "Hint: one NAME=value per line, no quotes; `#` starts a comment"
H_BRACES = ("expected the value itself, without ${{…}}. Hint: the key file is read as it is written: nothing in it is "
            "filled in from the environment; write the whole value")
H_GATEWAY = "set TAOTOKEN_BASE_URL=https://taotoken.net/api"
TINKER_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"
H_TINKER_URL = f"Hint: set TINKER_BASE_URL={TINKER_URL}, or remove the line for the default"
H_MODEL = ("expected a model name without blanks or invisible characters, e.g. claude-3-5-sonnet. Hint: copy the "
           "model's id from the gateway's model list and retype it on a plain keyboard")
CAPITALS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ123456"

KEYFILE_CASES = [
    # 2: only the table's names are shown; an upper-case word may be a key or a piece of one
    Case("keyfile-capitals-key-after-a-space", [
        ("{kf}:1: TAOTOKEN_API_KEY: found a line python-dotenv cannot read (TAOTOKEN_API_KEY ABC…3456), expected "
         "NAME=value. Hint: write NAME=value: a space where the = should be")],
        keyfile=GOOD_KEYFILE.replace(f"TAOTOKEN_API_KEY={KEY}", f"TAOTOKEN_API_KEY {CAPITALS}")),
    Case("keyfile-unclosed-quote-with-capital-pieces", [
        (f"{{kf}}:1: TAOTOKEN_API_KEY: found a line python-dotenv cannot read (TAOTOKEN_API_KEY=\"… … …), expected "
        f"NAME=value. {H_SYNTAX}")],
        keyfile=GOOD_KEYFILE.replace(f"TAOTOKEN_API_KEY={KEY}", 'TAOTOKEN_API_KEY="ABCD STUV WXYZ123456')),
    Case("keyfile-unknown-capital-words", [
        f"{{kf}}:4: syntax: found a line python-dotenv cannot read (… …), expected NAME=value. {H_SYNTAX}"],
        keyfile=GOOD_KEYFILE + "ABCDEFGHIJ KLMNOPQRST\n"),
    # 3: every URL of the key file is one an HTTP client can call (httpx raised InvalidURL in test-inference)
    Case("keyfile-base-url-zero-width-space", [
        ("{kf}:2: TAOTOKEN_BASE_URL: found U+200B (ZERO WIDTH SPACE) at position 21, expected an ASCII URL. Hint: "
         f"retype the URL on a plain keyboard (an invisible character came with a copy); {H_GATEWAY}")],
        keyfile=GOOD_KEYFILE.replace("taotoken.net/api", "taotoken.net\u200b/api")),
    Case("keyfile-base-url-port-0", [
        ("{kf}:2: TAOTOKEN_BASE_URL: found https://taotoken.net:0/api (port 0), expected a port from 1 to 65535, or "
         f"none for the scheme's own. Hint: write the port the service listens on, or leave :0 out; {H_GATEWAY}")],
        keyfile=GOOD_KEYFILE.replace("taotoken.net/api", "taotoken.net:0/api")),
    Case("keyfile-tinker-url-zero-width-space", [
        ("{kf}:4: TINKER_BASE_URL: found U+200B (ZERO WIDTH SPACE) at position 15, expected an ASCII URL. Hint: "
         f"retype the URL on a plain keyboard (an invisible character came with a copy); "
         f"{H_TINKER_URL.removeprefix('Hint: ')}")],
        keyfile=GOOD_KEYFILE + "TINKER_BASE_URL=https://tinker\u200b.example/api\n"),
    Case("keyfile-tinker-url-not-a-url", [
        f"{{kf}}:4: TINKER_BASE_URL: found not a url, expected an http(s) URL, e.g. {TINKER_URL}. {H_TINKER_URL}"],
        keyfile=GOOD_KEYFILE + "TINKER_BASE_URL=not a url\n"),
    Case("keyfile-tinker-url-port-0", [
        ("{kf}:4: TINKER_BASE_URL: found https://host:0/api (port 0), expected a port from 1 to 65535, or none for "
         f"the scheme's own. Hint: write the port the service listens on, or leave :0 out; "
         f"{H_TINKER_URL.removeprefix('Hint: ')}")],
        keyfile=GOOD_KEYFILE + "TINKER_BASE_URL=https://host:0/api\n"),
    Case("keyfile-wandb-url-right-to-left-override", [
        ("{kf}:4: WANDB_BASE_URL: found U+202E (RIGHT-TO-LEFT OVERRIDE) at position 9, expected an ASCII URL. Hint: "
         "retype the URL on a plain keyboard (an invisible character came with a copy); set "
         "WANDB_BASE_URL=https://api.wandb.ai, or remove the line for the default")],
        keyfile=GOOD_KEYFILE + "WANDB_BASE_URL=https://\u202eapi.wandb.ai\n"),
    Case("keyfile-model-with-a-blank", [f"{{kf}}:3: TAOTOKEN_MODEL: found a blank at position 7, {H_MODEL}"],
         keyfile=GOOD_KEYFILE.replace("TAOTOKEN_MODEL=m1", "TAOTOKEN_MODEL=claude 3")),
    Case("keyfile-model-with-a-zero-width-space", [
        f"{{kf}}:3: TAOTOKEN_MODEL: found U+200B (ZERO WIDTH SPACE) at position 3, {H_MODEL}"],
        keyfile=GOOD_KEYFILE.replace("TAOTOKEN_MODEL=m1", "TAOTOKEN_MODEL=m1\u200b")),
    # 5: python-dotenv filled ${HOME} in from this machine's environment (sk-abcdefgh/rootijkl…), without a word
    Case("keyfile-braces-variable-inside-the-key", [f"{{kf}}:1: TAOTOKEN_API_KEY: found ${{{{ inside the value, {H_BRACES}"],
         keyfile=GOOD_KEYFILE.replace(KEY, "sk-abcdefgh${HOME}ijklmnop1234")),
    Case("keyfile-braces-variable-inside-the-url", [f"{{kf}}:2: TAOTOKEN_BASE_URL: found ${{{{ inside the value, {H_BRACES}"],
         keyfile=GOOD_KEYFILE.replace("taotoken.net", "${GATEWAY_HOST}")),
    Case("keyfile-braces-variable-inside-the-wandb-key", [
        f"{{kf}}:4: WANDB_API_KEY: found ${{{{ inside the value, {H_BRACES}"],
        keyfile=GOOD_KEYFILE + "WANDB_API_KEY=0123456789${USER}abcdef0123456789\n"),
]


@pytest.mark.parametrize("case", KEYFILE_CASES, ids=[c.id for c in KEYFILE_CASES])
def test_round9_key_file_bad_input_is_one_line_exit_2(case, tmp_path, monkeypatch, capsys, compose_calls):
    monkeypatch.setenv("GATEWAY_HOST", "taotoken.net")  # what ${GATEWAY_HOST} was filled in with
    err = run_case(case, tmp_path, monkeypatch, capsys, compose_calls)
    for secret in (CAPITALS, "STUV", "WXYZ123456", "ABCDEFGHIJ", "KLMNOPQRST", "sk-abcdefgh", "ijklmnop1234",
                   "0123456789"):
        assert secret not in err


def test_a_line_hermes_stack_does_not_read_keeps_its_braces_as_written(tmp_path):
    """interpolate=False: no value of the file is filled in from the environment, read by hermes-stack or not."""
    from hermes_stack.keyfile import load_keyfile

    path = tmp_path / "keys.env"
    path.write_text(GOOD_KEYFILE + "HF_HOME=/cache/${USER}\n")
    os.chmod(path, 0o600)
    assert load_keyfile(path, register=False).values["HF_HOME"] == "/cache/${USER}"


# ---------------------------------------------------------------- 6: --wait-timeout's upper bound

WAIT = ("command line: --wait-timeout: found {n}, expected seconds from 1 to 86400 (a day; default 900). Hint: it "
        "bounds how long `up --wait` waits for the services to be healthy")


@pytest.mark.parametrize("command", ["up", "dry-run", "render"])
@pytest.mark.parametrize(("seconds", "shown"), [("99999999999999999999", "a number of 20 digits"),
                                                ("86401", "86401")])
def test_a_wait_timeout_beyond_a_day_is_refused_before_anything(command, seconds, shown, project, capsys,  # noqa: F811
                                                                 compose_calls):
    """compose refused it only after the build; thread.join's timeout would overflow."""
    assert refused([command, "--device", "cpu", "--wait-timeout", seconds], capsys, compose_calls,
                   project) == [WAIT.format(n=shown)]


# ---------------------------------------------------------------- 7: the base images' references

H_IMAGE = ("expected an image reference: repository[:tag][@digest], the repository of lower-case letters, digits, '.', "
           "'_', '-' and '/'. Hint: e.g. {name}={default} (the default: unset it)")
IMAGE_CASES = [
    Case(f"{name.lower()}-{label}", [f"(environment): {name}: found {value!r}, " + H_IMAGE.format(name=name,
                                                                                                  default=default)],
         env={name: value})
    for name, default in (("HERMES_SGLANG_IMAGE", "lmsysorg/sglang:v0.5.18"),
                          ("HERMES_BASE_IMAGE", "python:3.11-slim-bookworm"))
    for label, value in (("with-a-blank", "Bad Image"), ("with-an-empty-tag", "lmsysorg/sglang:"))
]


@pytest.mark.parametrize("case", IMAGE_CASES, ids=[c.id for c in IMAGE_CASES])
def test_a_base_image_that_is_no_image_reference_is_one_line(case, tmp_path, monkeypatch, capsys, compose_calls):
    """HERMES_SGLANG_IMAGE='Bad Image' passed validate and was written into the build args."""
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


@pytest.mark.parametrize("image", ["lmsysorg/sglang:v0.5.18-cu129", "registry.local:5000/team/sglang:dev",
                                   f"lmsysorg/sglang@sha256:{'0' * 64}"])
def test_image_references_docker_takes_pass(image):
    from hermes_stack.controller.environ_check import environment_problems

    assert environment_problems({"HERMES_SGLANG_IMAGE": image, "HERMES_BASE_IMAGE": image}) == []


# ---------------------------------------------------------------- 8: invisible Unicode where printable text is required

H_NAME = "Hint: remove the control character; a name is one line of text"
H_CKPT = ("expected a folder name of printable characters. Hint: remove the control character; it would name a folder "
          "nobody can see or type")
UNICODE_CASES = [
    Case("wandb-name-next-line-u0085", [
        f"{{json}}: wandb.name: found 'run\\x851' (control character U+0085), expected printable text. {H_NAME}"],
        json={"wandb.name": "run\u00851"}),
    Case("wandb-group-line-separator-u2028", [
        f"{{json}}: wandb.group: found 'a\\u2028b' (invisible character U+2028), expected printable text. {H_NAME}"],
        json={"wandb.group": "a\u2028b"}),
    Case("wandb-project-right-to-left-override", [
        (f"{{json}}: wandb.project: found 'rl\\u202elnuf' (invisible character U+202E), expected printable text. "
        f"{H_NAME}")], json={"wandb.project": "rl\u202elnuf"}),
    Case("checkpoint-dir-right-to-left-override", [
        f"{{json}}: tinker.checkpoint_dir: found './temp\\u202e/' (invisible character U+202E), {H_CKPT}"],
        json={"tinker.checkpoint_dir": "./temp\u202e/"}),
    Case("checkpoint-dir-paragraph-separator", [
        f"{{json}}: tinker.checkpoint_dir: found './a\\u2029b/' (invisible character U+2029), {H_CKPT}"],
        json={"tinker.checkpoint_dir": "./a\u2029b/"}),
]


@pytest.mark.parametrize("case", UNICODE_CASES, ids=[c.id for c in UNICODE_CASES])
def test_invisible_unicode_where_printable_text_is_required_is_one_line(case, tmp_path, monkeypatch, capsys,
                                                                      compose_calls):
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


@pytest.mark.parametrize(("field", "value", "listed"), [("wandb.name", "run\u202e1", "invisible character U+202E"),
                                                        ("tinker.checkpoint_dir", "./t\u0085/",
                                                         "control character U+0085")])
def test_rl_edit_config_refuses_invisible_unicode_and_writes_nothing(field, value, listed, tmp_path, monkeypatch):
    import json

    from mcp_helpers import copy_project

    from hermes_stack.controller.agent_tools import tools
    from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools

    root = copy_project(tmp_path / "project").resolve()
    monkeypatch.chdir(root)
    monkeypatch.setenv("HERMES_ROOT", str(root))
    before = {p.name: p.read_bytes() for p in (root / "configs").iterdir()}
    answer = json.loads(tools.call(Tools(ServerConfig(root=root, device="cpu")), None, "rl_edit_config", field=field,
                                   value=value))
    assert answer.get("changed") is False and listed in answer["error"], answer
    assert {p.name: p.read_bytes() for p in (root / "configs").iterdir()} == before


# ---------------------------------------------------------------- 4: a path component the system refuses as too long

LONG = "x" * 300
TOO_LONG = "a path that cannot be read (File name too long)"


@pytest.mark.parametrize("argv", [["up", "--device", "cpu", "-f", f"{LONG}.yml"],
                                  ["dry-run", "--device", "cpu", "-f", f"{LONG}.yml"],
                                  ["mcp", "--project", f"/tmp/{LONG}"]])
def test_a_name_over_255_characters_on_the_command_line_is_one_short_line(argv, project, capsys,  # noqa: F811
                                                                          compose_calls):
    """It was "unexpected error: OSError: [Errno 36] File name too long: '<the whole path>'", exit 1."""
    (line,) = refused(argv, capsys, compose_calls, project)
    assert f"found {TOO_LONG}: " in line and line.count("x") < 250 and "characters)" in line, line


def test_a_config_dir_over_255_characters_is_one_short_line(tmp_path, monkeypatch, capsys, compose_calls):
    monkeypatch.chdir(tmp_path)
    rc = main(["validate", "--algo", "grpo", "--config-dir", f"/tmp/{LONG}", "--device", "cpu"])
    (line,) = error_lines(capsys.readouterr().err)
    assert rc == 2 and compose_calls == []
    assert f"… (305 characters): (folder): found {TOO_LONG}, expected the folder holding" in line, line
    assert line.count("x") < 250


@pytest.mark.parametrize(("key", "edit"), [
    ("inference.model_path", lambda d: d["settings"].update(inference={"model_path": f"./{LONG}"})),
    ("[environment] dataset", lambda d: d.update(toml=d["toml"].replace('dataset = "gsm8k"', f'dataset = "{LONG}.jsonl"'))),
])
def test_a_model_or_dataset_path_over_255_characters_is_one_short_line(key, edit, tmp_path, monkeypatch, capsys,
                                                                       compose_calls):
    """On a GPU both are looked up on disk: it was "unexpected error: OSError … File name too long", exit 1."""
    import json
    import shutil

    configs = shutil.copytree(CONFIGS, tmp_path / "configs")
    settings = json.loads((configs / "settings_grpo.json").read_text())
    doc = {"settings": settings, "toml": (configs / "config_grpo.toml").read_text()}
    edit(doc)
    (configs / "settings_grpo.json").write_text(json.dumps(doc["settings"]))
    (configs / "config_grpo.toml").write_text(doc["toml"])
    monkeypatch.chdir(tmp_path)
    rc = main(["validate", "--algo", "grpo", "--config-dir", str(configs), "--device", "gpu", "--gpu-memory", "80"])
    (line,) = error_lines(capsys.readouterr().err)
    assert rc == 2 and compose_calls == []
    assert f"{key}: found {TOO_LONG}: " in line and line.count("x") < 250, line


# ---------------------------------------------------------------- 9, 10: a value of another type; a huge number

H_WHOLE = "Hint: write a whole number without quotes or a decimal point, e.g. 32"
TYPE_CASES = [
    Case("json-boolean-for-an-integer", [(f"{{json}}: trainer.num_steps: found true (a boolean), expected an "
                                          f"integer. {H_WHOLE}")], json={"trainer.num_steps": True}),
    Case("json-float-for-an-integer", [(f"{{json}}: trainer.num_steps: found 32.0 (a number), expected an integer. "
                                        f"{H_WHOLE}")], json={"trainer.num_steps": 32.0}),
    Case("json-array-for-an-integer", [(f"{{json}}: trainer.num_steps: found [1] (an array), expected an integer. "
                                        f"{H_WHOLE}")], json={"trainer.num_steps": [1]}),
    Case("toml-string-array-for-a-number", [
        ("{toml}: rollout.temperature: found ['0.8'] (an array), expected a number. Hint: write a number without "
         "quotes, e.g. 0.5")], toml=[("temperature = 0.8", "temperature = ['0.8']")]),
    Case("json-number-of-401-digits", [
        ("{json}: trainer.num_steps: found 10000000000000000000… (401 digits), expected less than or equal to "
         "10000000. Hint: num_steps: training steps; `git diff configs/` shows what changed")],
        json={"trainer.num_steps": 10**400}),
]


@pytest.mark.parametrize("case", TYPE_CASES, ids=[c.id for c in TYPE_CASES])
def test_a_value_of_another_type_says_how_to_write_it_and_a_huge_number_is_shortened(case, tmp_path, monkeypatch,
                                                                                    capsys, compose_calls):
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


def test_rl_edit_config_on_a_config_that_is_a_named_pipe_is_refused_at_once(tmp_path, monkeypatch):
    """Its read before the edit would wait for a writer forever (the MCP server's worker thread with it)."""
    import json

    from mcp_helpers import copy_project

    from hermes_stack.controller.agent_tools import tools
    from hermes_stack.controller.agent_tools.tools import ServerConfig, Tools

    root = copy_project(tmp_path / "project").resolve()
    monkeypatch.chdir(root)
    monkeypatch.setenv("HERMES_ROOT", str(root))
    settings = root / "configs" / "settings_grpo.json"
    settings.unlink()
    os.mkfifo(settings)
    answer = json.loads(tools.call(Tools(ServerConfig(root=root, device="cpu")), None, "rl_edit_config",
                                   field="wandb.name", value="run-1"))
    assert answer.get("changed") is not True and "a named pipe" in json.dumps(answer), answer


@pytest.mark.parametrize(("url", "refused"), [("https://wandb.bücher.example", False), ("https://münchen.example:8443/api", False),
                                             ("https://tao\u200btoken.example/api", True),
                                             ("https://\u00a0x.example", True), ("https://x.example/p\u00e4th", True),
                                             # IDNA 2003 takes these, httpx's IDNA 2008 refuses them at the first call
                                             ("https://\u00bd.example", True), ("https://\ufb01.example", True),
                                             ("https://-b\u00fc.example", True)])
def test_an_internationalised_host_passes_and_an_invisible_character_does_not(url, refused):
    """A review: any non-ASCII character was refused, an IDN host too, which httpx sends IDNA-encoded."""
    from hermes_stack.keyfile import check_url

    problem = check_url("kf", "WANDB_BASE_URL", url, "a URL", "fix it", "https://api.wandb.example")
    assert (problem is not None) is refused, problem

"""Bring your own environment (issue 21): the environments/ folder read with ast on the host, `hermes-stack
environments` listing it, validate refusing each broken case in one line (exit 2, nothing started), and the
environment service's overrides of an upstream-style file's laptop config."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from hermes_stack.controller.cli import main

pytestmark = pytest.mark.usefixtures("isolated_secrets")
ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "fixtures" / "user_environments" / "upstream_sums.py"
# What BaseEnv leaves to a subclass defined, as a file that runs must (environments_catalog: BASE_ENV_ABSTRACT,
# BASE_ENV_STUBS, BASE_ENV_ONE_OF)
RUNS = ("\n    async def get_next_item(self): ...\n\n    async def evaluate(self, *args, **kwargs): ...\n"
        "\n    async def setup(self): ...\n\n    async def collect_trajectories(self, item): ...\n")
VALIDATE = ["validate", "--algo", "grpo", "--device", "cpu"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the project's configs with an environments/ folder holding the upstream-style file."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "environments").mkdir()
    shutil.copy(UPSTREAM, tmp_path / "environments" / "upstream_sums.py")
    monkeypatch.delenv("HERMES_KEYFILE", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env.taotoken here: offline
    return tmp_path


def select(project: Path, name: str) -> None:
    config = project / "configs" / "config_grpo.toml"
    text = config.read_text()
    changed = text.replace('name = "gsm8k"', f'name = "{name}"', 1)
    assert changed != text
    config.write_text(changed)


def validate(project: Path, capsys, compose_calls) -> tuple[int, list[str]]:
    code = main([*VALIDATE, "--config-dir", str(project / "configs")])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert compose_calls == []
    return code, errors


def test_environments_lists_the_built_in_ones_and_the_folder_file(project, capsys):
    assert main(["environments", "--root", str(project)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["gsm8k", "HermesMathEnv", "hermes_stack/environment/env.py"]
    ours = [line for line in lines if line.startswith("upstream-sums")]
    assert len(ours) == 1
    _name, cls, file, *description = ours[0].split()
    assert (cls, file) == ("UpstreamSumsEnv", "environments/upstream_sums.py:15")
    assert " ".join(description) == "Two-number sums scored +1 / -1 (an upstream-style test environment)."


def test_list_environments_is_the_shared_function_the_mcp_tool_uses(project):
    from hermes_stack.environments_catalog import list_environments

    found = {e.name: e for e in list_environments(project)}
    assert found["upstream-sums"].class_name == "UpstreamSumsEnv" and not found["upstream-sums"].builtin
    assert found["gsm8k"].builtin


def test_validate_accepts_the_upstream_file_selected_by_its_name(project, capsys, compose_calls):
    select(project, "upstream-sums")
    code, errors = validate(project, capsys, compose_calls)
    assert (code, errors) == (0, [])


def test_the_embedded_profile_keeps_a_user_selected_environment():
    from hermes_stack.config import profiles

    for algo in ("grpo", "ppo"):
        for model in (None, "smollm2-135m"):
            assert not any(k.startswith("environment.name") for k in profiles.overrides_for("embedded", algo,
                                                                                              model=model))


def _write(project: Path, name: str, text: str) -> None:
    (project / "environments" / name).write_text(text)


BROKEN = [
    ("unknown-name", "nope", None,
     ("found 'nope', expected one of: gsm8k, hermes-math, gsm8k_tinker, upstream-sums. Hint: the names are the classes' `name` "
     "attributes")),
    ("folder-missing", "upstream-sums", "no-folder", ("found 'upstream-sums' (no environments/ folder: {root}/"
     "environments), expected a built-in environment (gsm8k, hermes-math, gsm8k_tinker) or one defined in environments/")),
    ("file-missing", "environments/missing.py", None, ("found 'environments/missing.py' (no such file: {root}/"
     "environments/missing.py)")),
    ("syntax-error", "broken-one", ("broken.py", "class X(BaseEnv):\n    name = 'broken-one'\n    def (:\n"),
     ("found 'broken-one' (not found; syntax error at environments/broken.py:3: invalid syntax), expected a file "
     "that Python can parse")),
    ("no-subclass-in-file", "environments/helpers.py", ("helpers.py", "def helper():\n    return 1\n"),
     ("found 'environments/helpers.py' (the file defines no BaseEnv subclass), expected a file with one class "
     "deriving from atroposlib's BaseEnv")),
    ("no-subclass-named", "helpers", ("helpers.py", "class Helper:\n    name = 'helpers'\n"),
     ("found 'helpers', expected one of: gsm8k, hermes-math, gsm8k_tinker, upstream-sums. Hint: the names are the classes' `name` "
     "attributes; environments/helpers.py defines no BaseEnv subclass")),
    ("same-name-twice", "upstream-sums", ("copy.py", UPSTREAM.read_text()),
     ("found 'upstream-sums', defined 2 times: environments/copy.py:15 (UpstreamSumsEnv), "
     "environments/upstream_sums.py:15 (UpstreamSumsEnv), expected one environment with that name")),
    ("import-missing", "needs-more", ("needs_more.py", ("import json\nimport surely_not_installed_pkg.sub\n"
                                      "from atroposlib.envs.base import BaseEnv\n\n"
                                      "class NeedsMore(BaseEnv):\n    name = 'needs-more'\n" + RUNS)),
     ("found 'needs-more', whose file imports surely_not_installed_pkg (environments/needs_more.py:2), expected "
     "imports the environment image has. Hint: add the package, pinned (name==version), to "
     "environments/requirements.txt")),
]


@pytest.mark.parametrize("case", BROKEN, ids=[c[0] for c in BROKEN])
def test_validate_refuses_each_broken_environment_in_one_line(project, capsys, compose_calls, case):
    _, name, extra, expected = case
    select(project, name)
    if extra == "no-folder":
        shutil.rmtree(project / "environments")
    elif extra:
        _write(project, *extra)
    code, errors = validate(project, capsys, compose_calls)
    assert code == 2
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"error: {project}/configs/config_grpo.toml: environment.name: "), errors
    assert expected.format(root=project) in errors[0], errors[0]


def test_a_package_listed_in_requirements_txt_satisfies_the_import_and_must_be_pinned(project, capsys, compose_calls):
    _write(project, "needs_more.py", "import surely_not_installed_pkg\nfrom atroposlib.envs.base import BaseEnv\n\n"
                                     "class NeedsMore(BaseEnv):\n    name = 'needs-more'\n" + RUNS)
    select(project, "needs-more")
    (project / "environments" / "requirements.txt").write_text("# pinned, as requirements.lock\n"
                                                              "surely-not-installed-pkg>=1\n")
    code, errors = validate(project, capsys, compose_calls)
    assert code == 2 and len(errors) == 1
    assert errors[0] == ("error: environments/requirements.txt:2: requirement: found 'surely-not-installed-pkg>=1', "
                         "expected name==version. Hint: pin every package and each of its dependencies, as "
                         "requirements.lock does; the file installs with --no-deps from the wheelhouse")
    (project / "environments" / "requirements.txt").write_text("surely-not-installed-pkg==1.0\n")
    assert validate(project, capsys, compose_calls) == (0, [])


def test_a_guarded_import_is_optional(project, capsys, compose_calls):
    _write(project, "optional.py", "try:\n    import surely_not_installed_pkg\nexcept ImportError:\n    pass\n"
                                   "from atroposlib.envs.base import BaseEnv\n\nclass Opt(BaseEnv):\n"
                                   "    name = 'optional'\n" + RUNS)
    select(project, "optional")
    assert validate(project, capsys, compose_calls) == (0, [])


# ---------------------------------------------------------------- the service's overrides


def test_the_upstream_files_laptop_config_is_replaced_and_each_value_logged(project, caplog):
    pytest.importorskip("atroposlib")
    from atroposlib.envs.base import APIServerConfig

    from hermes_stack.environment import user_env
    from hermes_stack.environment.runtime import HermesEnvConfig
    from hermes_stack.environments_catalog import select as choose

    info = choose(project, "upstream-sums").environment
    ours = HermesEnvConfig(group_size=4, batch_size=8, max_token_length=32, tokenizer_name="/opt/tok",
                           rollout_server_url="http://atropos:8000", use_wandb=False, total_steps=3,
                           ensure_scores_are_not_same=True, max_batches_offpolicy=1, wandb_name="hermes-grpo-x",
                           data_dir="/data")
    server = APIServerConfig(server_type="sglang", base_url="http://inference:8001/v1", api_key="k" * 40,
                             model_name="embedded", tokenizer_name="/opt/tok", health_check=False)
    caplog.set_level("INFO", logger="hermes_stack.environment")
    cls, config, servers = user_env.prepare(project, info, ours, server, served_model="served-name")
    assert (config.tokenizer_name, config.rollout_server_url, config.use_wandb) == ("/opt/tok",
                                                                                   "http://atropos:8000", False)
    assert (config.group_size, config.batch_size, config.max_token_length, config.total_steps) == (4, 8, 32, 3)
    assert config.steps_per_eval == 100 and config.wandb_name == "upstream-sums"  # the file's own, kept
    (s,) = servers
    assert (s.base_url, s.api_key, s.model_name, s.health_check) == ("http://inference:8001/v1", "k" * 40,
                                                                     "served-name", False)
    assert s.num_requests_for_eval == 256  # the file's own, kept
    # "openai" (the file's default) -> "sglang": managed_server refuses an OpenAI server, and our service is SGLang's API
    assert s.server_type == "sglang"
    assert "replaced server_configs[0].server_type: found 'openai', used 'sglang'" in caplog.text
    text = caplog.text
    assert "replaced tokenizer_name: found 'NousResearch/DeepHermes-3-Llama-3-3B-Preview', used '/opt/tok'" in text
    assert "replaced rollout_server_url: found 'http://localhost:8000', used 'http://atropos:8000'" in text
    assert "replaced group_size: found 16, used 4" in text and "replaced use_wandb: found True, used False" in text
    assert "replaced server_configs[0].base_url: found 'http://localhost:9001/v1', used 'http://inference:8001/v1'" \
        in text
    assert "replaced server_configs[0].api_key: found (hidden), used (the stack's internal key)" in text
    assert "k" * 16 not in text
    assert cls.__name__ == "UpstreamSumsEnv" and cls.ready_dir == "/data"
    from hermes_stack.environment.pooled_http import PooledSGLangServer

    assert cls.server_cls is PooledSGLangServer  # sglang: the same /generate over kept-alive connections


def test_a_group_returned_as_none_is_counted_and_passed_on(caplog):
    pytest.importorskip("atroposlib")
    from atroposlib.envs.base import BaseEnv

    from hermes_stack.environment.user_env import with_stack_behaviour

    class AllEqual(BaseEnv):
        name = "all-equal"

        async def setup(self):
            pass

        async def get_next_item(self):
            return {}

        async def evaluate(self, *args, **kwargs):
            return None

        async def collect_trajectories(self, item):
            return None, []

    env = object.__new__(with_stack_behaviour(AllEqual))
    caplog.set_level("INFO", logger="hermes_stack.environment")
    assert asyncio.run(env.collect_trajectories({})) == (None, [])
    assert env.none_groups == 1 and "returned no group for an item (None" in caplog.text


def test_an_exception_in_collect_trajectories_is_said_once_with_its_place_then_counted(caplog):
    """atroposlib logged `Error in collect_trajectories: 'expected'` for every item (a KeyError's str, no type, no
    place), several times a second; `make status` quoted nothing better."""
    pytest.importorskip("atroposlib")
    from hermes_stack.controller.status import last_error
    from hermes_stack.environment.user_env import with_stack_behaviour

    source = (
        "from atroposlib.envs.base import BaseEnv\n"
        "class Broken(BaseEnv):\n"
        "    name = 'broken'\n"
        "    async def setup(self): pass\n"
        "    async def get_next_item(self): return {}\n"
        "    async def evaluate(self, *args, **kwargs): return None\n"
        "    async def collect_trajectories(self, item):\n"
        "        return {'tokens': []}, item['expected']\n")
    namespace: dict = {}
    exec(compile(source, "/app/environments/broken.py", "exec"), namespace)  # noqa: S102 - a user file's frames
    env = object.__new__(with_stack_behaviour(namespace["Broken"]))
    caplog.set_level("INFO", logger="hermes_stack.environment")
    for _ in range(12):
        assert asyncio.run(env.collect_trajectories({})) == (None, [])  # skipped, as atroposlib's handle_env does
    assert env.failed_items == 12 and env.none_groups == 0
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in errors] == [
        ("collect_trajectories raised KeyError: 'expected' at environments/broken.py:8 (1 item(s) so far; each is "
        "skipped)"),
        ("collect_trajectories raised KeyError: 'expected' at environments/broken.py:8 (10 item(s) so far; each is "
        "skipped)")]
    tracebacks = [r for r in caplog.records if r.getMessage().startswith("traceback of the error below:")]
    assert len(tracebacks) == 1 and "broken.py\", line 8" in tracebacks[0].getMessage()  # one, not one per item
    assert caplog.records.index(tracebacks[0]) < caplog.records.index(errors[0])  # before: the last line names it
    logged = [f"environment-1  | 2026-12-07 10:00:00,000 ERROR hermes_stack.environment: {errors[1].getMessage()}"]
    assert last_error(logged).startswith("collect_trajectories raised KeyError: 'expected' at environments/broken.py:8")


def _as_logged(records) -> list[str]:
    """Records as `docker compose logs environment` shows them: compose's prefix, then service_log.FORMAT."""
    import logging

    from hermes_stack.service_log import FORMAT

    formatter = logging.Formatter(FORMAT)
    return [f"environment-1  | {formatter.format(r)}" for r in records]


def test_status_stops_quoting_a_failure_once_rollouts_succeed_again(caplog):
    """A review: after inference restarted under a rollout, `make status` quoted the environment's RetryError for
    minutes while training was healthy, and after a restart its `SystemExit: 143`. A group returned after failures
    says so in the log, and status reads only what follows the last such line of progress."""
    pytest.importorskip("atroposlib")
    from hermes_stack.controller.status import last_error
    from hermes_stack.environment.user_env import with_stack_behaviour

    class Flaky:
        name = "flaky"
        calls = 0

        async def collect_trajectories(self, item):
            type(self).calls += 1
            if type(self).calls <= 2:
                raise ConnectionError("inference restarting")
            return {"tokens": [[1]], "masks": [[1]], "scores": [1.0]}, []

    env = object.__new__(with_stack_behaviour(Flaky))
    caplog.set_level("INFO", logger="hermes_stack.environment")
    for _ in range(2):
        asyncio.run(env.collect_trajectories({}))
    failing = _as_logged(caplog.records)
    assert last_error(failing, since_progress=True).startswith("collect_trajectories raised ConnectionError")
    for _ in range(3):
        asyncio.run(env.collect_trajectories({}))
    recovered = _as_logged(caplog.records)
    said = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
    assert said == ["collect_trajectories returned a group again after 2 failed item(s)"]  # once, not per group
    assert last_error(recovered, since_progress=True) == ""
    assert last_error(recovered).startswith("collect_trajectories raised ConnectionError")  # a crashed service's read
    # a stop is no error: the environment's SIGTERM exit of an earlier run, then nothing yet
    assert last_error([*failing, "environment-1  | SystemExit: 143"], since_progress=True).startswith(
        "collect_trajectories raised ConnectionError")
    assert last_error(["environment-1  | SystemExit: 143"]) == ""
    assert last_error(["environment-1  | SystemExit: 3"]) == "SystemExit: 3"


def test_the_built_in_environments_batch_and_registration_lines_are_progress_for_status(caplog):
    pytest.importorskip("atroposlib")
    from hermes_stack.controller.status import last_error
    from hermes_stack.environment.env import HermesMathEnv, Totals

    env = object.__new__(HermesMathEnv)
    env.totals, env.judge = Totals(recent=[1.0, 0.0]), None
    env._chunked = lambda: True
    caplog.set_level("INFO", logger="hermes_stack.environment")
    env._log_batch()
    error = "environment-1  | 2026-12-08 01:00:00,000 ERROR hermes_stack.environment: Error in collect_trajectories"
    assert last_error([error, *_as_logged(caplog.records)], since_progress=True) == ""
    assert last_error([*_as_logged(caplog.records), error], since_progress=True) == "Error in collect_trajectories"

    from types import SimpleNamespace

    from hermes_stack.environment.stack_behaviour import StackBehaviour

    class Registers:
        async def register_env(self):
            self.env_id = 0

    registering = object.__new__(type("Registering", (StackBehaviour, Registers), {}))
    registering.config = SimpleNamespace(rollout_server_url="http://atropos:8000")
    caplog.clear()
    asyncio.run(registering.register_env())  # after a restart: the errors of its earlier run are behind this line
    assert last_error([error, *_as_logged(caplog.records)], since_progress=True) == ""


def test_an_environment_deriving_from_an_alias_of_base_env_is_found():
    """`from atroposlib.envs.base import BaseEnv as AtroposBase` is atroposlib's BaseEnv all the same: validate said
    the file defines no BaseEnv subclass."""
    from hermes_stack.environments_catalog import scan_source

    scan = scan_source("from atroposlib.envs.base import BaseEnv as AtroposBase\n\n\nclass AliasEnv(AtroposBase):\n"
                       "    name = 'alias-env'\n", "environments/alias.py")
    assert [(e.name, e.class_name) for e in scan.environments] == [("alias-env", "AliasEnv")]


def test_a_name_given_by_a_module_constant_is_the_name_atroposlib_sees():
    """`name = NAME` reads the module's constant at run time; the catalog used the class's name instead."""
    from hermes_stack.environments_catalog import scan_source

    scan = scan_source("from atroposlib.envs.base import BaseEnv\n\nNAME = 'const-env'\n\n\nclass ConstEnv(BaseEnv):\n"
                       "    name = NAME\n", "environments/const.py")
    assert [e.name for e in scan.environments] == ["const-env"]


def test_a_name_given_by_an_f_string_without_placeholders_is_that_string():
    """`name = f'mine'` is 'mine' at run time; the catalog read it as no name (the class's name instead). One with a
    placeholder is not read, as any name computed at run time: the class's name stands in."""
    from hermes_stack.environments_catalog import scan_source

    head = "from atroposlib.envs.base import BaseEnv\n\nPREFIX = 'x'\n\n\n"
    scan = scan_source(head + "class Mine(BaseEnv):\n    name = f'mine'\n\n\nclass Other(BaseEnv):\n"
                       "    name = f'{PREFIX}-other'\n", "environments/mine.py")
    assert [e.name for e in scan.environments] == ["mine", "Other"]


def test_a_class_of_the_files_own_called_base_env_makes_no_environment():
    """Not atroposlib's BaseEnv: the environment service could not run a subclass of it."""
    from hermes_stack.environments_catalog import scan_source

    scan = scan_source("class BaseEnv:\n    pass\n\n\nclass Fake(BaseEnv):\n    name = 'fake'\n", "environments/fake.py")
    assert scan.environments == ()


def test_a_base_env_wrapper_reached_through_atroposlibs_module_is_an_environment():
    """`class BaseEnv(base.BaseEnv)` of the file's own, and a class on it: both derive from atroposlib's."""
    from hermes_stack.environments_catalog import scan_source

    scan = scan_source("from atroposlib.envs import base\n\n\nclass BaseEnv(base.BaseEnv):\n    pass\n\n\n"
                       "class MyEnv(BaseEnv):\n    name = 'mine'\n", "environments/wrapped.py")
    assert [(e.name, e.class_name) for e in scan.environments] == [("BaseEnv", "BaseEnv"), ("mine", "MyEnv")]


def test_an_editor_lock_link_or_a_folder_named_py_is_not_read(tmp_path):
    """Emacs leaves `.#my_env.py` as a dangling link while a file is edited: validate of the built-in environment
    must not end in FileNotFoundError for it."""
    from hermes_stack.environments_catalog import scan_folder, select

    folder = tmp_path / "environments"
    folder.mkdir()
    (folder / ".#my_env.py").symlink_to("user@host.1234:1700000000")
    (folder / "odd.py").mkdir()
    assert scan_folder(tmp_path) == []
    assert select(tmp_path, "gsm8k").environment is not None


LAYERED = ("from atroposlib.envs.base import BaseEnv\n\n"
           "class ArithBase(BaseEnv):\n    \"\"\"Shared by the file's environments.\"\"\"\n\n"
           "class Layered(ArithBase):\n    name = 'layered'\n" + RUNS)


def test_a_shared_base_in_the_file_is_no_environment_of_its_own(project, capsys, compose_calls):
    """`ArithBase(BaseEnv)` with no name and none of the methods, under `Layered(ArithBase)`: the listing showed
    ArithBase as an environment, and selecting the file by its path was refused as defining two."""
    from hermes_stack.environments_catalog import list_environments

    _write(project, "layered.py", LAYERED)
    names = [env.name for env in list_environments(project)]
    assert "layered" in names and "ArithBase" not in names
    select(project, "environments/layered.py")
    code, errors = validate(project, capsys, compose_calls)
    assert code == 0, errors
    # a base that is itself runnable stays an environment: both are listed, and the path is ambiguous
    _write(project, "layered.py", LAYERED.replace("class ArithBase(BaseEnv):", "class ArithBase(BaseEnv):\n"
                                                  "    name = 'arith-base'\n" + RUNS.replace("\n", "\n", 1)))
    names = [env.name for env in list_environments(project)]
    assert "layered" in names and "arith-base" in names


def test_validate_warns_when_the_files_own_group_size_is_replaced(project, capsys, compose_calls):
    """The stack runs every environment with [rollout] group_size; the file's own number was said only in the
    environment's log at run time, where a file that counts on it breaks. A file that reads self.config.group_size
    (upstream_sums.py as shipped) follows the stack's value and is not warned."""
    select(project, "upstream-sums")
    assert main([*VALIDATE, "--config-dir", str(project / "configs")]) == 0
    assert "group_size: found" not in capsys.readouterr().err
    own = project / "environments" / "upstream_sums.py"
    own.write_text(own.read_text().replace("n=self.config.group_size", "n=16"))
    assert main([*VALIDATE, "--config-dir", str(project / "configs")]) == 0
    err = capsys.readouterr().err
    assert ("warning: environments/upstream_sums.py:28: group_size: found 16 in UpstreamSumsEnv.config_init(), "
            "expected [rollout] group_size 8, which the stack uses instead. Hint: the environment runs with groups "
            f"of 8 ([rollout] group_size in {project}/configs/config_grpo.toml); set that to the file's number if "
            "its code counts on it") in err, err
    config = project / "configs" / "config_grpo.toml"
    config.write_text(config.read_text().replace("group_size = 8", "group_size = 16", 1))
    settings = project / "configs" / "settings_grpo.json"
    settings.write_text(settings.read_text().replace('"group_size": 8', '"group_size": 16', 1))
    main([*VALIDATE, "--config-dir", str(project / "configs")])
    assert "group_size: found 16 in" not in capsys.readouterr().err


@pytest.mark.parametrize(("reads", "warned"), [
    ("n=self.config.group_size", False),             # a base of the file reads it
    ('n=getattr(self.config, "group_size")', False),  # so does getattr
    ("n=4", True),                                    # nothing reads it: the file counts on its own 4
])
def test_the_group_size_warning_looks_at_the_whole_file(reads, warned):
    from hermes_stack.environments_catalog import config_init_constant

    source = ("class ArithBase(BaseEnv):\n    async def collect_trajectories(self, item):\n"
              f"        return await self.server.completion({reads})\n\n"
              "class Layered(ArithBase):\n    @classmethod\n    def config_init(cls):\n"
              "        return BaseEnvConfig(group_size=4), []\n")
    assert config_init_constant(source, "Layered", "group_size") == ((4, 8) if warned else None)

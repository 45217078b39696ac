"""Issue 16 breaks 2 and 4 as facts of the Dockerfiles and compose files (the Docker tier checks them live in
tests/docker/test_stack_gpu_rehearsal.py: the cache volume is written by uid 10001, the model comes from the hub).
Issue 11: a stage that runs our code copies packages, checked against the import graph, not a hand-kept file list.

2: a named volume mounted on a folder the image never created is created root-owned, so the uid-10001 services
   cannot write downloads or flashinfer's JIT cache: every image whose service mounts hermes-models creates the
   cache folders owned by 10001.
4: the environment image must not bake HF_*_OFFLINE: it could never load gsm8k or a hub tokenizer on a connected
   GPU VM. The environment decides at start (hermes_stack.hub).
11: every module a stage runs (`python -m hermes_stack.X` in RUN or CMD; the atropos image: its compose healthcheck)
   finds all it imports in what the stage copied; the stages that bake a model copy only packages that build
   imports (a code change elsewhere must not start the minutes-long model build again); no stage copies single
   modules to follow imports (only package __init__ files and the module it runs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from import_graph import closure, import_graph, module_files

from hermes_stack.hub import HF_CACHE, OFFLINE_FLAGS

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "compose.base.yml").read_text().replace("!reset", ""))["services"]


def stages(dockerfile: str) -> dict[str, str]:
    """Stage name -> its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", (ROOT / "docker" / dockerfile).read_text())
    out: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = match.group(1) or f"stage{len(out)}"
            out[current] = ""
        elif current and not line.lstrip().startswith("#"):
            out[current] += line + "\n"
    return out


def test_the_services_sharing_the_model_cache_mount_it_at_one_path():
    for service in ("inference", "trainer", "environment"):
        assert f"hermes-models:{HF_CACHE}" in [v.split("  ")[0] for v in BASE[service]["volumes"]], service


@pytest.mark.parametrize("dockerfile, stage", [("trainer.Dockerfile", "gpu"), ("trainer.Dockerfile", "cpu"),
                                               ("environment.Dockerfile", "runtime")])
def test_images_create_the_cache_folders_owned_by_the_service_user_before_user_switch(dockerfile, stage):
    body = stages(dockerfile)[stage]
    before_user = body.split("USER 10001")[0]
    mkdir = re.search(r"mkdir -p ([^&]+)", before_user)
    assert mkdir and HF_CACHE in mkdir.group(1).split(), (stage, before_user)
    assert re.search(r"chown -R 10001:10001 [^&]*/home/hermes\b", before_user), before_user
    if stage == "gpu":  # flashinfer's JIT cache under $HOME/.cache (SGLang's kernels)
        assert "/home/hermes/.cache/flashinfer" in mkdir.group(1).split()


def test_the_environment_image_is_not_baked_offline():
    env_lines = " ".join(line for line in stages("environment.Dockerfile")["runtime"].splitlines()
                         if line.startswith("ENV"))
    assert not any(flag in env_lines for flag in OFFLINE_FLAGS), env_lines
    assert "WANDB_MODE=offline" in env_lines  # what stays baked


# ---- issue 11: stages copy the packages their code imports ---------------------------------------------------------

MODULES = module_files()
GRAPH = import_graph()
DOCKERFILES = sorted(p.name for p in (ROOT / "docker").glob("*.Dockerfile"))


def _runnable(name: str) -> str:
    """`python -m pkg` runs pkg.__main__."""
    return f"{name}.__main__" if f"{name}.__main__" in MODULES else name


def entry_modules(dockerfile: str, stage: str) -> set[str]:
    """The hermes_stack modules a stage runs: `-m hermes_stack.X` in its RUN and CMD lines; the atropos image runs
    only its compose healthcheck's module (its CMD is atroposlib's)."""
    body = stages(dockerfile)[stage]
    found = set(re.findall(r"-m\"?,?\s+\"?(hermes_stack[\w.]*)", body))
    if dockerfile == "atropos.Dockerfile" and stage == "runtime":
        test = BASE["atropos"]["healthcheck"]["test"]
        found.add(test[test.index("-m") + 1])
    return {_runnable(name) for name in found}


def copies(dockerfile: str, stage: str) -> dict[str, set[str]]:
    """Each hermes_stack path the stage copies from the build context -> the modules it brings in."""
    out: dict[str, set[str]] = {}
    for line in stages(dockerfile)[stage].splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY" or any(w.startswith("--from") for w in words):
            continue
        for source in (w for w in words[1:-1] if w.split("/")[0] == "hermes_stack"):
            path = ROOT / source
            out[source] = {m for m, f in MODULES.items() if f == path or (path.is_dir() and f.is_relative_to(path))}
    return out


def needed(entries: set[str]) -> set[str]:
    """What running `entries` imports, and the packages (their __init__) those modules sit in."""
    modules = set().union(*(closure(e, GRAPH) for e in entries))
    return modules | {".".join(m.split(".")[:i]) for m in modules for i in range(1, m.count(".") + 1)}


RUNNING = [(d, s) for d in DOCKERFILES for s in stages(d) if entry_modules(d, s)]


def test_the_stages_running_our_code_are_found():
    # Guards the readers above: every image runs our code, and both model-building stages are seen.
    assert {("trainer.Dockerfile", "cpu-model"), ("trainer.Dockerfile", "cpu-catalog"), ("trainer.Dockerfile", "cpu"),
            ("environment.Dockerfile", "catalog"), ("environment.Dockerfile", "runtime"),
            ("atropos.Dockerfile", "runtime")} <= set(RUNNING)


@pytest.mark.parametrize("dockerfile, stage", RUNNING)
def test_a_stage_copies_everything_the_code_it_runs_imports(dockerfile, stage):
    copied = set().union(*copies(dockerfile, stage).values())
    missing = sorted(needed(entry_modules(dockerfile, stage)) - copied)
    assert not missing, f"{dockerfile}:{stage} runs {sorted(entry_modules(dockerfile, stage))} but does not copy {missing}"


@pytest.mark.parametrize("dockerfile, stage", RUNNING)
def test_a_stage_copies_packages_not_lists_of_modules(dockerfile, stage):
    entries = entry_modules(dockerfile, stage)
    for source, modules in copies(dockerfile, stage).items():
        if (ROOT / source).is_file():
            assert source.endswith("__init__.py") or modules <= entries, (
                f"{dockerfile}:{stage} copies the single module {source}: copy its package (hermes_stack/<package>/)")


@pytest.mark.parametrize("dockerfile, stage", [(d, s) for d, s in RUNNING
                                               if re.search(r"^RUN .*-m hermes_stack", stages(d)[s], re.MULTILINE)])
def test_a_model_building_stage_copies_only_what_the_build_imports(dockerfile, stage):
    """A build stage's cache key includes what it copies: anything it does not import would rebuild the model."""
    wanted = needed(entry_modules(dockerfile, stage))
    for source, modules in copies(dockerfile, stage).items():
        assert source.rstrip("/") != "hermes_stack" and modules & wanted, (
            f"{dockerfile}:{stage} copies {source}, which its build does not import")


# ---- issue 19: no test double ships in an image --------------------------------------------------------------------

# Modules a person runs by hand (`python -m ...`), not an image: module -> what it is for.
HAND_RUN = {"hermes_stack.tasks.word_problems": "writes configs/word_problems.jsonl (the catalog model's task)",
            # Not by hand, but as `python -m` child of the controller (agent_tools/runs.py): the MCP tools' detached `up`.
            "hermes_stack.controller.agent_tools.detached": "the detached `hermes-stack up` of rl_start_training"}
CONSOLE_SCRIPT = "hermes_stack.controller.cli"  # pyproject's [project.scripts]; `python -m hermes_stack` runs it too


def product_entries() -> set[str]:
    """Every module the product runs: the `-m hermes_stack.X` of every Dockerfile and compose file, the console
    script, `python -m hermes_stack`, and the hand-run generators."""
    texts = [p.read_text() for p in [*(ROOT / "docker").glob("*.Dockerfile"), *ROOT.glob("compose*.yml")]]
    found = {m for text in texts for m in re.findall(r"-m\"?,?\s+\"?(hermes_stack[\w.]*)", text)}
    return {_runnable(m) for m in found} | {CONSOLE_SCRIPT, "hermes_stack.__main__", *HAND_RUN}


def test_the_console_script_is_the_controllers_cli():
    scripts = re.search(r"\[project\.scripts\]\n([^\[]*)", (ROOT / "pyproject.toml").read_text()).group(1)
    assert f'hermes-stack = "{CONSOLE_SCRIPT}:main"' in scripts
    assert f"from {CONSOLE_SCRIPT} import main" in (ROOT / "hermes_stack" / "__main__.py").read_text()


def test_every_module_of_the_package_is_run_by_the_product():
    """A module no product entry point imports is a test double or dead code, and it would ship in every image
    (the images copy hermes_stack/ whole). Test doubles live in tests/ (the Docker tier mounts tests/fakes)."""
    reached = set().union(*(closure(e, GRAPH) for e in product_entries()))
    packages = {m for m, f in MODULES.items() if f.name == "__init__.py"}
    assert sorted(set(MODULES) - reached - packages) == []


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_no_image_copies_the_tests(dockerfile):
    for stage, body in stages(dockerfile).items():
        for line in body.splitlines():
            words = line.split()
            if words and words[0].upper() in ("COPY", "ADD") and not any(w.startswith("--from") for w in words):
                assert not [w for w in words[1:-1] if w.startswith(("tests", "./tests"))], f"{dockerfile}:{stage}: {line}"


# ---- issue 24: the gpu stage's caches and allocator --------------------------------------------------------------


def _env(body: str) -> dict[str, str]:
    out = {}
    for line in body.splitlines():
        if line.startswith("ENV "):
            out.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    return out


def test_the_gpu_stage_names_every_cache_under_the_service_users_home_and_expandable_segments():
    """The SGLang base image's own HF_HOME and cache paths are not ours to trust for uid 10001: the gpu stage sets
    them under /home/hermes (created and owned by 10001 above), and sets expandable_segments for the trainer and
    SGLang (widths change every step)."""
    body = stages("trainer.Dockerfile")["gpu"]
    env = _env(body)
    assert env.get("HF_HOME") == HF_CACHE and env.get("HOME") == "/home/hermes"
    for name in ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        assert env.get(name, "").startswith("/home/hermes/.cache"), name
    assert env.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    before_user = body.split("USER 10001")[0]
    assert before_user.index("chown -R 10001:10001") < before_user.index("HF_HOME=")

"""The compose files and Dockerfiles as data: invariants every change must keep (no Docker engine needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALGO_FILES = ["compose.ppo.yml", "compose.grpo.yml"]
ONE_SHOT = {"gateway-check"}
LONG_RUNNING = {"atropos", "inference", "trainer", "environment"}
SECRETISH = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
SECRET_VALUE = re.compile(r"^(sk-|tml-|eyJ)")


class _Loader(yaml.SafeLoader):
    """Compose's own tags (`!reset`, `!override`) are not YAML 1.1: keep their value, mark the tag."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: {
    "__tag__": suffix, "value": (loader.construct_mapping(node) if isinstance(node, yaml.MappingNode)
                                 else loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode)
                                 else loader.construct_scalar(node))})


def load(name: str) -> dict:
    return yaml.load((ROOT / name).read_text(), Loader=_Loader)


BASE = load("compose.base.yml")["services"]


def compose_config(*files: str, env: dict[str, str] | None = None) -> dict:
    if shutil.which("docker") is None or subprocess.run(["docker", "compose", "version"], capture_output=True,
                                                       check=False).returncode != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but `docker compose` (v2) is missing: run scripts/provision-docker.sh")
        pytest.skip("docker compose v2 not installed")
    argv = ["docker", "compose", "--project-directory", str(ROOT)]
    for f in files:
        argv += ["-f", str(ROOT / f)]
    done = subprocess.run([*argv, "config", "--format", "json"], capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_stack_has_exactly_the_five_services():
    assert set(BASE) == ONE_SHOT | LONG_RUNNING


@pytest.mark.parametrize("service", sorted(LONG_RUNNING))
def test_long_running_services_have_a_readiness_healthcheck_of_their_own(service):
    hc = BASE[service]["healthcheck"]
    # exec form, our readiness module, retrying inside the probe (Engine 20.10 has no start_interval)
    assert hc["test"][:5] == ["CMD", "python", "-m", "hermes_stack.health", service]
    assert hc["test"][5] == "--wait" and hc["test"][7] == "--hold"  # a passed container's probe holds
    assert "start_interval" not in hc  # Engine 20.10 rejects it
    assert hc["interval"] == "2s"
    assert int(hc["start_period"].rstrip("s")) > 0


def _requests_per_check(service: str, tmp_path: Path) -> int:
    """HTTP requests one check of `service` makes (hermes_stack.health.check, run against a fake fetch that passes
    it, with live readiness markers): each may take the request timeout."""
    from hermes_stack import health

    (tmp_path / "ready").mkdir(exist_ok=True)
    for name in ("environment", "trainer"):
        (tmp_path / "ready" / name).write_text(json.dumps({"pid": os.getpid()}))
    answers = {"/status": {"current_step": 0}, "/models": {"data": [{"id": "m"}]}, "/health_generate": {},
               "/readiness": {"healthy_workers": 1, "total_workers": 1}}
    calls = []

    def fetch(method, url, body, headers):
        calls.append(url)
        return 200, next(a for path, a in answers.items() if url.endswith(path))

    health.check(service, {"HERMES_DATA_DIR": str(tmp_path)}, fetch=fetch)
    return len(calls)


def _probe_ends_in_s(test: list[str], requests: int, request_timeout_s: float) -> float:
    """The longest a probe runs: its last check starts before max(--wait, --hold) runs out, then takes each request's
    timeout, plus ~1 s for the interpreter to start."""
    options = dict(zip(test[5::2], test[6::2]))
    return max(float(options["--wait"]), float(options.get("--hold", 0))) + requests * request_timeout_s + 1.0


def _probes():
    """(service, healthcheck) of the base stack and of the REPLICAS=N overlay's router (it extends atropos's)."""
    from hermes_stack.controller.replicas import override_text

    router = yaml.safe_load(override_text("grpo", "cpu", 2, "compose.grpo.yml").replace("!reset", "")
                            .replace("!override", ""))["services"]["router"]["healthcheck"]
    return [(service, BASE[service]["healthcheck"]) for service in sorted(LONG_RUNNING)] + [
        ("router", {**BASE["atropos"]["healthcheck"], **router})]


@pytest.mark.parametrize("service, hc", _probes(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_probe_that_waits_and_holds_inside_itself_ends_before_its_timeout(service, hc, tmp_path):
    """Even at the largest request timeout HERMES_HEALTH_TIMEOUT accepts: a probe Docker kills counts as failed."""
    from hermes_stack.service_env import ServiceEnv

    largest = ServiceEnv.model_fields["health_timeout_s"].metadata
    largest_s = next(m.le for m in largest if getattr(m, "le", None) is not None)
    assert hc["test"][:5] == ["CMD", "python", "-m", "hermes_stack.health", service]
    requests = _requests_per_check(service, tmp_path)  # inference's two (/v1/models, /health_generate) the most
    assert 0 < _probe_ends_in_s(hc["test"], requests, largest_s) < float(hc["timeout"].rstrip("s"))


def test_inference_gets_a_generous_start_period_for_model_loading_on_gpu():
    assert int(BASE["inference"]["healthcheck"]["start_period"].rstrip("s")) >= 600


def test_gateway_check_is_a_one_shot_everyone_waits_for():
    gc = BASE["gateway-check"]
    assert gc["restart"] == "no" and "healthcheck" not in gc
    assert gc["command"] == ["python", "-m", "hermes_stack.gateway", "check"]
    for service in LONG_RUNNING:
        assert BASE[service]["depends_on"]["gateway-check"] == {"condition": "service_completed_successfully"}


@pytest.mark.parametrize("service,needs", [
    ("atropos", set()),
    ("inference", set()),  # it never talks to Atropos: both start at once, the trainer waits for both
    ("trainer", {"atropos", "inference"}),
    ("environment", {"atropos", "inference", "trainer"}),
])
def test_dependencies_follow_the_protocol_order_and_wait_for_health(service, needs):
    deps = {k: v for k, v in BASE[service]["depends_on"].items() if k not in ONE_SHOT}
    assert set(deps) == needs
    assert all(v["condition"] == "service_healthy" for v in deps.values())
    if "atropos" in deps:  # Atropos keeps all state in memory: a restart must restart its dependents
        assert deps["atropos"]["restart"] is True


@pytest.mark.parametrize("service", sorted(ONE_SHOT | LONG_RUNNING))
def test_no_service_reads_a_key_file_itself_and_every_one_runs_under_init(service):
    # The controller reads the one key file ($HERMES_KEYFILE / --keyfile) and hands each service its variables.
    assert "env_file" not in BASE[service]
    assert BASE[service]["init"] is True


@pytest.mark.parametrize("files", [("compose.grpo.yml",), ("compose.ppo.yml", "compose.cpu.yml")], ids=" ".join)
def test_each_service_receives_exactly_the_key_file_variables_it_needs(files):
    from hermes_stack.secret_files import SECRETS
    from hermes_stack.service_env import PLAIN, RECEIVERS

    config = compose_config(*files)
    by_variable = {name: set() for name in RECEIVERS}
    for service, svc in config["services"].items():
        for ref in svc.get("secrets") or []:
            by_variable[SECRETS[ref["source"]]].add(service)
            # No uid/gid: Engine 20.10 cannot chown for an image whose USER is "10001:10001" (tested).
            assert (ref.get("uid"), ref.get("gid"), ref["mode"], ref["target"]) == (
                None, None, "0444", f"/run/secrets/{ref['source']}"), (service, ref)
        for name in svc["environment"]:
            if name in RECEIVERS:
                assert name in PLAIN, f"{service}: the secret {name} is an environment variable (docker inspect)"
                by_variable[name].add(service)
    assert by_variable == {name: set(services) for name, services in RECEIVERS.items()}
    assert "atropos" not in set().union(*by_variable.values())  # Atropos calls neither the gateway nor inference
    # Every secret's value comes from compose's process environment (the controller's), none from a file.
    assert {name: s["environment"] for name, s in config["secrets"].items()} == SECRETS


def test_the_algo_files_declare_the_same_secrets_as_the_base_file():
    base = load("compose.base.yml")["secrets"]
    for name in ALGO_FILES:
        assert load(name)["secrets"] == base, name


def _all_services():
    for name in ["compose.base.yml", *ALGO_FILES, "compose.cpu.yml"]:
        for service, svc in (load(name).get("services") or {}).items():
            yield name, service, svc


def test_every_service_carries_the_secrets_digest_so_a_changed_key_recreates_it():
    """A container keeps the secret files it was created with; the label is what compose compares (compose_env)."""
    for files in (("compose.ppo.yml",), ("compose.grpo.yml", "compose.cpu.yml")):
        config = compose_config(*files, env={"HERMES_SECRETS_DIGEST": "0123456789abcdef"})
        for name, svc in config["services"].items():
            assert svc.get("labels", {}).get("io.hermes-stack.secrets") == "0123456789abcdef", (files, name)


def test_published_ports_bind_loopback_only_in_every_file():
    seen = 0
    for name, service, svc in _all_services():
        for port in svc.get("ports") or []:
            seen += 1
            assert str(port).startswith("127.0.0.1:"), f"{name}: {service} publishes {port} beyond loopback"
    assert seen >= 2


def test_no_secret_is_written_inline():
    for name, service, svc in _all_services():
        env = svc.get("environment") or {}
        for key, value in (env.items() if isinstance(env, dict) else []):
            value = "" if value is None else str(value)
            assert not SECRET_VALUE.match(value), f"{name}: {service}.{key} holds a key-like value"
            if SECRETISH.search(key):
                assert value == "" or value.startswith("${"), f"{name}: {service}.{key} is set inline"
    for name in ["compose.base.yml", *ALGO_FILES, "compose.cpu.yml"]:
        assert not re.search(r"\b(sk|tml)-[A-Za-z0-9]{8,}", (ROOT / name).read_text()), name


def test_gpu_services_reserve_nvidia_and_use_sglang_host_settings():
    for service in ("inference", "trainer"):
        svc = BASE[service]
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "capabilities": ["gpu"]}]
        assert svc["ipc"] == "host" and svc["ulimits"] == {"memlock": -1, "stack": 67108864}


def test_data_lives_on_a_named_volume_on_every_service():
    for service, svc in BASE.items():
        assert "hermes-data:/data" in svc["volumes"], service
    assert "hermes-data" in load("compose.base.yml")["volumes"]


def _normalised(config: dict) -> dict:
    config = json.loads(json.dumps(config))
    config.pop("name")
    for key in [k for k in config if k.startswith("x-")]:  # extension fields are not part of the stack
        config.pop(key)
    for svc in config["services"].values():
        svc["environment"].pop("HERMES_ALGO")
    for section in ("volumes", "networks", "secrets"):
        for item in (config.get(section) or {}).values():
            item.pop("name", None)
    return config


def test_ppo_and_grpo_are_the_same_stack_except_hermes_algo():
    ppo, grpo = compose_config("compose.ppo.yml"), compose_config("compose.grpo.yml")
    assert {s["environment"]["HERMES_ALGO"] for s in ppo["services"].values()} == {"ppo"}
    assert {s["environment"]["HERMES_ALGO"] for s in grpo["services"].values()} == {"grpo"}
    assert _normalised(ppo) == _normalised(grpo)


def test_cpu_override_drops_the_gpu_and_selects_the_embedded_profile_and_cpu_target():
    config = compose_config("compose.grpo.yml", "compose.cpu.yml")
    for name, svc in config["services"].items():
        assert svc["environment"]["HERMES_PROFILE"] == "embedded", name
        assert "deploy" not in svc and "ipc" not in svc and "ulimits" not in svc, name
        for port in svc.get("ports") or []:
            assert port["host_ip"] == "127.0.0.1", name
    for name in ("inference", "trainer", "gateway-check"):
        assert config["services"][name]["build"]["target"] == "cpu"
        assert config["services"][name]["image"] == "hermes-stack/trainer:cpu"


def test_on_cpu_the_rollout_path_outweighs_the_trainer_for_the_cores_and_on_gpu_nothing_is_weighted():
    cpu = compose_config("compose.ppo.yml", "compose.cpu.yml")["services"]
    shares = {name: svc.get("cpu_shares", 1024) for name, svc in cpu.items()}  # Docker's default weight is 1024
    assert shares["trainer"] < min(shares[s] for s in ("inference", "environment", "atropos"))
    gpu = compose_config("compose.ppo.yml")["services"]
    assert not [name for name, svc in gpu.items() if "cpu_shares" in svc]


@pytest.mark.parametrize("device_files", [(), ("compose.cpu.yml",)])
def test_every_image_the_stack_builds_carries_the_label_its_prune_selects(device_files):
    from hermes_stack.controller.compose import BUILD_LABEL, prune_built_images_argv

    config = compose_config("compose.grpo.yml", *device_files)
    built = {name: svc["build"] for name, svc in config["services"].items() if "build" in svc}
    assert {"atropos", "inference", "trainer", "environment"} <= set(built)
    for name, build in built.items():
        assert (build.get("labels") or {}).get(BUILD_LABEL) == "1", name
    assert f"label={BUILD_LABEL}" in prune_built_images_argv()


def test_merged_config_keeps_healthchecks_init_and_loopback_ports_for_gpu_too():
    config = compose_config("compose.grpo.yml")
    for name, svc in config["services"].items():
        assert svc["init"] is True
        assert ("healthcheck" in svc) == (name in LONG_RUNNING), name
        for port in svc.get("ports") or []:
            assert port["host_ip"] == "127.0.0.1", name


def test_no_secret_value_appears_in_the_merged_config_even_when_compose_has_them():
    from hermes_stack.secret_files import SECRETS

    values = {variable: f"value-of-{variable.lower()}-0123456789" for variable in SECRETS.values()}
    text = json.dumps(compose_config("compose.grpo.yml", env={**values, "HERMES_UNLOCK": "1"}))
    assert not [v for v in values.values() if v in text]
    assert '"HERMES_UNLOCK": "1"' in text  # while the plain variables do arrive


# ---- Dockerfiles -------------------------------------------------------------------------------------------------

DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))


def _stages(path: Path) -> dict[str, list[str]]:
    stages: dict[str, list[str]] = {}
    current = None
    for line in path.read_text().replace("\\\n", " ").splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM":
            current = words[-1] if len(words) >= 4 and words[-2].upper() == "AS" else f"stage{len(stages)}"
            stages[current] = []
        elif current and words and not line.lstrip().startswith("#"):
            stages[current].append(line.strip())
    return stages


def _final_stages(path: Path) -> list[str]:
    """Stages an image is built from: `cpu`/`gpu` in trainer.Dockerfile, else the last stage."""
    stages = _stages(path)
    named = [s for s in stages if s in ("cpu", "gpu")]
    return named or [list(stages)[-1]]


def test_there_is_one_dockerfile_per_image():
    assert [p.name for p in DOCKERFILES] == ["atropos.Dockerfile", "environment.Dockerfile", "trainer.Dockerfile"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_images_run_as_non_root_with_exec_form_cmd(path):
    stages = _stages(path)
    for stage in _final_stages(path):
        lines = stages[stage]
        users = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")]
        assert users and users[-1].split(":")[0] not in ("0", "root"), f"{path.name}:{stage} runs as root"
        cmds = [ln for ln in lines if ln.upper().startswith("CMD ")]
        assert cmds and cmds[-1][4:].lstrip().startswith("["), f"{path.name}:{stage} CMD is not exec form"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfiles_need_no_registry_frontend_and_pin_their_bases(path):
    text = path.read_text()
    assert not re.search(r"^#\s*syntax\s*=", text, re.MULTILINE | re.IGNORECASE)  # a syntax line pulls an image
    for default in re.findall(r"^ARG \w+_IMAGE=(\S+)", text, re.MULTILINE):
        assert ":" in default and not default.endswith(":latest"), default
    assert len(_stages(path)) >= 2  # multi-stage


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_code_is_copied_after_the_dependency_layers(path):
    stages = _stages(path)
    for stage in _final_stages(path):
        lines = stages[stage]
        code = max(i for i, ln in enumerate(lines) if ln.startswith("COPY") and "hermes_stack" in ln)
        deps = [i for i, ln in enumerate(lines) if "pip install" in ln or "/opt/venv /opt/venv" in ln]
        assert deps and max(deps) < code, f"{path.name}:{stage}: dependencies must come before the code layer"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_our_code_is_compiled_in_the_image_as_the_runtime_user_cannot_write_it(path):
    for stage in _final_stages(path):
        lines = _stages(path)[stage]
        code = max(i for i, ln in enumerate(lines) if ln.startswith("COPY") and "hermes_stack" in ln)
        user = max(i for i, ln in enumerate(lines) if ln.upper().startswith("USER "))
        assert any("compileall" in ln and "/app/hermes_stack" in ln for ln in lines[code + 1:user]), (path.name, stage)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_cpu_builds_install_only_from_the_wheelhouse(path):
    for stage, lines in _stages(path).items():
        if stage == "gpu":
            continue  # the SGLang image's Python differs from the host's: see trainer.Dockerfile
        for ln in lines:
            if "pip install" in ln:
                assert "--no-index" in ln and "--mount=type=bind,source=.cache/wheelhouse" in ln, (path.name, ln)


def test_dockerignore_keeps_the_context_small_but_lets_the_wheelhouse_in():
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[next(i for i, ln in enumerate(lines) if not ln.startswith("#"))] == "*"
    assert "!.cache/wheelhouse/" in lines and "!hermes_stack/" in lines


@pytest.mark.parametrize("files", [("compose.grpo.yml",), ("compose.ppo.yml", "compose.cpu.yml")])
def test_the_trainer_gets_a_stop_grace_period_to_checkpoint_on_sigterm(files):
    """A stop is a checkpoint: Docker's default 10 s before SIGKILL is too short for a large model's save."""
    trainer = compose_config(*files)["services"]["trainer"]
    grace = trainer.get("stop_grace_period", "10s")  # compose prints durations as Go does: "1m0s", "45s"
    minutes, _, seconds = grace.rpartition("m")
    assert float(minutes or 0) * 60 + float(seconds.rstrip("s") or 0) >= 30, grace


def test_catalog_model_choice_reaches_every_service_from_the_controller_environment():
    chosen = compose_config("compose.grpo.yml", "compose.cpu.yml", env={"HERMES_MODEL": "smollm2-135m"})
    default = compose_config("compose.grpo.yml", "compose.cpu.yml")
    for name, svc in chosen["services"].items():
        assert svc["environment"]["HERMES_MODEL"] == "smollm2-135m", name
        assert svc["environment"]["HERMES_MODELS_DIR"] == "/opt/hermes/models", name
        assert default["services"][name]["environment"]["HERMES_MODEL"] == "", name

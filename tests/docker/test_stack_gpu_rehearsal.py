"""The GPU rehearsal on CPU (issue 16): the controller's own `up --device gpu` brings up the gpu profile with the
trainer image's `gpu` target, built FROM a stand-in for the SGLang image (its `sglang.launch_server` speaks SGLang's
command line, logs `server_args` with the key as SGLang does, and serves SGLang's API over the built-in backend),
and a stand-in of the hub's file API in the project's network. The host's GPU tools are stand-ins too (nvidia-smi
stating a 16 GiB GPU and a recent driver, the container runtime hook): preflight, the driver check and the memory
split run as on a VM. Only the CUDA kernels differ from a real GPU VM (bench/gpu_smoke.py --stack checks those).

The SGLang stand-in is as strict as SGLang where the built-in backend is forgiving (it refuses a loaded adapter
name, unloads only once no request holds the adapter, fails an unknown sampling parameter and a never-loaded
lora_path, serves the base model to a request naming no adapter), and its start is slowed past the trainer's
fixed inference wait, as a large model's is. The run takes the risky settings of a first real run.

Torch part: the split `validate` computes reaches SGLang's --mem-fraction-static; the model comes by hub id through
the hub stand-in, downloaded once into the shared cache volume, written by uid 10001, then loaded by inference,
trainer and environment; LoRA serving is on and the stand-in loads the trainer's adapters; a JSONL dataset with
prompts of hundreds of tokens, max_token_length 512 on a model whose context is 1024, T = 0.8; inference restarted
mid-run (its start slower than HERMES_INFERENCE_WAIT_S) and training goes on to its last step; `docker compose logs
inference` never shows the key although SGLang's stand-in prints it.
Tinker part: the same profile with trainer.engine = "tinker" and a key file, as a Tinker user has one: its
TINKER_API_KEY and TINKER_BASE_URL reach the trainer, which drives the real tinker SDK against the local Tinker
service (tests/fakes/tinker_service.py, its own container, checking the same key); the key file's gateway is the
fake gateway (gateway-check passes against it). The exported adapters hold a trained LoRA update and the strict
stand-in serves them (its answers differ from the base model's). T = 1 there (validate refuses another with Tinker).
The gpu target's own build steps are checked on the image the rehearsal runs (no build of its own: CI time is
shared): the wheel installs (Tinker SDK, the trainer group) on the stand-in's Python, wheelhouse-only (PIP_NO_INDEX),
the non-root user, our code compiled at build time, the entrypoints.
Sorted after test_stack_cpu.py on purpose: the hub stand-in runs in the trainer's cached `cpu` image."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PROJECT = "hermes-test-gpu-rehearsal"
OVERRIDE = "tests/docker/fixtures/gpu-rehearsal.yml"
REHEARSAL = "tests/docker/fixtures/gpu-rehearsal"  # its configs/ (mounted at /app/configs by the override)
TINKER_OVERRIDES = ("tests/docker/fixtures/fake-gateway.yml", "tests/docker/fixtures/gpu-rehearsal-tinker.yml")
TINKER_REHEARSAL = "tests/docker/fixtures/gpu-rehearsal-tinker"
REPO = os.environ.get("HERMES_IMAGE_REPO", "hermes-stack")
IMAGES = (f"{REPO}/trainer:gpu-rehearsal", f"{REPO}/sglang-standin:rehearsal")
HUB_PORT = "8090"
MODEL = "hermes-test/tiny-arith-long"   # the torch part: the tiny model with 1024 positions
TINKER_MODEL = "hermes-test/tiny-arith"  # the Tinker part: what the local Tinker service trains
TINKER_STEPS = 3  # gpu-rehearsal-tinker/configs/settings_grpo.json num_steps
START_DELAY_S = 40  # the stand-in's extra start time, on every start: past the trainer's inference wait below
INFERENCE_WAIT_S = 15
STEPS = 8           # settings_grpo.json num_steps (torch part); inference restarts after step RESTART_AFTER, with
# steps left to train through it (at 4, the image check and the poll let a fast trainer finish before the restart)
RESTART_AFTER = 2
GPU_MIB = 16384  # the stated GPU: 16 GiB
NVIDIA_SMI = f"""#!/bin/sh
# Stand-in for the host's nvidia-smi: one 16 GiB GPU, a driver new enough for the CUDA 13 SGLang image.
case "$*" in
  *driver_version*) echo "NVIDIA Rehearsal GPU, {GPU_MIB} MiB, 580.65.06" ;;
  *memory.total*) echo "{GPU_MIB}" ;;
  *) echo "NVIDIA Rehearsal GPU" ;;
esac
"""


# Imports the gpu services need beyond what SGLang's image brings (its torch/transformers come from the stand-in).
IMPORTS = ("import tinker, peft, httpx, pydantic, hermes_stack.trainer.engine_tinker, hermes_stack.inference.sglang, "
           "hermes_stack.trainer.__main__; print('imports ok')")


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False, timeout=300)


def assert_gpu_image_is_sound(image: str) -> None:
    """The trainer image's `gpu` target as built FROM the SGLang stand-in: its user, command, imports, entrypoints."""
    config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", image).stdout)
    assert config["User"] == "10001:10001"
    assert config["Cmd"] == ["python", "-m", "hermes_stack.trainer"]
    who = docker("run", "--rm", image, "id", "-u")
    assert who.returncode == 0 and who.stdout.strip() == "10001", who.stderr
    imports = docker("run", "--rm", image, "python", "-c", IMPORTS)
    assert imports.returncode == 0 and "imports ok" in imports.stdout, imports.stderr[-2000:]
    for argv, expect in ((["python", "-m", "hermes_stack.trainer", "--help"], "--dry-run"),
                         (["python", "-m", "hermes_stack.health", "--help"], "--wait")):
        done = docker("run", "--rm", image, *argv)
        assert done.returncode == 0 and expect in done.stdout, (argv, done.stdout[-500:], done.stderr[-500:])
    # Our code was compiled at build time: the runtime user cannot write __pycache__ under /app.
    pyc = docker("run", "--rm", image, "sh", "-c", "ls /app/hermes_stack/__pycache__ && test ! -w /app/hermes_stack")
    assert pyc.returncode == 0, pyc.stderr


def compose(env: dict[str, str], *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    files = ["-f", str(ROOT / "compose.grpo.yml"), "-f", str(ROOT / OVERRIDE)]
    if env.get("HERMES_REHEARSAL_CONFIGS"):  # the Tinker part
        files += [a for f in TINKER_OVERRIDES for a in ("-f", str(ROOT / f))]
    return subprocess.run(["docker", "compose", "--project-name", PROJECT, "--project-directory", str(ROOT), *files,
                           *args], env=env, capture_output=True, text=True, check=False, timeout=timeout)


def hs(env: dict[str, str], *args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    # Run from the rehearsal's folder, as a user with their own configs/ would: the controller validates
    # ./configs; HERMES_ROOT keeps the compose project, scripts and .hermes/ state at the repository.
    folder = TINKER_REHEARSAL if env.get("HERMES_REHEARSAL_CONFIGS") else REHEARSAL
    return subprocess.run([sys.executable, "-m", "hermes_stack", *args], cwd=ROOT / folder, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def metrics(env: dict[str, str]) -> list[dict]:
    # Read through inference, which mounts the same data volume: the trainer's container exits after its last step.
    out = compose(env, "exec", "-T", "inference", "cat", "/data/metrics.jsonl").stdout
    return [row for line in out.splitlines() if line.startswith("{") and "step" in (row := json.loads(line))]


def wait_for_steps(env: dict[str, str], count: int, timeout_s: float) -> list[dict]:
    deadline = time.monotonic() + timeout_s  # a bound on a wait, not a timing assertion
    rows = metrics(env)
    while time.monotonic() < deadline and len(rows) < count:
        time.sleep(1)
        rows = metrics(env)
    return rows


def wheels_and_standin(env: dict[str, str]) -> None:
    wheels = subprocess.run(["bash", str(ROOT / "scripts" / "wheelhouse.sh")], capture_output=True, text=True,
                            timeout=900, check=False)
    assert wheels.returncode == 0, wheels.stderr[-2000:]
    built = compose(env, "--profile", "build-only", "build", "sglang-standin")  # the gpu target builds FROM it
    assert built.returncode == 0, built.stderr[-3000:]


def start_hub_and_fetch_shape(env: dict[str, str], model: str) -> None:
    hub = compose(env, "up", "--detach", "--wait", "--wait-timeout", "300", "hub")
    assert hub.returncode == 0, hub.stderr[-3000:]
    # The model's shape for the split, as a user gets it: its config.json in this machine's hub cache.
    fetch = f"from huggingface_hub import hf_hub_download; print(hf_hub_download('{model}', 'config.json'))"
    shape = subprocess.run([sys.executable, "-c", fetch], env=env, capture_output=True, text=True, timeout=120,
                           check=False)
    assert shape.returncode == 0, shape.stderr[-2000:]


def tear_down(env: dict[str, str]) -> None:
    hs(env, "down", "--algo", "grpo", "--volumes")  # also removes the .env `up` wrote for plain compose commands
    compose(env, "down", "--volumes", "--remove-orphans")
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert left == []


@pytest.fixture(scope="module", autouse=True)
def _rehearsal_images():
    yield  # both parts build and share them; removed once, after the last
    for image in IMAGES:
        try:
            subprocess.run(["docker", "image", "rm", "-f", image], capture_output=True, check=False, timeout=120)
        except OSError:  # no docker CLI: the tests were skipped
            pass


@pytest.fixture()
def env(tmp_path, base_image):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text(NVIDIA_SMI)
    (tools / "nvidia-container-runtime-hook").write_text("#!/bin/sh\nexit 0\n")
    for tool in tools.iterdir():
        tool.chmod(0o755)
    # Offline: no key file in the rehearsal folder (the controller's working directory), none named.
    inherited = {k: v for k, v in os.environ.items() if k != "HERMES_KEYFILE" and not k.startswith("TAOTOKEN_")}
    return {**inherited, "HERMES_ROOT": str(ROOT), "PYTHONPATH": str(ROOT), "HERMES_PROJECT_NAME": PROJECT, "HERMES_HUB_PORT": HUB_PORT,
            "HERMES_STANDIN_START_DELAY_S": str(START_DELAY_S), "HERMES_INFERENCE_WAIT_S": str(INFERENCE_WAIT_S),
            "PATH": f"{tools}:{os.environ['PATH']}", "HF_HOME": str(tmp_path / "hf"), "HERMES_BASE_IMAGE": base_image,
            "HERMES_IMAGE_REPO": REPO,
            # the host-side config.json fetch talks to the hub stand-in on loopback only
            "HF_ENDPOINT": f"http://127.0.0.1:{HUB_PORT}"}


def test_gpu_profile_rehearsal_on_cpu_risky_settings_strict_sglang_and_an_inference_restart(env):
    compose(env, "down", "--volumes", "--remove-orphans")
    try:
        wheels_and_standin(env)
        start_hub_and_fetch_shape(env, MODEL)

        up = hs(env, "up", "--algo", "grpo", "--device", "gpu", "--wait-timeout", "600", "-f", OVERRIDE)
        assert up.returncode == 0, f"up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        assert "dry-run passed" in up.stdout and "NVIDIA driver version 580.65.06" in up.stdout

        # The split validate computed for the stated 16 GiB GPU, printed, and handed to SGLang.
        split = [line for line in up.stdout.splitlines() if "--mem-fraction-static" in line]
        assert "GPU memory split (16 GiB" in up.stdout and split, up.stdout[-3000:]
        fraction = split[0].split("--mem-fraction-static ")[1].split()[0]
        assert 0 < float(fraction) < 1
        assert_gpu_image_is_sound(IMAGES[0])  # while the first steps train

        rows = wait_for_steps(env, RESTART_AFTER, 600)
        assert len(rows) >= RESTART_AFTER, compose(env, "logs", "--tail", "60", "trainer", "inference").stdout[-4000:]

        # An inference restart mid-run: the front restarts SGLang (its start slowed past the trainer's fixed wait),
        # loads the newest step the trainer synced itself, and training goes on to its last step.
        assert len(metrics(env)) < STEPS, "training ended before the restart: nothing left to train through it"
        restarted = compose(env, "restart", "inference")
        assert restarted.returncode == 0, restarted.stderr[-2000:]
        rows = wait_for_steps(env, STEPS, 900)
        trainer_logs = compose(env, "logs", "trainer").stdout
        logs = compose(env, "logs", "inference").stdout
        said = "\n".join(line for line in logs.splitlines() if "hermes.inference" in line or "sglang-standin:" in line)
        if len(rows) < STEPS:  # the three services' own words, untruncated by pytest's repr of a tuple
            env_logs = compose(env, "logs", "--tail", "40", "environment").stdout
            pytest.fail(f"{len(rows)} of {STEPS} steps\n--- trainer\n{trainer_logs[-3000:]}\n--- inference\n"
                        f"{logs[-2000:]}\n--- environment\n{env_logs[-4000:]}", pytrace=False)
        assert [r["step"] for r in rows][-1] == STEPS and "training finished" in trainer_logs, trainer_logs[-3000:]
        # Long sequences were trained: the JSONL's long rows are 60-120 prompt tokens, up to 512 with the answer
        # (the tiny model's own context is 64), sampled at T = 0.8.
        assert max(r["widest_sequence"] for r in rows) > 128, [r["widest_sequence"] for r in rows]
        assert logs.count("sglang-standin: loading for 40 s") == 2, logs[-3000:]  # both starts were slow
        assert "serving the newest synced weights /data/weights/step-" in logs, said[-4000:]
        if "inference unreachable" in trainer_logs:  # a push fell in the outage: ridden out past the fixed wait
            assert "inference back after" in trainer_logs, trainer_logs[-3000:]
            waited = trainer_logs.split("waiting up to ")[1].split(" s")[0]
            assert float(waited) > INFERENCE_WAIT_S, trainer_logs[-3000:]
        assert "Internal Server Error" not in logs and "never been loaded" not in logs, logs[-3000:]
        assert "because it is already loaded" not in logs, logs[-3000:]  # the stand-in refused no push

        key = (ROOT / ".hermes" / "inference.key").read_text().strip()
        assert len(key) > 16 and key not in logs, "the inference key leaked into `docker compose logs inference`"
        assert "server_args=ServerArgs(" in logs and "api_key='<redacted>'" in logs  # printed, and masked
        assert f"mem_fraction_static={fraction}" in logs
        assert ("enable_lora=True, max_lora_rank=32, lora_target_modules=['q_proj', 'k_proj', 'v_proj', 'o_proj', "
                "'gate_proj', 'up_proj', 'down_proj']") in logs
        assert "sglang-standin: loaded LoRA adapter step-1 (rank 32)" in logs, logs[-3000:]
        assert "sglang-standin: unloaded LoRA adapter step-" in logs, logs[-3000:]  # old adapters do go

        # The model came through the hub path, once, into the shared cache, and every service used that copy.
        assert f"inference: downloading {MODEL} from http://hub:8080" in logs
        stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{HUB_PORT}/_stats", timeout=10).read())
        fetched = {k.removeprefix(MODEL + "/"): n for k, n in stats["downloads"].items() if k.startswith(MODEL + "/")}
        assert "model.safetensors" in fetched and "tokenizer_config.json" in fetched, fetched
        assert 1 <= fetched["config.json"] <= 2  # the host's shape lookup may have fetched it too
        assert all(n == 1 for name, n in fetched.items() if name != "config.json"), fetched  # weights etc.: once
        assert f"trainer: model {MODEL} from the shared cache" in trainer_logs, trainer_logs[-2000:]

        # The cache volume was written by the service user (the image created the folder owned by uid 10001).
        cache = "/home/hermes/.cache/huggingface"
        owners = compose(env, "exec", "-T", "inference", "sh", "-c",
                         f"stat -c %u {cache} && find {cache} ! -user 10001 | head -5 && find {cache}/hub -type f | wc -l")
        lines = owners.stdout.split()
        assert owners.returncode == 0 and lines[0] == "10001" and len(lines) == 2 and int(lines[1]) > 0, owners
    finally:
        tear_down(env)


# In a container on the data volume: the newest exported step, and the largest |lora_B| in it (0 before any update).
ADAPTER_DELTA = r"""
import glob, json
from safetensors.torch import load_file
steps = sorted(glob.glob("/data/weights/step-*"), key=lambda p: int(p.rsplit("-", 1)[1]))
tensors = load_file(steps[-1] + "/adapter_model.safetensors")
b = [v for k, v in tensors.items() if "lora_B" in k]
print(json.dumps({"step": int(steps[-1].rsplit("-", 1)[1]), "lora_b": len(b),
                  "max_b": max(float(v.abs().max()) for v in b)}))
"""

# In the inference container, asked of SGLang (the stand-in) itself behind our front (the front answers a request naming
# no adapter with the newest one): one greedy request with the newest adapter it serves, one naming none (the base).
SERVED = r"""
import json, os, urllib.request
from hermes_stack.secret_files import load_secrets
load_secrets()  # the inference key is a Compose secret file, as the services read it
auth = {"Authorization": "Bearer " + os.environ["HERMES_INFERENCE_KEY"], "content-type": "application/json"}
def generate(lora):
    body = {"text": "42+3=", "sampling_params": {"max_new_tokens": 4, "temperature": 0.0}, "return_logprob": True,
            **({"lora_path": lora} if lora else {})}
    request = urllib.request.Request("http://127.0.0.1:30000/generate", json.dumps(body).encode(), auth)
    return json.load(urllib.request.urlopen(request, timeout=30))
info = json.load(urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:8001/get_model_info", headers=auth),
                                        timeout=30))
newest = max(info.get("lora_adapters") or ["step-0"], key=lambda name: int(name.rsplit("-", 1)[1]))
lp = lambda r: [t[0] for t in r["meta_info"]["output_token_logprobs"]]
adapter, base = generate(newest), generate(None)
print(json.dumps({"adapters": info.get("lora_adapters"), "newest": newest,
                  "diff": max(abs(a - b) for a, b in zip(lp(adapter), lp(base)))}))
"""


def tinker_key_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A user's key file for the Tinker engine: the CPU stack test's random secrets (a leak is then unambiguous),
    with the local Tinker service's URL."""
    from tests.docker.test_stack_cpu import key_file_lines

    lines = {**key_file_lines(), "TINKER_BASE_URL": "http://tinker:8080"}
    path = tmp_path / "keys.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    path.chmod(0o600)
    return path, lines


def test_gpu_profile_rehearsal_on_cpu_trains_with_the_tinker_engine_from_a_key_file(env, tmp_path):
    keys, lines = tinker_key_file(tmp_path)
    env = {**env, "HERMES_REHEARSAL_CONFIGS": f"./{TINKER_REHEARSAL}/configs", "HERMES_STANDIN_START_DELAY_S": "0",
           "HERMES_KEYFILE": str(keys)}
    compose(env, "down", "--volumes", "--remove-orphans")
    try:
        wheels_and_standin(env)
        start_hub_and_fetch_shape(env, TINKER_MODEL)
        up = hs(env, "up", "--algo", "grpo", "--device", "gpu", "--wait-timeout", "600", "-f", OVERRIDE,
                *[a for f in TINKER_OVERRIDES for a in ("-f", f)])
        assert up.returncode == 0, f"up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        assert "dry-run passed" in up.stdout
        # Before step 1 the Tinker policy is the base model: the local critic's copy scores the stand-in's rollouts.
        assert "dry-run check log-probs: the trainer scores the server's rollouts as it samples them" in up.stdout, \
            up.stdout[-3000:]
        check = compose(env, "logs", "gateway-check").stdout  # the key file's gateway, checked before anything
        assert "gateway OK: http://fake-gateway:9000" in check, check[-2000:]

        rows = wait_for_steps(env, TINKER_STEPS, 600)
        trainer_logs = compose(env, "logs", "trainer").stdout
        logs = compose(env, "logs").stdout
        assert len(rows) >= TINKER_STEPS and "training finished" in trainer_logs, (trainer_logs[-3000:], logs[-2000:])
        assert any(key.startswith("tinker/") for key in rows[-1]), rows[-1]  # the Tinker engine's own figures

        # The Tinker steps changed the policy (LoRA B starts at zero), and the strict stand-in serves that adapter.
        delta = compose(env, "exec", "-T", "inference", "python", "-c", ADAPTER_DELTA)
        assert delta.returncode == 0, delta.stderr[-2000:]
        adapter = json.loads(delta.stdout)
        assert adapter["step"] == TINKER_STEPS and adapter["lora_b"] > 0 and adapter["max_b"] > 0.0, adapter
        served = compose(env, "exec", "-T", "inference", "python", "-c", SERVED)
        assert served.returncode == 0, served.stderr[-2000:]
        answer = json.loads(served.stdout)
        assert answer["newest"] == f"step-{TINKER_STEPS}" and answer["diff"] > 0.0, answer
        served_logs = compose(env, "logs", "inference").stdout
        assert "sglang-standin: loaded LoRA adapter step-1 (rank 32)" in served_logs, served_logs[-3000:]
        assert "because it is already loaded" not in served_logs, served_logs[-3000:]
        assert "Internal Server Error" not in served_logs, served_logs[-3000:]
        assert "no answer from the Tinker API" not in trainer_logs, trainer_logs[-3000:]
        for name in ("TAOTOKEN_API_KEY", "TINKER_API_KEY"):  # neither secret in any service's log
            assert lines[name] not in logs and lines[name][4:20] not in logs, f"{name} leaked into compose logs"
    finally:
        tear_down(env)

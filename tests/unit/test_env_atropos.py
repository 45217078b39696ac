"""Integration: the REAL atroposlib `run-api`, the environment service (`python -m hermes_stack.environment serve`)
against a fake SGLang-style inference server, and a stub trainer that registers and consumes batches."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fakes.fake_inference import LOGPROB, FakeInference
from fakes.loopback import free_port
from fakes.stack_files import write_stack
from fakes.tiny_tokenizer import build_tiny_tokenizer

REPO = Path(__file__).resolve().parents[2]
RUN_API = Path(sys.executable).parent / "run-api"
GROUP, PROMPTS, STEPS = 4, 2, 2




def wait_for(predicate, timeout_s: float, what: str, proc=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: process exited with {proc.returncode}")
        result = predicate()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def reset_and_register_again(url: str, registration: dict, attempts: int = 5) -> None:
    """/reset_data then /register, as the trainer does (AtroposClient.clear_queue_and_reregister). The environment
    keeps posting groups: one that lands between the two calls makes run-api's /register skip initialising the run
    (it checks for a queue), leaving batch_size -1 so no batch ever forms. /info tells; the pair is repeated."""
    for _ in range(attempts):
        assert httpx.get(url + "/reset_data", timeout=5).status_code == 200
        assert httpx.post(url + "/register", json=registration, timeout=5).status_code == 200
        if httpx.get(url + "/info", timeout=5).json()["batch_size"] == registration["batch_size"]:
            return
    raise AssertionError(f"could not register again after /reset_data ({attempts} attempts): groups kept arriving")


def write_sums_stack(tmp_path: Path) -> Path:
    """configs/ for a GRPO run over 60 sums with the tiny tokenizer; the tokenizer's folder."""
    tokenizer_dir = build_tiny_tokenizer(tmp_path / "tok")
    rows = [{"question": f"What is {a}+{b}?", "answer": f"#### {a + b}"} for a in range(10) for b in range(6)]
    (tmp_path / "sums.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    write_stack(tmp_path / "configs", dataset=str(tmp_path / "sums.jsonl"), model_path=str(tokenizer_dir),
                group_size=GROUP, batch_size=PROMPTS, max_token_length=200, num_steps=STEPS)
    return tokenizer_dir


def register_stub_trainer(atropos: str, tmp_path: Path) -> dict:
    """Register (Atropos counts sequences), then one GET /batch so environments may register."""
    registration = {"wandb_group": "g", "wandb_project": "p", "batch_size": PROMPTS * GROUP, "max_token_len": 256,
                    "checkpoint_dir": str(tmp_path / "ckpt"), "save_checkpoint_interval": -1,
                    "starting_step": 0, "num_steps": STEPS}
    assert httpx.post(atropos + "/register", json=registration, timeout=5).status_code == 200
    assert httpx.get(atropos + "/batch", timeout=5).json()["batch"] is None
    return registration


def start_serving(tmp_path: Path, atropos: str, inference, data_dir: Path) -> subprocess.Popen:
    """`python -m hermes_stack.environment serve` against them, its log in tmp_path/env.log."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TAOTOKEN_", "WANDB_"))}
    environ.update(HERMES_ALGO="grpo", HERMES_CONFIG_DIR=str(tmp_path / "configs"), HERMES_PROFILE="gpu",
                   HERMES_ATROPOS_URL=atropos, HERMES_INFERENCE_URL=inference.base_url,
                   HERMES_INFERENCE_KEY=inference.api_key, HERMES_DATA_DIR=str(data_dir),
                   HERMES_KEYFILE=str(tmp_path / "absent"), PYTHONPATH=str(REPO))
    with open(tmp_path / "env.log", "w") as env_log:
        return subprocess.Popen([sys.executable, "-m", "hermes_stack.environment", "serve"], env=environ,
                                cwd=tmp_path, stdout=env_log, stderr=subprocess.STDOUT)


@pytest.fixture
def atropos(tmp_path):
    port = free_port()
    with open(tmp_path / "api.log", "w") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([str(RUN_API), "--host", "127.0.0.1", "--port", str(port)], stdout=log,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up():
        try:
            return httpx.get(url + "/", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 60, "run-api", proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
@pytest.mark.parametrize("behind_router", [False, True], ids=["inference", "router-refuses-list-form"])
def test_serve_feeds_a_stub_trainer_and_exits_at_total_steps(tmp_path, atropos, behind_router):
    tokenizer_dir = write_sums_stack(tmp_path)
    data_dir = tmp_path / "data"
    marker = data_dir / "ready" / "environment"

    with FakeInference(tokenizer_dir, refuse_list_form=behind_router) as inference:
        registration = register_stub_trainer(atropos, tmp_path)
        env = start_serving(tmp_path, atropos, inference, data_dir)
        try:
            wait_for(marker.exists, 120, "the readiness marker", env)
            assert json.loads(marker.read_text())["pid"] == env.pid

            batches = []

            def next_batch():
                body = httpx.get(atropos + "/batch", timeout=5).json()
                if body.get("batch"):
                    batches.append(body["batch"])
                return len(batches) >= len(batches_before) + 1

            batches_before: list = []
            wait_for(next_batch, 120, "the first batch", env)
            # Atropos forgets everything (a restart, or the trainer clearing a queue a departed environment
            # blocked): the trainer registers again at its step; the environment must register again in-process.
            reset_and_register_again(atropos, {**registration, "starting_step": 1})
            batches_before = list(batches)
            wait_for(next_batch, 120, "the second batch, after the environment registered again", env)
            assert env.wait(60) == 0  # total_steps reached: clean exit
        finally:
            if env.poll() is None:
                env.kill()
        log_text = (tmp_path / "env.log").read_text()

    assert not marker.exists(), "the marker must be removed on exit"
    for batch in batches:
        assert sum(len(group["tokens"]) for group in batch) == PROMPTS * GROUP
        for group in batch:
            assert len(group["tokens"]) == len(group["masks"]) == len(group["scores"]) == GROUP
            assert len(group["inference_logprobs"]) == GROUP
            assert group["scores"] == pytest.approx([1.1, 0.1, 1.1, 0.1])
            assert group["env_id"] == 0
            for tokens, mask, logprobs in zip(group["tokens"], group["masks"], group["inference_logprobs"]):
                assert len(tokens) == len(mask) == len(logprobs) < 256
                start = next(i for i, m in enumerate(mask) if m != -100)
                assert start > 0 and mask[start:] == tokens[start:]
                assert logprobs[start:] == [LOGPROB] * (len(tokens) - start)
    assert "registered with Atropos" in log_text
    # behind SGLang's router the chunks' list form is refused once, then each request carries one object
    assert ("refused sampling_params as a list" in log_text) is behind_router
    assert "registering again" in log_text and log_text.count("registered with Atropos") == 2  # same process
    assert "batch 1:" in log_text and "mean score 0.600" in log_text
    assert "rollout rate" in log_text and "with groups in flight" in log_text  # the environment's own rate
    # atroposlib sets its logger to DEBUG on import: its per-worker and per-poll lines must stay out of the log
    assert "handle_env: Starting with item" not in log_text and "env_manager: Status dict" not in log_text
    assert "total_steps 2 reached" in log_text


@pytest.mark.slow
def test_serve_stays_until_the_trainer_pushed_its_last_step_though_it_handed_batches_back(tmp_path, atropos):
    """A trainer hands back batches whose every group lags the policy (trainer/loop.py): Atropos' step runs ahead of
    the steps trained. atroposlib's own exit (Atropos' step plus the queued batches past total_steps) would leave the
    trainer waiting for a batch nobody sends; the environment stays until the trainer's pushed step says it is done."""
    from hermes_stack.modelcore.weights_layout import write_served_step

    data_dir = tmp_path / "data"
    with FakeInference(write_sums_stack(tmp_path)) as inference:
        register_stub_trainer(atropos, tmp_path)
        env = start_serving(tmp_path, atropos, inference, data_dir)
        try:
            def a_batch():
                return httpx.get(atropos + "/batch", timeout=5).json().get("batch")

            wait_for(a_batch, 120, "the first batch", env)
            write_served_step(data_dir / "weights", 1)  # step 1 trained and pushed
            for n in (2, 3):  # two batches handed back as too stale: Atropos at step 3, the trainer at 1 of 2
                wait_for(a_batch, 120, f"batch {n}", env)
            wait_for(a_batch, 120, "a batch for step 2 after two handed back", env)
            assert env.poll() is None, "the environment left while the trainer still needed a batch"
            write_served_step(data_dir / "weights", STEPS)
            assert env.wait(60) == 0
        finally:
            if env.poll() is None:
                env.kill()
    assert f"total_steps {STEPS} reached (the trainer pushed step {STEPS})" in (tmp_path / "env.log").read_text()

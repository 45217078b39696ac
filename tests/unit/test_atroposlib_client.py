"""Acceptance: atroposlib's own server client (server_type "sglang") runs against the builtin inference service.

The service is the real entry point (`python -m hermes_stack.inference`) on a loopback port, configured only through
the environment the compose file gives it (embedded profile, fixture model as the embedded model).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("atroposlib")
pytestmark = pytest.mark.slow  # a real service process: ~10-20 s, mostly imports

from fakes.loopback import free_port

from tests.fakes.fixture_model import build_fixture_model

REPO = Path(__file__).resolve().parents[2]
KEY = "acceptance-key-123"




@pytest.fixture(scope="module")
def service(tmp_path_factory):
    model_dir = tmp_path_factory.getbasetemp() / "fixture-model"
    if not (model_dir / "config.json").exists():
        build_fixture_model(model_dir)
    data_dir = tmp_path_factory.mktemp("data")
    port = free_port()
    env = {**os.environ, "HERMES_CONFIG_DIR": str(REPO / "configs"), "HERMES_ALGO": "grpo",
           "HERMES_PROFILE": "embedded", "HERMES_EMBEDDED_MODEL": str(model_dir), "HERMES_DATA_DIR": str(data_dir),
           "HERMES_INFERENCE_KEY": KEY, "HERMES_INFERENCE_PORT": str(port), "HERMES_INFERENCE_HOST": "127.0.0.1",
           "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    log = tmp_path_factory.mktemp("log") / "inference.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "hermes_stack.inference"], cwd=REPO, env=env,
                                   stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if process.poll() is not None:
                pytest.fail(f"inference exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            pytest.fail(f"inference did not start: {log.read_text()[-2000:]}")
        yield {"url": url, "model_dir": model_dir, "data_dir": data_dir, "log": log, "process": process}
    finally:
        process.terminate()
        process.wait(timeout=20)


def sglang_config(service):
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    return APIServerConfig(server_type="sglang", base_url=f"{service['url']}/v1", api_key=KEY, model_name="embedded",
                           tokenizer_name=str(service["model_dir"]), health_check=False, timeout=60)


def test_tokens_and_logprobs_through_atroposlib_sglang_client(service):
    from atroposlib.envs.server_handling.server_manager import ServerManager

    manager = ServerManager([sglang_config(service)])

    async def run():
        return await manager.tokens_and_logprobs_completion(prompt="4+5=", n=4, max_tokens=6, temperature=1.0,
                                                            top_p=1.0, stop=["\n"])

    prompt_tokens, outputs, logprobs, finish = asyncio.run(run())
    assert prompt_tokens[0] == manager.servers[0].tokenizer.bos_token_id
    assert len(outputs) == len(logprobs) == len(finish) == 4
    for ids, lps, reason in zip(outputs, logprobs, finish):
        assert 1 <= len(ids) <= 6 and len(lps) == len(ids)
        assert all(isinstance(t, int) for t in ids)
        assert all(lp <= 0.0 for lp in lps)
        assert reason["type"] in {"stop", "length"}


def test_managed_server_tracks_tokens_masks_and_logprobs(service):
    from atroposlib.envs.server_handling.server_manager import ServerManager
    from transformers import AutoTokenizer

    manager = ServerManager([sglang_config(service)])
    tokenizer = AutoTokenizer.from_pretrained(service["model_dir"])

    async def run():
        async with manager.managed_server(tokenizer=tokenizer) as managed:
            completion = await managed.completion(prompt="2+3=", n=2, max_tokens=5, temperature=1.0)
            return completion, managed.get_state()

    completion, state = asyncio.run(run())
    assert len(completion.choices) == 2
    nodes = state["nodes"]
    assert len(nodes) == 2
    prompt_len = len(tokenizer.encode("2+3="))
    for node in nodes:
        completion_len = len(node.tokens) - prompt_len
        assert completion_len >= 1
        assert node.masked_tokens[:prompt_len] == [-100] * prompt_len
        assert node.masked_tokens[prompt_len:] == node.tokens[prompt_len:]
        assert all(lp <= 0 for lp in node.logprobs[prompt_len:])


def test_openai_routes_through_atroposlib_client_and_key_is_never_logged(service):
    from atroposlib.envs.server_handling.server_manager import ServerManager

    manager = ServerManager([sglang_config(service)])

    async def run():
        chat = await manager.chat_completion(messages=[{"role": "user", "content": "hi"}], n=2, max_tokens=3)
        plain = await manager.completion(prompt="1+1=", n=3, max_tokens=3)
        return chat, plain

    chat, plain = asyncio.run(run())
    assert len(chat.choices) == 2 and len(plain.choices) == 3
    assert KEY not in service["log"].read_text()
    assert httpx.get(f"{service['url']}/v1/models", timeout=5).status_code == 401
    assert (service["data_dir"] / "ready" / "inference").exists()


def test_an_upstream_style_managed_server_environment_collects_a_group_through_the_stack(service, tmp_path):
    """Atropos' own environments collect through `managed_server`, with APIServerConfig's default server_type
    "openai", which managed_server refuses (NotImplementedError). Prepared as the environment service prepares a
    user's file (user_env.prepare), the file's class collects a group with token ids, masks and the service's
    log-probs."""
    import shutil

    from hermes_stack.environment import user_env
    from hermes_stack.environment.runtime import HermesEnvConfig
    from hermes_stack.environments_catalog import select as choose

    (tmp_path / "environments").mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "user_environments" / "managed_sums.py", tmp_path / "environments")
    info = choose(tmp_path, "managed-sums").environment
    ours = HermesEnvConfig(group_size=4, batch_size=8, max_token_length=16, tokenizer_name=str(service["model_dir"]),
                           rollout_server_url="http://127.0.0.1:9", use_wandb=False, total_steps=3,
                           ensure_scores_are_not_same=True, max_batches_offpolicy=1, wandb_name="managed",
                           data_dir=str(service["data_dir"]))
    cls, config, servers = user_env.prepare(tmp_path, info, ours, sglang_config(service), served_model="embedded")
    assert servers[0].server_type == "sglang"
    env = cls(config, servers, slurm=False, testing=False)

    async def run():
        item = await env.get_next_item()
        return item, await env.collect_trajectories(item)

    item, (group, _) = asyncio.run(run())
    prompt_len = len(env.tokenizer.encode(item["prompt"]))
    assert len(group["tokens"]) == len(group["masks"]) == len(group["inference_logprobs"]) == 4
    for tokens, masks, logprobs in zip(group["tokens"], group["masks"], group["inference_logprobs"]):
        assert len(tokens) > prompt_len and masks[:prompt_len] == [-100] * prompt_len
        assert masks[prompt_len:] == tokens[prompt_len:]
        assert all(lp <= 0 for lp in logprobs[prompt_len:])  # the service's log-probs, not placeholders


@pytest.mark.parametrize("setup_body", ["pass", "self.seeds = open('seeds.json').read()",
                                        "raise TimeoutError('the socket timed out')"])
def test_the_dry_runs_environment_check_runs_setup_and_names_its_failure(service, tmp_path, caplog, setup_body):
    """`up`'s dry-run runs `python -m hermes_stack.environment check` for a user's environment: the class created as
    `serve` creates it and its setup() run. A setup() that fails showed only once training had started."""

    from hermes_stack.environment import user_env
    from hermes_stack.environment.__main__ import check
    from hermes_stack.environment.runtime import HermesEnvConfig
    from hermes_stack.environments_catalog import select as choose

    (tmp_path / "environments").mkdir()
    source = (REPO / "tests" / "fixtures" / "user_environments" / "managed_sums.py").read_text()
    (tmp_path / "environments" / "managed_sums.py").write_text(
        source.replace("    async def setup(self):\n        pass\n", f"    async def setup(self):\n        {setup_body}\n"))
    info = choose(tmp_path, "managed-sums").environment
    ours = HermesEnvConfig(group_size=4, batch_size=8, max_token_length=16, tokenizer_name=str(service["model_dir"]),
                           rollout_server_url="http://127.0.0.1:9", use_wandb=False, total_steps=3,
                           ensure_scores_are_not_same=True, max_batches_offpolicy=1, wandb_name="managed",
                           data_dir=str(tmp_path))
    cls, config, servers = user_env.prepare(tmp_path, info, ours, sglang_config(service), served_model="embedded")
    caplog.set_level("INFO", logger="hermes_stack.environment")
    code = asyncio.run(check(config, servers, cls, info))
    if setup_body == "pass":
        assert code == 0 and "environment check: managed-sums (ManagedSumsEnv, environments/managed_sums.py) " \
                              "imports, config_init() and setup() ran" in caplog.text
    else:
        assert code == 1
        (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        # the setup's own TimeoutError is its failure, not the check's 300 s bound
        kind = "TimeoutError" if "Timeout" in setup_body else "FileNotFoundError"
        assert error.startswith(f"environments/managed_sums.py: ManagedSumsEnv.setup() failed: {kind}: "), error
        assert error.endswith(" at environments/managed_sums.py:30"), error  # the line in setup() that raised

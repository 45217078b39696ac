"""The environment in atroposlib's process mode against a loopback fake inference server (and fake gateway)."""

import asyncio
import json
import logging
import os
import socket
from pathlib import Path

import pytest
from fakes.fake_gateway import FakeGateway
from fakes.fake_inference import LOGPROB, FakeInference
from fakes.stack_files import write_stack
from fakes.tiny_tokenizer import build_tiny_tokenizer

from hermes_stack.config.loader import load_stack
from hermes_stack.environment.__main__ import run_process
from hermes_stack.environment.env import HermesMathEnv
from hermes_stack.environment.runtime import build_configs


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return build_tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def dataset(tmp_path):
    rows = [{"question": f"What is {a}+{b}?", "answer": f"{a}+{b}={a + b}\n#### {a + b}"}
            for a in range(10) for b in range(6)]
    path = tmp_path / "sums.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


@pytest.fixture(autouse=True)
def keep_hf_flags(monkeypatch):
    # build_configs sets HF_*_OFFLINE in os.environ when offline; restore them after each test.
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, os.environ.get(name, "0"))


def offline_environ(tmp_path, **extra):
    return {"HERMES_KEYFILE": str(tmp_path / "no-keyfile"), **extra}


def stack_for(tmp_path, algo="grpo", **kw):
    write_stack(tmp_path / "configs", algo, **kw)
    return load_stack(algo, tmp_path / "configs", "gpu")


def test_configs_map_rollout_and_urls(tmp_path, tokenizer_dir, dataset):
    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=4, batch_size=3,
                      max_token_length=200, num_steps=7)
    environ = offline_environ(tmp_path, HERMES_ATROPOS_URL="http://atropos:8000",
                              HERMES_INFERENCE_URL="http://inference:8001/v1", HERMES_INFERENCE_KEY="k-internal",
                              HERMES_DATA_DIR=str(tmp_path / "data"))
    env_config, server = build_configs(stack, environ)
    assert env_config.group_size == 4
    assert env_config.batch_size == 12 and env_config.prompts_per_batch == 3  # Atropos counts sequences
    assert env_config.max_token_length == 200 and env_config.total_steps == 7
    assert env_config.rollout_server_url == "http://atropos:8000"
    assert env_config.tokenizer_name == str(tokenizer_dir)
    assert env_config.wandb_name and env_config.use_wandb is False
    assert env_config.ensure_scores_are_not_same is True
    # 12 sequences: one chunk's rows, and one more worker for GRPO (runtime.rollout_workers), not atroposlib's 8
    assert env_config.max_num_workers == 2
    assert env_config.offline is True and os.environ["HF_HUB_OFFLINE"] == "1"
    assert server.server_type == "sglang" and server.base_url == "http://inference:8001/v1"
    assert server.api_key == "k-internal" and server.health_check is False


def test_ppo_group_of_one_keeps_equal_scores(tmp_path, tokenizer_dir, dataset):
    stack = stack_for(tmp_path, "ppo", dataset=str(dataset), model_path=str(tokenizer_dir), group_size=1)
    env_config, _ = build_configs(stack, offline_environ(tmp_path))
    assert env_config.group_size == 1 and env_config.ensure_scores_are_not_same is False
    from hermes_stack.environment.runtime import CHUNK_ROWS

    # one rollout worker per chunk of prompts, each sampling its chunk in one request (env.py _collect_chunk)
    assert env_config.max_num_workers == -(-env_config.prompts_per_batch // CHUNK_ROWS)
    # REPLICAS=3: the router gives each request to one replica, so one worker (one chunk) per replica
    urls = "http://inference:8001,http://inference-2:8001,http://inference-3:8001"
    behind_router, _ = build_configs(stack, offline_environ(tmp_path, HERMES_INFERENCE_REPLICA_URLS=urls))
    assert behind_router.max_num_workers == 3


def test_wandb_only_with_key_and_enabled(tmp_path, tokenizer_dir, dataset):
    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir))
    assert build_configs(stack, offline_environ(tmp_path, WANDB_API_KEY="x" * 40))[0].use_wandb is False


def test_a_hub_model_on_the_gpu_profile_is_named_to_the_tokenizer_loader_without_a_key_file(tmp_path, dataset):
    """Hub access follows the profile and the names, not the key file (issue 24, finding 4): it used to be an
    InputError here, while inference and trainer downloaded the same id."""
    stack = stack_for(tmp_path, dataset=str(dataset), model_path="Qwen/Qwen3-8B")
    env_config, _ = build_configs(stack, offline_environ(tmp_path))
    assert env_config.tokenizer_name == "Qwen/Qwen3-8B" and env_config.hub_access and env_config.offline


def test_embedded_profile_uses_a_local_tokenizer(tmp_path, dataset):
    write_stack(tmp_path / "configs", dataset=str(dataset), model_path="Qwen/Qwen3-8B")
    stack = load_stack("grpo", tmp_path / "configs", "embedded")
    env_config, _ = build_configs(stack, offline_environ(tmp_path, HERMES_EMBEDDED_MODEL=str(tmp_path / "absent")))
    assert Path(env_config.tokenizer_name).is_dir()
    assert env_config.dataset == "offline-arith"


def test_rollouts_stream_from_the_built_in_server_only_and_not_behind_the_router(tmp_path, tokenizer_dir, dataset):
    """The built-in server sends each row whole as it ends (inference/builtin.py generate_stream); SGLang's stream
    sends every row's progress too, and the router gets the plain request (runtime.py stream_rollouts)."""
    write_stack(tmp_path / "configs", dataset=str(dataset), model_path="Qwen/Qwen3-8B")
    embedded = load_stack("grpo", tmp_path / "configs", "embedded")
    assert embedded.settings.inference.server == "builtin"
    environ = offline_environ(tmp_path, HERMES_EMBEDDED_MODEL=str(tmp_path / "absent"))
    assert build_configs(embedded, environ)[0].stream_rollouts is True
    urls = "http://inference:8001,http://inference-2:8001"
    assert build_configs(embedded, {**environ, "HERMES_INFERENCE_REPLICA_URLS": urls})[0].stream_rollouts is False
    gpu = stack_for(tmp_path / "gpu", dataset=str(dataset), model_path=str(tokenizer_dir))
    assert gpu.settings.inference.server == "sglang"
    assert build_configs(gpu, offline_environ(tmp_path))[0].stream_rollouts is False


def run(tmp_path, stack, fake, groups=3, gateway_client=None, **kw):
    environ = offline_environ(tmp_path, HERMES_INFERENCE_URL=fake.base_url, HERMES_INFERENCE_KEY=fake.api_key)
    env_config, server = build_configs(stack, environ, offline=kw.pop("offline", True))
    return asyncio.run(run_process(env_config, [server], groups=groups, out=tmp_path / "out.jsonl",
                                   gateway_client=gateway_client))


def test_process_mode_groups_have_tokens_masks_logprobs_and_scores(tmp_path, tokenizer_dir, dataset):
    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=4,
                      max_token_length=200)
    with FakeInference(tokenizer_dir) as fake:
        env = run(tmp_path, stack, fake, groups=3)
    lines = [json.loads(line) for line in Path(env.config.data_path_to_save_groups).read_text().splitlines()]
    assert len(lines) == 3
    for group in lines:
        assert len(group["tokens"]) == len(group["masks"]) == len(group["inference_logprobs"]) == 4
        for tokens, mask, logprobs in zip(group["tokens"], group["masks"], group["inference_logprobs"]):
            assert len(tokens) == len(mask) == len(logprobs) < 200
            prompt_len = mask.index(next(m for m in mask if m != -100))
            assert prompt_len > 0 and all(m == -100 for m in mask[:prompt_len])
            assert mask[prompt_len:] == tokens[prompt_len:]
            assert logprobs[prompt_len:] == [LOGPROB] * (len(tokens) - prompt_len)
        # the fake answers right for even indexes, off by one for odd ones; both well formatted
        assert group["scores"] == pytest.approx([1.1, 0.1, 1.1, 0.1])
        assert group["hermes"]["correct"] == [True, False, True, False]
    assert env.totals.accuracy == pytest.approx(0.5) and env.totals.format_rate == 1.0
    assert env.totals.mean_reward == pytest.approx(0.6)
    assert env.totals.as_dict()["mean_reward"] == 0.6  # the summary file's figure, not 0.6000000000000001
    # sampling settings from [rollout] reached /generate
    params = fake.requests[0]["body"]["sampling_params"]
    assert params["n"] == 4 and params["max_new_tokens"] >= 1
    assert params["temperature"] == stack.config.rollout.temperature == 0.8  # the shipped GRPO value
    assert params["top_p"] == stack.config.rollout.top_p == 0.95


def test_unformatted_completions_are_counted_and_logged(tmp_path, tokenizer_dir, dataset, caplog):
    caplog.set_level(logging.INFO, logger="hermes_stack.environment")
    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=2)
    with FakeInference(tokenizer_dir, policy=lambda prompt, i: "I do not know") as fake:
        env = run(tmp_path, stack, fake, groups=2)
    assert env.totals.format_failures == 4 and env.totals.format_rate == 0.0
    assert any("format failure" in r.getMessage() and "####" in r.getMessage() for r in caplog.records)


def test_equal_score_groups_are_dropped_and_counted_for_grpo(tmp_path, tokenizer_dir, dataset, caplog):
    caplog.set_level(logging.INFO, logger="hermes_stack.environment")
    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=2)
    env_config, server = build_configs(stack, offline_environ(tmp_path), offline=True)
    env = HermesMathEnv(env_config, [server])
    env.max_token_len = 1000
    equal = {"tokens": [[1, 2], [1, 3]], "masks": [[-100, 2], [-100, 3]], "scores": [0.1, 0.1]}
    spread = {"tokens": [[1, 2], [1, 3]], "masks": [[-100, 2], [-100, 3]], "scores": [1.1, 0.1]}
    asyncio.run(env.handle_send_to_api(equal, do_send_to_api=False))
    asyncio.run(env.handle_send_to_api(spread, do_send_to_api=False))
    assert env.totals.dropped_equal_scores == 1
    assert any("equal scores" in r.getMessage() for r in caplog.records)


def _even_first_operand_always_right(prompt: str, index: int) -> str:
    """Every completion right when the first operand is even (a group with equal scores), else the fake's default
    spread (right for even indexes, off by one for odd ones)."""
    import re

    a, b = map(int, re.findall(r"(\d+)\s*\+\s*(\d+)", prompt)[-1])
    return f"#### {a + b}" if a % 2 == 0 else f"#### {a + b + index % 2}"


def _first_group(tmp_path, stack, fake, items=None):
    """One rollout worker's collect_trajectories on the first train item (or on `items`), against `fake`."""
    environ = offline_environ(tmp_path, HERMES_INFERENCE_URL=fake.base_url, HERMES_INFERENCE_KEY=fake.api_key)
    env_config, server = build_configs(stack, environ, offline=True)
    env = HermesMathEnv(env_config, [server])

    async def draw():
        await env.setup()
        if items is not None:
            env.train_items = items
        return await env.collect_trajectories(await env.get_next_item())

    group, backlog = asyncio.run(draw())
    assert backlog == []
    return env, group


def test_grpo_worker_draws_the_next_prompt_until_its_group_has_a_spread(tmp_path, tokenizer_dir, dataset):
    """atroposlib starts one worker per missing group: a worker that handed back an all-equal group made nothing,
    and the batch filled in shrinking rounds. It now draws the next prompt itself and counts what it drops."""
    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=4,
                      max_token_length=200)
    # first operands 0, 2, 4 (every completion right: equal scores), then 5 (a spread)
    items = [{"question": f"What is {a}+1?", "answer": f"#### {a + 1}"} for a in (0, 2, 4, 5)]
    with FakeInference(tokenizer_dir, policy=_even_first_operand_always_right) as fake:
        env, group = _first_group(tmp_path, stack, fake, items)
    assert len(fake.requests) == 4
    assert group["scores"] == pytest.approx([1.1, 0.1, 1.1, 0.1])  # 5+1: the first prompt with a spread
    assert env.totals.dropped_equal_scores == 3 and env.totals.groups == 4
    # Each completion's verdict rides to the trainer in atroposlib's per-sequence overrides (its rollout_accuracy).
    from hermes_stack.tasks.reward import CORRECT_OVERRIDE

    assert [o[CORRECT_OVERRIDE] for o in group["overrides"]] == [True, False, True, False]


@pytest.mark.parametrize("algo,group_size", [("grpo", 2), ("ppo", 1)])
def test_a_worker_gives_up_after_its_last_draw_and_ppo_never_redraws(tmp_path, tokenizer_dir, dataset, algo,
                                                                     group_size):
    from hermes_stack.environment.env import DRAWS_PER_WORKER

    expected_requests = DRAWS_PER_WORKER if algo == "grpo" else 1
    stack = stack_for(tmp_path, algo, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=group_size,
                      max_token_length=200)
    with FakeInference(tokenizer_dir, policy=lambda prompt, i: "#### 0") as fake:  # always wrong: all equal
        env, group = _first_group(tmp_path, stack, fake)
    assert not env._chunked()  # no atroposlib workers (not its serve loop): one group at a time
    assert len(fake.requests) == expected_requests
    assert len(set(group["scores"])) == 1  # handed to atroposlib, which drops it for GRPO (counted there)
    assert env.totals.dropped_equal_scores == expected_requests - 1


def test_readiness_marker_holds_the_pid_and_is_removed_only_by_its_writer(tmp_path):
    """health.write_marker / remove_marker, the one writer of the trainer's, the environment's and inference's
    markers (three copies had drifted: inference removed a marker whoever wrote it)."""
    from hermes_stack.health import check_marker, remove_marker, write_marker

    path = write_marker(tmp_path, "environment", env_id=0)
    assert path == tmp_path / "ready" / "environment"
    assert json.loads(path.read_text()) == {"pid": os.getpid(), "env_id": 0}
    assert check_marker(tmp_path, "environment") == f"environment ready (pid {os.getpid()})"
    assert not list((tmp_path / "ready").glob(".*.tmp"))  # written through a temporary file, renamed
    path.write_text(json.dumps({"pid": os.getpid() + 1}))  # a newer process of the service replaced it
    remove_marker(path)
    assert path.exists()
    write_marker(tmp_path, "environment")
    remove_marker(path)
    assert not path.exists()
    remove_marker(None)
    remove_marker(path)  # gone already: nothing to do


def test_no_code_path_reaches_other_hosts(tmp_path, tokenizer_dir, dataset, monkeypatch):
    """A full process-mode run with the judge on touches only the inference service and the gateway."""
    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=4, judge=True)
    seen_connects, seen_lookups = set(), set()
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(self, address):
        if isinstance(address, tuple):
            seen_connects.add(address[:2])
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kw):
        seen_lookups.add(host)
        return real_getaddrinfo(host, *args, **kw)

    judge_reply = lambda prompt, body: "NO"
    with FakeInference(tokenizer_dir) as fake, FakeGateway(reply=judge_reply) as gateway:
        monkeypatch.setenv("TAOTOKEN_API_KEY", gateway.api_key)
        monkeypatch.setenv("TAOTOKEN_BASE_URL", gateway.root)
        monkeypatch.setenv("TAOTOKEN_MODEL", "fake-gpt")
        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", lambda self, a: (seen_connects.add(a[:2]), 0)[1])
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        env = run(tmp_path, stack, fake, groups=2, offline=False)
        allowed = {("127.0.0.1", fake.port), ("127.0.0.1", gateway.port)}
    assert env.judge is not None and env.judge.stats.calls == 4  # the judge was asked about the wrong half
    assert seen_connects and seen_connects <= allowed, seen_connects - allowed
    assert seen_lookups <= {"127.0.0.1", "localhost"}, seen_lookups
    assert ("127.0.0.1", gateway.port) in seen_connects and ("127.0.0.1", fake.port) in seen_connects


def test_a_group_carries_the_policy_step_served_when_its_generation_began(tmp_path, tokenizer_dir, dataset):
    """The trainer bounds staleness with it (trainer/staleness.py): the step written by the trainer's last push that
    took (weights/served-step), read before the request, so never newer than the policy that generated the group."""
    from hermes_stack.modelcore.weights_layout import write_served_step

    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=4,
                      max_token_length=200)
    data = tmp_path / "data"
    write_served_step(data / "weights", 41)
    seen = []

    def policy(prompt: str, index: int) -> str:
        if index == 0:
            seen.append(prompt)
            write_served_step(data / "weights", 42)  # a push lands while the group is being generated
        return f"#### {index}"

    with FakeInference(tokenizer_dir, policy=policy) as fake:
        environ = offline_environ(tmp_path, HERMES_INFERENCE_URL=fake.base_url, HERMES_INFERENCE_KEY=fake.api_key,
                                  HERMES_DATA_DIR=str(data))
        env_config, server = build_configs(stack, environ, offline=True)
        env = HermesMathEnv(env_config, [server])

        async def draw():
            await env.setup()
            return await env.collect_trajectories(await env.get_next_item())

        group, _ = asyncio.run(draw())
    assert seen and group["generation_params"] == {"policy_step": 41}


@pytest.mark.parametrize("bound,queued", [(0, 1), (1, 1), (3, 3)])
def test_atropos_queue_bound_follows_the_trainers_staleness_bound(tmp_path, tokenizer_dir, dataset, bound, queued):
    import dataclasses

    stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), group_size=4)
    trainer = stack.settings.trainer.model_copy(update={"max_staleness": bound})
    stack = dataclasses.replace(stack, settings=stack.settings.model_copy(update={"trainer": trainer}))
    env_config, _ = build_configs(stack, offline_environ(tmp_path), offline=True)
    assert env_config.max_batches_offpolicy == queued


def test_prompts_that_leave_no_room_to_answer_are_refused_when_the_environment_starts(tmp_path, tokenizer_dir,
                                                                                     dataset, caplog):
    """The environment builds and encodes its whole split before any rollout (gsm8k from the hub included, which
    the trainer's dry-run cannot load): one line naming the config file and the key, exit 2 from `serve`."""
    from hermes_stack.errors import InputError
    from hermes_stack.tasks.prompting import INSTRUCTION

    tokens = len(f"What is 1+2?\n\n{INSTRUCTION}\n") + 1  # one token a character and <s>; every question as long
    for limit, refused in ((tokens + 4, True), (tokens + 5, False)):
        stack = stack_for(tmp_path, dataset=str(dataset), model_path=str(tokenizer_dir), max_token_length=limit)
        env_config, server = build_configs(stack, offline_environ(tmp_path), offline=True)
        env = HermesMathEnv(env_config, [server])
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="hermes_stack.environment"):
            if refused:
                with pytest.raises(InputError) as caught:
                    asyncio.run(env.setup())
                rows = len(env.train_items)
                assert caught.value.lines() == [
                    (f"{stack.config_path}: rollout.max_token_length: found {limit}, which leaves {rows} of {rows} "
                     f"train prompts fewer than 4 new tokens (the longest prompt is {tokens} tokens, its question "
                     f"{env.train_items[0]['question']!r}), expected room for at least 4 new tokens after every "
                     f"prompt. Hint: raise rollout.max_token_length to at least {tokens + 5} (more for a worked "
                     f"answer) or shorten or drop the longest rows of {dataset} (a prompt's tokens include its chat "
                     "template)")]
            else:
                asyncio.run(env.setup())
                assert (f"prompts: {len(env.train_items)} train prompts of {tokens}-{tokens} tokens; "
                        f"rollout.max_token_length {limit} leaves the longest 4 new tokens (at least 4 needed)"
                        ) in caplog.messages


def test_the_trainers_dry_run_counts_the_prompts_the_environment_sends(tmp_path, caplog):
    """Parity: a chat template, a system prompt and one solved example in every prompt. The trainer's dry-run
    (trainer/prompt_check.py) must count what the environment encodes at start, and the held-out prompts the
    trainer then scores (tasks/heldout.py); drift (a forgotten example, another seed) would show here."""
    import re

    from fakes.stack_files import _set
    from transformers import AutoTokenizer

    from hermes_stack.modelcore.embedded import CHAT_TEMPLATE
    from hermes_stack.tasks.heldout import HeldOut
    from hermes_stack.trainer.__main__ import HELD_OUT_ROWS
    from hermes_stack.trainer.prompt_check import check_prompts

    tokenizer_dir = build_tiny_tokenizer(tmp_path / "templated", chat_template=CHAT_TEMPLATE)
    # Questions of many lengths and a few samples: another shuffle or another cut gives other figures.
    dataset = tmp_path / "varied.jsonl"
    dataset.write_text("\n".join(json.dumps({"question": f"What is {i}+1?" + " Please." * (i % 9), "answer": f"#### {i}"})
                                 for i in range(80)))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    assert tokenizer.chat_template
    write_stack(tmp_path / "configs", "grpo", dataset=str(dataset), model_path=str(tokenizer_dir),
                max_token_length=1024, max_samples=5)
    config = tmp_path / "configs" / "config_grpo.toml"
    text = _set(config.read_text(), "environment", "system_prompt", '"Answer as #### N."')
    config.write_text(_set(text, "environment", "fewshot", "1"))
    stack = load_stack("grpo", tmp_path / "configs", "gpu")
    assert stack.config.environment.fewshot == 1

    env_config, server = build_configs(stack, offline_environ(tmp_path), offline=True)
    env = HermesMathEnv(env_config, [server])
    with caplog.at_level(logging.INFO, logger="hermes_stack.environment"):
        asyncio.run(env.setup())
    [environment_line] = [m for m in caplog.messages if m.startswith("prompts: ")]
    trainer_line = check_prompts(stack, tokenizer, HELD_OUT_ROWS)
    train = re.match(r"prompts: (5 train prompts of \d+-\d+ tokens)", environment_line).group(1)
    assert trainer_line.startswith(f"prompts: {train}, "), (environment_line, trainer_line)
    held_out = HeldOut.from_stack(stack, tokenizer, rows=HELD_OUT_ROWS)
    lengths = [len(p) for p in held_out.prompts]
    assert f", {len(lengths)} held-out prompts of {min(lengths)}-{max(lengths)} tokens; " in trainer_line
    # the solved example and the system prompt are in every prompt: each is far longer than a bare question's
    shortest = int(re.search(r"of (\d+)-", train).group(1))
    example = env.examples[0]
    assert shortest > len(example["question"]) + len(example["answer"]) + len("Answer as #### N.")

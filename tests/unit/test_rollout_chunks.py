"""Rollout chunks in the environment (env.py _collect_chunk): a worker samples its share of the batch in one batched
/generate (pooled_http.generate_many, group_size rows a prompt) and returns one group per prompt, laid out as
atroposlib's ManagedServer lays out sequences; the share leaves out what Atropos holds and what other workers
sample; GRPO drops and counts equal-score groups and draws more as fewer are kept. The server is a stub that
records its calls; the wire format of generate_many is covered by test_pooled_http.py, the real serve loop by
test_env_atropos.py and the Docker tier's stacks."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

import pytest

pytest.importorskip("atroposlib")


def test_chunk_prompts_is_an_even_share_of_what_is_still_needed_over_the_share_kept_within_its_bounds():
    from hermes_stack.environment.env import MIN_KEEP_RATE, chunk_prompts

    assert [chunk_prompts(256, w, 1.0, 32) for w in (8, 7, 4, 1)] == [32, 32, 32, 32]
    assert [chunk_prompts(n, 3, 1.0, 32) for n in (64, 10, 1, 0, -5)] == [22, 4, 1, 1, 1]  # never below its own item
    assert chunk_prompts(100, 0, 1.0, 32) == 32  # no idle worker counted: this one
    # GRPO: half the groups kept -> twice the prompts; the floor bounds a share that fell to nothing
    assert [chunk_prompts(16, 2, k, 32) for k in (1.0, 0.5, 0.3)] == [8, 16, 27]
    assert chunk_prompts(4, 1, 0.0, 1000) == chunk_prompts(4, 1, MIN_KEEP_RATE, 1000) == 80
    assert chunk_prompts(32, 2, 0.01, 32) == 32  # within the cap


def test_rollout_workers_one_per_chunk_of_rows_and_one_more_for_grpo():
    from hermes_stack.environment.runtime import CHUNK_ROWS, rollout_workers

    assert CHUNK_ROWS == 512
    # the shipped PPO batch (256 prompts) is one chunk: one worker, one request
    assert (rollout_workers(256, 1), rollout_workers(512, 1), rollout_workers(513, 1), rollout_workers(4, 1)) == (
        1, 1, 2, 1)
    assert (rollout_workers(256, 1, 32), rollout_workers(257, 1, 32)) == (8, 9)
    # the shipped GRPO batch (32 prompts x 8) is one chunk's rows; a second worker samples while it is scored
    assert (rollout_workers(32, 8), rollout_workers(64, 8), rollout_workers(65, 8), rollout_workers(1, 4)) == (
        2, 2, 3, 2)
    # behind the router each chunk (a request) goes to one replica: at least one worker per replica
    assert (rollout_workers(256, 1, replicas=4), rollout_workers(32, 8, replicas=2)) == (4, 3)
    assert rollout_workers(2048, 1, replicas=2) == 4  # the rows' own count when it is larger


class Tokenizer:
    """Characters as token ids; <bos> is 1 (added as add_special_tokens=True does), <eos> is 2 (a special token)."""

    def encode(self, text, add_special_tokens=True):
        return ([1] if add_special_tokens else []) + [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i in (1, 2)))


class Server:
    """generate_many's stub: answers '#### <a+b>' (or a wrong sum for every third prompt) and records each call."""

    def __init__(self):
        self.calls: list[list[dict]] = []

    async def generate_many(self, requests):
        self.calls.append(requests)
        answers = []
        for i, request in enumerate(requests):
            question = "".join(chr(t) for t in request["input_ids"][1:])
            a, b = question.rstrip("=").split("+")
            total = int(a) + int(b) + (1 if i % 3 == 2 else 0)
            output = [ord(c) for c in f"#### {total}"] + [2]
            answers.append((request["input_ids"], output, [-0.5] * (len(output) - 1), {"type": "stop"}))
        return answers


class StreamingServer(Server):
    """The stub streamed: the same answers, as stream_many yields them (in `order`, `per_yield` at a time), each
    yield recorded with how many groups the environment had scored by then; `fail_after` yields, a broken stream."""

    def __init__(self, order=None, per_yield: int = 3, fail_after: int | None = None):
        super().__init__()
        self.order, self.per_yield, self.fail_after = order, per_yield, fail_after
        self.scored_at_yield: list[int] = []
        self.scored = 0  # bumped by the environment's scoring (see streaming_env)

    async def stream_many(self, requests):
        answers = await Server.generate_many(self, requests)
        self.calls.pop()  # recorded as a stream below, not as a plain request
        self.streamed = requests
        order = self.order or list(reversed(range(len(answers))))
        for n, start in enumerate(range(0, len(order), self.per_yield)):
            if self.fail_after is not None and n == self.fail_after:
                from hermes_stack.environment.pooled_http import StreamFailed

                raise StreamFailed("/generate's stream failed: the server went away")
            self.scored_at_yield.append(self.scored)
            yield [(i, answers[i]) for i in order[start:start + self.per_yield]]
            await asyncio.sleep(0)


def make_env(questions: list[str], workers: int, queued: int = 0, batch: int = 64, stream: bool = False):
    from hermes_stack.environment.env import HermesMathEnv, Totals

    env = object.__new__(HermesMathEnv)
    env._encoded = {}  # __init__'s prompt-ids cache
    env.config = SimpleNamespace(ensure_scores_are_not_same=False, group_size=1, prompts_per_batch=batch,
                                 max_batches_offpolicy=1, rollout_source="inference", dataset="offline-arith",
                                 max_token_length=16, temperature=0.7, top_p=0.95, correctness_weight=1.0,
                                 format_weight=0.1, stream_rollouts=stream, system_prompt=None, enable_thinking=False)
    env.totals, env._next = Totals(), 1  # atroposlib drew the first item already
    env._chunks_in_flight = env._prompts_in_flight = 0
    env.judge = None
    env.train_items = [{"question": q, "answer": f"#### {sum(map(int, q.rstrip('=').split('+')))}"}
                       for q in questions]
    env.workers = set(range(workers))
    env.status_dict = {"queue_size": queued}
    env.tokenizer = Tokenizer()
    env.server = SimpleNamespace(servers=[Server()])
    env.policy_step = lambda: 9
    return env


QUESTIONS = [f"{a}+{b}=" for a in range(10, 30) for b in range(1, 5)]  # 80 prompts


def test_a_worker_samples_its_share_in_one_request_and_returns_one_group_per_prompt():
    env = make_env(QUESTIONS, workers=4, batch=64)  # 64 needed over 4 idle workers: 16 each
    groups, backlog = asyncio.run(env.collect_trajectories(env.train_items[0]))
    server = env.server.servers[0]
    assert backlog == [] and len(server.calls) == 1 and len(server.calls[0]) == 16 == len(groups)
    first = server.calls[0][0]
    assert first["input_ids"] == [1] + [ord(c) for c in "10+1="] and first["n"] == 1
    assert (first["temperature"], first["top_p"]) == (0.7, 0.95)
    from hermes_stack.tasks.prompting import new_token_budget

    assert first["max_tokens"] == new_token_budget(16, len(first["input_ids"])) > 0  # the environment's own rule
    assert [g["generation_params"]["policy_step"] for g in groups] == [9] * 16
    assert [len(g["tokens"]) for g in groups] == [1] * 16  # a group of one
    scores = [g["scores"][0] for g in groups]
    assert scores[:3] == pytest.approx([1.1, 1.1, 0.1])  # every third answer is a wrong sum, still formatted
    assert env.totals.sequences == 16 and env.totals.correct == 11
    assert (env._chunks_in_flight, env._prompts_in_flight) == (0, 0)  # released


def test_each_group_is_laid_out_as_managed_server_lays_out_a_fresh_sequence():
    env = make_env(QUESTIONS, workers=64, batch=64)  # one prompt each
    (group,), _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    prompt = [1] + [ord(c) for c in "10+1="]
    output = [ord(c) for c in "#### 11"] + [2]
    assert group["tokens"] == [prompt + output]
    assert group["masks"] == [[-100] * len(prompt) + output]
    # 1.0 on prompt positions; a logprob list one short (the stub's) is padded with 1.0 as ManagedServer pads it
    assert group["inference_logprobs"] == [[1.0] * len(prompt) + [-0.5] * (len(output) - 1) + [1.0]]
    from hermes_stack.tasks.reward import CORRECT_OVERRIDE

    assert group["overrides"] == [{CORRECT_OVERRIDE: True}]  # the verdict rides with it, as on the one-prompt path


def streaming_env(server: StreamingServer, group_size: int = 1, judge=None):
    env = make_env(QUESTIONS, workers=4, batch=64, stream=True)  # 16 prompts for this worker
    env.config.group_size = group_size
    env.server = SimpleNamespace(servers=[server])
    env.judge = judge
    score = env._rule_results

    def counted(item, texts):
        server.scored += 1
        return score(item, texts)

    env._rule_results = counted
    return env


def plain_groups(group_size: int = 1) -> list:
    env = make_env(QUESTIONS, workers=4, batch=64)
    env.config.group_size = group_size
    groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    return groups


@pytest.mark.parametrize("group_size", [1, 4])
def test_a_streamed_chunk_scores_each_group_as_its_last_row_arrives_and_lays_it_out_as_the_plain_one(group_size):
    """Where the inference service streams (the built-in server), the environment scores a group while the chunk's
    other rows still sample (issue 22): groups are scored between the stream's yields, not after the last, and
    the groups returned equal those of the plain request, counted once."""
    rows = 16 * group_size
    server = StreamingServer(order=[i for k in range(0, rows, 2) for i in (k + 1, k)], per_yield=group_size * 2)
    env = streaming_env(server, group_size)
    groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert server.calls == [] and len(server.streamed) == rows  # one streamed request, no plain one
    assert server.scored_at_yield == [2 * n for n in range(8)]  # two groups complete per yield, scored at once
    assert groups == plain_groups(group_size)
    assert env.totals.sequences == rows and env.totals.groups == 16 and env.totals.stream_failures == 0


def test_a_stream_that_fails_midway_is_asked_again_without_streaming_and_nothing_is_counted_twice():
    server = StreamingServer(per_yield=4, fail_after=2)
    env = streaming_env(server)
    with _captured("hermes_stack.environment") as lines:
        groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(server.calls) == 1 and len(server.calls[0]) == 16  # the plain request, after 8 rows had streamed
    assert groups == plain_groups()
    assert (env.totals.sequences, env.totals.groups, env.totals.stream_failures) == (16, 16, 1)
    assert any("streamed rollout chunk failed (StreamFailed" in line and "without streaming" in line for line in lines)


@pytest.mark.parametrize("order, why", [([0, 0] + list(range(2, 16)), "sent row 0 of 16 twice"),
                                        ([-1] + list(range(16)), "sent row -1 of 16 twice or out of range"),
                                        (list(range(15)), "ended with 1 of 16 groups incomplete")])
def test_a_stream_that_repeats_skips_or_invents_a_row_is_asked_again_without_streaming(order, why):
    """A stream whose rows do not add up to the chunk's is not laid out half-scored: it is a failed stream."""
    server = StreamingServer(order=order, per_yield=4)
    env = streaming_env(server)
    with _captured("hermes_stack.environment") as lines:
        groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(server.calls) == 1 and groups == plain_groups() and env.totals.as_dict()["stream_failures"] == 1
    assert any(why in line for line in lines)


def test_with_a_judge_the_chunk_is_not_streamed():
    """The judge's second opinions are gateway calls gathered over the whole chunk: it takes the plain request."""
    server = StreamingServer()
    env = streaming_env(server, judge=SimpleNamespace())
    env._score_all = lambda item, texts: asyncio.sleep(0, [env._score(t, item["answer"]) for t in texts])
    groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(server.calls) == 1 and not hasattr(server, "streamed") and len(groups) == 16


def test_the_share_leaves_out_what_atropos_holds_and_what_other_workers_sample():
    env = make_env(QUESTIONS, workers=4, queued=40, batch=64)  # 24 still needed over 4 idle workers: 6
    groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(groups) == 6
    env = make_env(QUESTIONS, workers=4, queued=0, batch=64)
    env._chunks_in_flight, env._prompts_in_flight = 2, 40  # two workers sample 40 prompts: 24 over 2 idle
    groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(groups) == 12
    env = make_env(QUESTIONS, workers=4, queued=64, batch=64)  # nothing needed: its own item only
    groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(groups) == 1


def test_a_chunks_time_awaiting_generate_is_counted_apart_from_its_own_work(monkeypatch):
    """The batch line splits a chunk's in-flight time: awaiting /generate (the inference service) and the rest (the
    environment's decoding, scoring and layout), so a slow rollout path says which side is slow."""
    import hermes_stack.environment.env as env_module

    now = [100.0]
    monkeypatch.setattr(env_module, "time", SimpleNamespace(monotonic=lambda: now[0]))  # env.py's clock only
    env = make_env(QUESTIONS, workers=4, batch=64)
    server = env.server.servers[0]
    answer, score = server.generate_many, env._rule_results

    async def slow(requests):
        now[0] += 0.25  # the server's time, on the environment's clock
        return await answer(requests)

    def slow_scoring(item, texts):
        now[0] += 0.01  # the environment's own work: not awaiting /generate
        return score(item, texts)

    server.generate_many, env._rule_results = slow, slow_scoring
    asyncio.run(env.collect_trajectories(env.train_items[0]))
    asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert now[0] > 100.5  # the scoring's time passed too
    assert env.totals.generate_s == pytest.approx(0.5)
    env.totals.recent = [1.0]
    with _captured("hermes_stack.environment") as lines:
        env._log_batch()
    assert "chunks awaiting /generate 0.50 s)" in lines[-1]


def test_a_chunk_cancelled_while_it_samples_is_counted_and_releases_its_share():
    """atroposlib cancels its workers when its queue reaches the bound: the chunk's prompts and its sampling are lost,
    which the batch line counts (a part of the rollout rate's gap)."""
    env = make_env(QUESTIONS, workers=4, batch=64)  # 16 prompts for this worker
    started = asyncio.Event()

    async def never(requests):
        started.set()
        await asyncio.sleep(3600)

    env.server.servers[0].generate_many = never

    async def cancel_one():
        worker = asyncio.create_task(env.collect_trajectories(env.train_items[0]))
        await started.wait()
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker

    asyncio.run(cancel_one())
    assert (env.totals.cancelled_chunks, env.totals.cancelled_prompts) == (1, 16)
    assert env.totals.generate_s > 0  # its time awaiting /generate counts, though its sequences never came
    assert (env._chunks_in_flight, env._prompts_in_flight, env.totals.clock.inflight) == (0, 0, 0)
    groups, _ = asyncio.run(make_env(QUESTIONS, workers=4, batch=64).collect_trajectories(env.train_items[0]))
    assert len(groups) == 16  # a chunk that finishes is not counted
    env.totals.recent = [1.0]
    with _captured("hermes_stack.environment") as lines:
        env._log_batch()
    assert "chunks cancelled 1 (16 prompts)" in lines[-1]


@contextlib.contextmanager
def _captured(name: str):
    import logging

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_no_chunks_for_gateway_rollouts_process_mode_or_a_server_without_batches():
    env = make_env(QUESTIONS, workers=4)
    assert env._chunked()
    env.config.rollout_source = "gateway"  # a paid service: one call per prompt, as asked
    assert not env._chunked()
    env.config.rollout_source, env.process_mode = "inference", True
    assert not env._chunked()
    env.process_mode, env.config.group_size = False, 4
    assert env._chunked()  # GRPO too
    env.server = SimpleNamespace(servers=[object()])  # a server without generate_many
    assert not env._chunked()


def test_a_prompt_is_tokenised_once_and_callers_get_their_own_copy():
    env = make_env(QUESTIONS, workers=1)
    calls = []
    encode = env.tokenizer.encode
    env.tokenizer.encode = lambda text, add_special_tokens=True: calls.append(text) or encode(text, add_special_tokens)
    first = env._prompt_ids("12+3=")
    first.append(99)  # a caller's edit stays its own
    assert env._prompt_ids("12+3=") == encode("12+3=") and calls == ["12+3="]
    env._prompt_ids("12+4=")
    assert calls == ["12+3=", "12+4="]


def grpo_env(questions: list[str], workers: int, group_size: int = 2, batch: int = 12):
    env = make_env(questions, workers, batch=batch)
    env.config.group_size, env.config.ensure_scores_are_not_same = group_size, True
    env._keep_rate = 1.0
    return env


def test_a_grpo_chunk_asks_each_prompt_group_size_times_and_drops_the_groups_that_score_alike():
    # The stub answers every third row of a request wrong: with 2 rows a prompt, prompts 0 and 3 of 6 get two right
    # answers (equal scores: dropped), the others one right and one wrong.
    env = grpo_env(QUESTIONS, workers=2)  # 12 groups needed over 2 idle workers, all kept so far: 6 prompts
    groups, backlog = asyncio.run(env.collect_trajectories(env.train_items[0]))
    (call,) = env.server.servers[0].calls
    assert backlog == [] and len(call) == 12 and [r["n"] for r in call] == [1] * 12
    assert [r["input_ids"] for r in call[:2]] == [[1] + [ord(c) for c in "10+1="]] * 2  # one prompt, twice
    assert len(groups) == 4 and env.totals.dropped_equal_scores == 2
    for group in groups:
        assert len(group["tokens"]) == len(group["masks"]) == len(group["inference_logprobs"]) == 2
        assert sorted(group["scores"]) == pytest.approx([0.1, 1.1])
        assert group["generation_params"] == {"policy_step": 9}
    assert env.totals.sequences == 12  # the dropped groups were generated and scored too
    assert env._keep_rate == pytest.approx(0.5 * 1.0 + 0.5 * 4 / 6)


def test_a_grpo_chunk_draws_more_prompts_as_fewer_groups_are_kept():
    env = grpo_env(QUESTIONS, workers=2)
    env._keep_rate = 0.25  # 6 groups a worker's share, a quarter kept: 24 prompts
    asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(env.server.servers[0].calls[0]) == 24 * 2
    env = grpo_env(QUESTIONS, workers=2)
    env._chunks_in_flight, env._prompts_in_flight = 1, 8  # the other worker samples 8 prompts, of which 4 will stay
    env._keep_rate = 0.5
    asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(env.server.servers[0].calls[0]) == 16 * 2  # (12 - 4) groups over 1 idle worker at half kept


def test_a_grpo_chunk_of_groups_that_all_score_alike_returns_nothing_and_lowers_the_share_kept():
    env = grpo_env(QUESTIONS, workers=1, group_size=1, batch=4)
    env.config.ensure_scores_are_not_same = True  # a group of one always scores alike
    groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert groups is None and env.totals.dropped_equal_scores == 4
    assert env._keep_rate == pytest.approx(0.5 + 0.5 * 0.05)  # the floor, not zero: the next draw stays bounded


def test_the_judges_second_opinions_for_a_chunk_run_at_once_not_one_item_after_another():
    env = make_env(QUESTIONS, workers=1, batch=12)  # 12 prompts, every third answer a wrong sum: 4 for the judge
    seen = {"now": 0, "most": 0, "calls": 0}

    class Judge:
        async def agrade(self, question, reference, text):
            seen["now"] += 1
            seen["calls"] += 1
            seen["most"] = max(seen["most"], seen["now"])
            await asyncio.sleep(0)  # a gateway call: the other items' calls start meanwhile
            seen["now"] -= 1
            return False  # the rule's verdict stands

    env.judge = Judge()
    groups, _ = asyncio.run(env.collect_trajectories(env.train_items[0]))
    assert len(groups) == 12 and seen["calls"] == 4
    assert seen["most"] == 4  # all four in flight together
    assert [g["scores"][0] for g in groups].count(pytest.approx(0.1)) == 4  # still wrong, judged so


def test_a_chunks_texts_are_what_the_tokenizers_own_decode_gives_whichever_way_they_are_decoded(tmp_path):
    """decode_all: the Rust core's one call per chunk where transformers' decode is only that call; its own decode
    row by row where the tokenizer cleans up spaces or is not a transformers fast tokenizer. Either way each text is
    tokenizer.decode(ids, skip_special_tokens=True): specials dropped, spaces kept."""
    from transformers import AutoTokenizer

    from hermes_stack.environment import env as env_module
    from tests.fakes.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_tokenizer(tmp_path / "tok")))
    outputs = [tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
               for text in ("#### 12", "a , b .", " 7 ", "")]
    expected = [tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs]
    assert expected == ["#### 12", "a , b .", " 7 ", ""]
    calls = []
    own = tokenizer.decode
    tokenizer.decode = lambda ids, **kw: calls.append(ids) or own(ids, **kw)  # counts the row-by-row path
    tokenizer.clean_up_tokenization_spaces = False
    assert env_module.decode_all(tokenizer, outputs) == expected and calls == []  # one call to the core
    tokenizer.clean_up_tokenization_spaces = True  # transformers would also clean up: its own decode, per row
    assert env_module.decode_all(tokenizer, outputs) == [own(ids, skip_special_tokens=True) for ids in outputs]
    assert calls == outputs
    assert env_module.decode_all(Tokenizer(), [[ord("7"), 2]]) == ["7"]  # a plain tokenizer: its decode


def test_a_request_body_is_json_that_json_itself_would_read_back():
    """The body of /generate (service_json.json_bytes): orjson's bytes, and json's where orjson refuses (a 65-bit
    integer) or would write NaN and inf as null."""
    import json

    from hermes_stack.service_json import json_bytes as json_body

    request = {"input_ids": [[1, 5, 9]], "sampling_params": [{"temperature": 0.7, "top_p": 0.95, "n": 1}]}
    assert json.loads(json_body(request)) == request
    assert json.loads(json_body({"n": 2**70})) == {"n": 2**70}
    assert json_body({"t": float("nan")}) == b'{"t": NaN}'
    assert json.loads(json_body({"t": None, "n": 1})) == {"t": None, "n": 1}

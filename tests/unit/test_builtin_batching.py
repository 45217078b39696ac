"""The built-in server samples requests that arrive close together as one batch (inference/model_host.py GATHER_S):
the environment sends one request per group, and sampled one by one the tiny model paid its per-pass overhead once
per group (issue 22)."""

from __future__ import annotations

import asyncio

import pytest

from hermes_stack.inference.builtin import BuiltinBackend
from hermes_stack.modelcore import embedded


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gather") / "embedded"
    embedded.build(directory, seed=0, steps=30)
    return directory


def sampled_batches(model_dir, gather_s: float) -> tuple[list[int], list]:
    """Three /generate requests of 4 rows, the second and third 50 ms after the first: rows per sampling call."""
    backend = BuiltinBackend(str(model_dir), seed=0)
    backend.host.gather_s = gather_s
    sizes: list[int] = []
    original = backend.host._sample

    def counting(rows, adapter, on_done=None):
        sizes.append(len(rows))
        return original(rows, adapter, on_done)

    backend.host._sample = counting
    body = {"input_ids": backend.tokenizer.encode("12+3="), "return_logprob": True,
            "sampling_params": {"max_new_tokens": 4, "temperature": 0.8, "n": 4}}

    async def run():
        await backend.start()
        try:
            first = asyncio.create_task(backend.generate(dict(body)))
            await asyncio.sleep(0.05)
            rest = [asyncio.create_task(backend.generate(dict(body))) for _ in range(2)]
            return await asyncio.gather(first, *rest)
        finally:
            await backend.stop()

    return sizes, asyncio.run(run())


def test_requests_arriving_within_the_gather_window_are_sampled_together(model_dir):
    sizes, answers = sampled_batches(model_dir, gather_s=2.0)
    assert sizes == [12]
    assert all(len(a) == 4 and all(len(x["meta_info"]["output_token_logprobs"]) >= 1 for x in a) for a in answers)


def test_without_a_window_a_request_arriving_later_is_its_own_batch(model_dir):
    sizes, _ = sampled_batches(model_dir, gather_s=0.0)
    assert sizes[0] == 4 and sum(sizes) == 12


def test_the_batch_line_reports_rows_per_batch_and_the_rate_while_sampling():
    from hermes_stack.inference.model_host import BatchLog

    log = BatchLog(every_s=10.0)
    assert log.add(8, 0.5, now=100.0) is None
    assert log.add(24, 0.5, now=105.0) is None
    line = log.add(16, 1.0, now=110.5)
    assert line == ("sampled 3 batches in 11 s: 16.0 rows a batch (largest 24), 24 sequences/s while sampling, "
                    "busy 18%")
    assert log.add(4, 0.1, now=111.0) is None and log.batches == 1 and log.largest == 4  # counts start again


def test_the_sampler_logs_its_batches(model_dir, caplog):
    import logging

    backend = BuiltinBackend(str(model_dir), seed=0)
    backend.host.batch_log.every_s = 0.0
    body = {"input_ids": backend.tokenizer.encode("12+3="), "sampling_params": {"max_new_tokens": 4, "n": 3}}

    async def run():
        await backend.start()
        try:
            await backend.generate(body)
        finally:
            await backend.stop()

    with caplog.at_level(logging.INFO, logger="hermes.inference"):
        asyncio.run(run())
    assert any(r.getMessage().startswith("sampled 1 batches in 0 s: 3.0 rows a batch (largest 3)")
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_a_list_of_sampling_params_is_parsed_per_prompt_and_a_bad_entry_refused(model_dir):
    """SGLang's list form: one sampling_params per prompt. A chunk repeats a few dicts for many prompts (parsed once
    each, builtin._parse_each); every prompt still gets its own, and one bad entry refuses the request."""
    from hermes_stack.inference.sampling import RequestError

    backend = BuiltinBackend(str(model_dir), seed=0)
    ids = backend.tokenizer.encode("12+3=")
    params = [{"max_new_tokens": n, "temperature": 0.8, "ignore_eos": True} for n in (1, 3, 1, 2)]

    async def run(sampling_params):
        await backend.start()
        try:
            return await backend.generate({"input_ids": [ids] * len(sampling_params),
                                           "sampling_params": sampling_params, "return_logprob": True})
        finally:
            await backend.stop()

    answers = asyncio.run(run(params))
    assert [a["meta_info"]["completion_tokens"] for a in answers] == [1, 3, 1, 2]
    with pytest.raises(RequestError, match="max_new_tokens"):
        asyncio.run(run([*params[:2], {"max_new_tokens": -1}]))


def test_sampling_params_share_a_parse_only_when_their_json_is_the_same():
    """_parse_each's key (service_json.json_bytes, keys sorted): key order does not matter; 1, 1.0, true, null, NaN,
    inf and an integer beyond 64 bits each keep their own parse (a NaN that shared null's would skip the refusal parse
    gives it)."""
    from hermes_stack.service_json import json_bytes

    def _params_key(raw):
        return json_bytes(raw, sort_keys=True)

    assert _params_key({"n": 1, "top_p": 0.9}) == _params_key({"top_p": 0.9, "n": 1})
    values = [1, 1.0, True, None, float("nan"), float("inf"), 2**70, "1", [1]]
    keys = [_params_key({"n": v}) for v in values]
    assert len(set(keys)) == len(values), keys


def test_a_non_finite_log_prob_is_a_server_error_not_a_null():
    """json.dumps refused NaN (a 500); orjson, which renders /generate now, would write null: the answer builder
    refuses it with a message instead."""
    from hermes_stack.inference.backend import BackendReply, Generated
    from hermes_stack.inference.openai_shapes import generate_response

    good = {"prompt_ids": (1, 2), "output_ids": (3, 4), "logprobs": (-0.5, -1.0), "text": "34",
            "finish_reason": {"type": "stop"}}
    assert generate_response([Generated(**good)], True, False, None, 0)[0]["meta_info"]["output_token_logprobs"] == [
        [-0.5, 3, None], [-1.0, 4, None]]
    for bad in (float("nan"), float("-inf")):
        with pytest.raises(BackendReply, match="500"):
            generate_response([Generated(**{**good, "logprobs": (-0.5, bad)})], True, False, None, 0)


def test_each_generate_answer_has_its_own_request_id_in_sglangs_shape():
    """meta_info.id stands for SGLang's request id (a uuid4's 32 hex digits): one per row, never repeated, also not
    by the next answer."""
    from hermes_stack.inference.backend import Generated
    from hermes_stack.inference.openai_shapes import generate_response

    row = Generated(prompt_ids=(1,), output_ids=(3,), logprobs=(-0.5,), text="3", finish_reason={"type": "stop"})
    ids = [a["meta_info"]["id"] for _ in range(2) for a in generate_response([row] * 3, False, False, None, 0)]
    assert len(set(ids)) == 6
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)

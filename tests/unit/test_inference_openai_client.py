"""The official `openai` client against the builtin inference service, as an environment or an agent uses it:
streaming chat and completions (server-sent events), top_logprobs, and the requests SGLang refuses (n=0,
max_tokens <= 0 or above the context, a `base:adapter` model whose adapter is not loaded). An unknown plain model
name is answered, as SGLang answers it, and the answer repeats the name."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest.importorskip("torch")

import openai  # a dev dependency (pyproject.toml)
from fastapi.testclient import TestClient

from hermes_stack.inference.builtin import BuiltinBackend
from hermes_stack.inference.server import create_app
from tests.fakes.fixture_model import build_fixture_model

KEY = "test-internal-key"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model") / "fixture-model"
    build_fixture_model(directory, seed=0)
    backend = BuiltinBackend(str(directory), served_model="tiny", seed=0)
    with TestClient(create_app(backend, KEY)) as http:
        # The TestClient is an httpx.Client: the openai client sends its real requests through it.
        yield openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=http, max_retries=0)


def test_chat_streams_server_sent_events_that_add_up_to_the_answer(client):
    stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=6, temperature=0.0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish in (["length"], ["stop"])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    same = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                          temperature=0.0)
    assert text == same.choices[0].message.content  # greedy: the stream says what the plain answer says


def test_completions_stream_and_n(client):
    chunks = list(client.completions.create(model="tiny", prompt="1+2=", max_tokens=4, n=2, stream=True))
    indexes = {c.choices[0].index for c in chunks}
    assert indexes == {0, 1}
    assert all(c.object == "text_completion" for c in chunks)
    assert sum(1 for c in chunks if c.choices[0].finish_reason) == 2


def test_chat_top_logprobs_are_the_most_likely_tokens_and_include_the_sampled_one_when_greedy(client):
    answer = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=4, temperature=0.0, logprobs=True, top_logprobs=5)
    content = answer.choices[0].logprobs.content
    assert content
    for position in content:
        top = position.top_logprobs
        assert len(top) == 5
        values = [t.logprob for t in top]
        assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        assert math.isclose(top[0].logprob, position.logprob, abs_tol=1e-5)  # greedy picks the most likely
        assert sum(math.exp(v) for v in values) <= 1.0 + 1e-5


def test_completions_integer_logprobs_gives_top_logprobs(client):
    answer = client.completions.create(model="tiny", prompt="1+2=", max_tokens=3, temperature=0.0, logprobs=3)
    top = answer.choices[0].logprobs.top_logprobs
    assert top and all(len(position) == 3 for position in top)


@pytest.mark.parametrize("kwargs, says", [
    ({"n": 0}, "sampling_params.n: found 0"),
    ({"max_tokens": 0}, "max_tokens must be positive"),
    ({"max_tokens": 10**7}, "max_completion_tokens is too large"),
    ({"model": "tiny:no-such-adapter"}, "LoRA adapter 'no-such-adapter'"),
])
def test_refused_as_sglang_refuses(client, kwargs, says):
    request = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **kwargs}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**request)
    assert err.value.status_code == 400 and says in str(err.value)
    with pytest.raises(openai.BadRequestError):  # a streaming request is refused before any event
        list(client.chat.completions.create(**request, stream=True))


def test_an_unknown_plain_model_name_is_answered_and_echoed(client):
    answer = client.completions.create(model="someone-elses-model", prompt="1+2=", max_tokens=2)
    assert answer.model == "someone-elses-model" and len(answer.choices) == 1

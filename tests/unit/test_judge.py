"""The judge through the fake gateway: both shapes, verdict parsing, and failures that fall back, never stall."""

import asyncio

import pytest
from fakes.fake_gateway import FakeGateway

from hermes_stack.environment.judge import Judge, parse_verdict
from hermes_stack.gateway import GatewayClient, GatewaySettings


def equal_judge(prompt: str, body: dict) -> str:
    # A judge that compares the reference with the response's last token, like a (very) literal grader.
    reference = prompt.split("Reference final answer:")[1].split("\n")[0].strip()
    response = prompt.split("Student's response:")[1].split("Is the student")[0]
    return "YES" if reference in response else "NO"


@pytest.fixture
def fake():
    with FakeGateway(reply=equal_judge) as server:
        yield server


def make(fake, model="fake-gpt", key=None, style="openai", retries=0, failures=5):
    settings = GatewaySettings(root=fake.root, api_key=key or fake.api_key, model=model, timeout_s=5, retries=retries)
    return Judge(GatewayClient(settings), style=style, max_consecutive_failures=failures)


@pytest.mark.parametrize("text,verdict", [("YES", True), ("no.", False), ("**Yes**", True), ("maybe", None), ("", None)])
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) is verdict


@pytest.mark.parametrize("model,style,path", [("fake-gpt", "openai", "/v1/chat/completions"),
                                              ("claude-fake", "anthropic", "/v1/messages")])
def test_judge_both_shapes(fake, model, style, path):
    judge = make(fake, model=model, style=style)
    assert judge.grade("2 apples and 3 apples?", "5", "I count five, i.e. 5 apples") is True
    assert judge.grade("2 apples and 3 apples?", "5", "I count six") is False
    assert fake.requests[-1]["path"] == path
    assert fake.requests[-1]["body"]["model"] == model
    assert judge.stats.calls == 2 and judge.stats.failures == 0 and judge.stats.overturned == 1


def test_wrong_key_falls_back_is_counted_and_switches_off(fake, caplog):
    judge = make(fake, key="sk-wrong-wrong-wrong-1234", failures=2)
    assert judge.grade("q", "5", "5") is None
    assert "TAOTOKEN_API_KEY" in judge.stats.last_error
    assert judge.grade("q", "5", "5") is None
    assert judge.stats.failures == 2 and judge.stats.disabled
    requests_before = len(fake.requests)
    assert judge.grade("q", "5", "5") is None
    assert len(fake.requests) == requests_before  # switched off: no more calls
    assert any("switched off" in r.message for r in caplog.records)


def test_doubled_v1_failure_names_the_base_url(fake):
    settings = GatewaySettings(root=fake.root + "/v1", api_key=fake.api_key, model="fake-gpt", timeout_s=5, retries=0)
    judge = Judge(GatewayClient(settings), style="openai")
    assert judge.grade("q", "5", "5") is None
    assert "doubled /v1" in judge.stats.last_error


def test_unparseable_reply_is_a_failure(fake):
    fake.reply = lambda prompt, body: "I think so"
    judge = make(fake)
    assert judge.grade("q", "5", "5") is None
    assert judge.stats.failures == 1


def test_async_grade_has_a_deadline(fake, monkeypatch):
    import threading

    release = threading.Event()
    fake.reply = lambda prompt, body: (release.wait(1.5), "YES")[1]
    settings = GatewaySettings(root=fake.root, api_key=fake.api_key, model="fake-gpt", timeout_s=1, retries=0)
    judge = Judge(GatewayClient(settings), style="openai")
    monkeypatch.setattr(Judge, "deadline_s", property(lambda self: 0.3))
    try:
        assert asyncio.run(judge.agrade("q", "5", "5")) is None
    finally:
        release.set()
    assert judge.stats.failures == 1 and "within" in judge.stats.last_error

"""Direction of learning in the Tinker engine, through the real tinker SDK against tests/fakes/fake_tinker.py.

Tinker computes the policy's update remotely from what one step sends: per datum the target tokens, the behaviour
log-probs and per-token advantages, under the "ppo" loss -min(ratio * A, clip(ratio) * A). So the direction of
learning is decided by the signs of those advantages (a token with A > 0 is pushed up), and these tests read them
off the wire: scores, the KL to the local reference, the entropy bonus and the critic's regression each have to push
the right way. The local critic and reference run on the tiny fixture model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
tinker = pytest.importorskip("tinker")
torch = pytest.importorskip("torch")
from fakes.fake_tinker import API, FakeTinker
from fakes.guards import bounded
from trainer_helpers import grpo_params as grpo
from trainer_helpers import ppo_params as ppo

from hermes_stack.config.models import AlgorithmSection
from hermes_stack.trainer import algorithms as alg
from hermes_stack.trainer.engine import Sequence
from hermes_stack.trainer.engine_tinker import LocalCritic, TinkerEngine, token_arrays


@pytest.fixture(autouse=True)
def clean_tinker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TINKER_BASE_URL", "TINKER_API_KEY", "TINKER_CREDENTIAL_CMD", "TINKER_PROJECT_ID", "TINKER_TAGS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from tests.fakes.fixture_model import build_fixture_model

    return build_fixture_model(tmp_path_factory.mktemp("tinker-direction") / "model")


@pytest.fixture
def fake() -> Iterator[FakeTinker]:
    with FakeTinker() as server:
        yield server
    assert server.errors == [], server.errors[0]
    assert server.unknown == []


@pytest.fixture
def engines() -> Iterator[list[TinkerEngine]]:
    made: list[TinkerEngine] = []
    yield made
    for engine in made:
        engine.close()


def step(fake: FakeTinker, engines: list, algo: AlgorithmSection, groups, critic: LocalCritic | None = None):
    """One train_step through the SDK; returns, per sequence in order, the (advantages, logprobs, targets) sent."""
    engine = bounded(lambda: TinkerEngine(base_model="tiny", algo=algo, lora_rank=8, learning_rate=1e-4,
                                          api_key=fake.api_key, base_url=fake.base_url, probe_timeout_s=2.0,
                                          critic=critic))
    engines.append(engine)
    bounded(lambda: engine.train_step(groups))
    (request,) = fake.bodies(f"{API}/forward_backward")
    return [({k: v["values"] for k, v in d["loss_fn_inputs"].items()}) for d in request["data"]]


def seq(tokens: list[int], prompt_len: int, score: float, logprobs: list[float]) -> Sequence:
    """`logprobs`: the behaviour log-probs of the completion tokens (the prompt's are ignored)."""
    return Sequence(tokens=tokens, mask=[-100] * prompt_len + tokens[prompt_len:], score=score,
                    logprobs=[0.0] * prompt_len + logprobs)


def completion(sent: dict, prompt_len: int) -> list[float]:
    return sent["advantages"][prompt_len - 1:]


# ------------------------------------------------------------------ the score's direction


def test_grpo_pushes_the_better_completion_up_and_the_worse_down(fake, engines):
    behaviour = [[-0.25, -1.5], [-0.75, -2.0], [-0.5, -0.5], [-1.0, -0.125]]
    groups = [[seq([1, 5, 6, 7], 2, 1.0, behaviour[0]), seq([1, 5, 8, 9], 2, 0.0, behaviour[1])],
              [seq([1, 4, 6, 2], 2, 0.2, behaviour[2]), seq([1, 4, 7, 3], 2, 0.9, behaviour[3])]]
    sent = step(fake, engines, grpo(), groups)
    flat = [s for g in groups for s in g]
    for s, wire, lps in zip(flat, sent, behaviour):
        assert wire["target_tokens"] == s.tokens[1:]
        assert wire["advantages"][0] == 0.0  # the position predicting the prompt's second token: no gradient
        # the ratio's denominator is what the inference service sent, untouched
        assert wire["logprobs"][1:] == pytest.approx(lps)
    assert all(a > 0 for a in completion(sent[0], 2)) and all(a < 0 for a in completion(sent[1], 2))
    assert all(a < 0 for a in completion(sent[2], 2)) and all(a > 0 for a in completion(sent[3], 2))


def test_ppo_pushes_a_rewarded_completion_up_and_an_unrewarded_one_down(fake, engines, model_dir):
    critic = LocalCritic(str(model_dir), learning_rate=1e-3)
    groups = [[seq([1, 5, 6, 7, 8], 2, 1.0, [-0.5, -0.5, -0.5])], [seq([1, 9, 10, 11], 2, 0.0, [-0.5, -0.5])],
              [seq([1, 4, 6, 7], 2, 1.0, [-0.5, -0.5])], [seq([1, 8, 5, 4, 3], 2, 0.0, [-0.5, -0.5, -0.5])]]
    sent = step(fake, engines, ppo(), groups, critic)
    for (s,), wire in zip(groups, sent):
        assert wire["advantages"][0] == 0.0
        adv = completion(wire, 2)
        assert all(a > 0 for a in adv) if s.score > 0 else all(a < 0 for a in adv), (s.score, adv)


def test_ppo_critic_values_move_toward_the_returns(fake, engines, model_dir):
    critic = LocalCritic(str(model_dir), learning_rate=1e-3)
    groups = [[seq([1, 5, 6, 7, 8], 2, 1.0, [-0.5, -0.5, -0.5])], [seq([1, 9, 10, 11], 2, 0.25, [-0.5, -0.5])]]
    arrays = [token_arrays(s) for (s,) in groups]
    _, hidden = critic.reference_and_hidden(arrays)
    width = hidden.shape[1]
    mask = torch.zeros((len(arrays), width))
    for i, a in enumerate(arrays):
        mask[i, : len(a.trained)] = torch.tensor(a.trained)
    with torch.no_grad():
        values = critic.values(hidden)
    rewards = alg.terminal_rewards(torch.tensor([1.0, 0.25]), mask)
    _, returns = alg.gae(rewards, values, mask, 1.0, 0.95)

    def error() -> float:
        with torch.no_grad():
            return float(alg.masked_mean((critic.values(hidden) - returns) ** 2, mask))

    before = error()
    step(fake, engines, ppo(), groups, critic)
    assert error() < before


# ------------------------------------------------------------------ regularisers


@pytest.mark.parametrize("penalty", ["k3_loss", "k1_reward"])
@pytest.mark.parametrize("make", [grpo, ppo], ids=["grpo", "ppo"])
def test_kl_pushes_every_token_back_toward_the_reference(fake, engines, model_dir, make, penalty):
    """Equal scores (no advantage from them), kl_coef > 0: a completion the policy made more likely than the reference
    is pushed down, one it made less likely is pushed up, so the KL to the reference goes down."""
    algo = make(kl_coef=0.5, kl_penalty=penalty)
    critic = LocalCritic(str(model_dir), learning_rate=1e-3, with_value_head=algo.uses_critic)
    tokens = [[1, 5, 6, 7, 8], [1, 5, 9, 10, 11]]
    refs, _ = critic.reference_and_hidden([token_arrays(seq(t, 2, 0.0, [0.0] * 3)) for t in tokens])
    above = seq(tokens[0], 2, 0.5, [r + 0.5 for r in refs[0][1:]])  # the policy above the reference
    below = seq(tokens[1], 2, 0.5, [r - 0.5 for r in refs[1][1:]])
    groups = [[above, below]] if not algo.uses_critic else [[above], [below]]
    if algo.uses_critic:
        torch.nn.init.constant_(critic.head.net[-1].bias, 0.5)  # the critic predicts the score: GAE leaves the KL
    sent = step(fake, engines, algo, groups, critic)
    up, down = completion(sent[1], 2), completion(sent[0], 2)
    if algo.uses_critic:
        # PPO whitens its advantages (mean removed), so the two sequences' KL terms show as an ordering.
        assert min(up) > max(down)
    else:
        assert all(a > 0 for a in up) and all(a < 0 for a in down), (up, down)


def test_entropy_bonus_pushes_rare_tokens_up_more_than_likely_ones(fake, engines):
    groups = [[seq([1, 5, 6], 2, 0.5, [-3.0]), seq([1, 5, 7], 2, 0.5, [-0.1])]]
    sent = step(fake, engines, grpo(entropy_coef=0.1), groups)
    rare, likely = completion(sent[0], 2), completion(sent[1], 2)
    assert rare[0] > likely[0] > 0

"""Thinking chat templates (issue 24, finding 6): the Qwen3 family's template reads `enable_thinking`, and with it
unset the model thinks. The prompt passes `[environment] enable_thinking` (default false); validate wants room to
think when it is true. The tokenizer is a local fixture (the embedded character tokenizer with a template that
reads the switch as Qwen3's does); no hub."""

from __future__ import annotations

import json

import pytest

from hermes_stack.config import rules
from hermes_stack.tasks.heldout import HeldOut
from hermes_stack.tasks.prompting import prompt_text
from tests.unit.test_config_rules import inputs

# The part of Qwen3-8B's chat template that matters here (its generation prompt): an empty think block, i.e. "no
# thinking", only when enable_thinking is defined and false.
THINKING_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}"
    "{%- endif %}"
)
NO_THINK = "<think>\n\n</think>"


@pytest.fixture
def tokenizer():
    from hermes_stack.modelcore.embedded import build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = THINKING_TEMPLATE
    return tok


def test_the_prompt_turns_thinking_off_unless_asked(tokenizer):
    off = prompt_text(tokenizer, "What is 2 + 3?")
    assert off.endswith("<|im_start|>assistant" + NO_THINK)
    on = prompt_text(tokenizer, "What is 2 + 3?", thinking=True)
    assert NO_THINK not in on and on.endswith("<|im_start|>assistant")


def test_the_held_out_prompts_follow_the_same_switch(tokenizer):
    rows = [{"question": "1 + 1", "answer": "#### 2"}]
    off = HeldOut.build(tokenizer, rows, None, [], 512)
    on = HeldOut.build(tokenizer, rows, None, [], 512, thinking=True)
    # (the character tokenizer has no letters: the empty think block shows as extra tokens at the end)
    assert off.prompts[0][: len(on.prompts[0])] == on.prompts[0] and len(off.prompts[0]) > len(on.prompts[0])


def test_a_template_without_the_switch_renders_as_before():
    from hermes_stack.modelcore.embedded import build_tokenizer

    tok = build_tokenizer()
    tok.chat_template = "{%- for m in messages %}{{ m['content'] }}|{%- endfor %}"
    assert prompt_text(tok, "q", thinking=False) == prompt_text(tok, "q", thinking=True) == f"q\n\n{_instruction()}|"


def _instruction() -> str:
    from hermes_stack.tasks.prompting import INSTRUCTION

    return INSTRUCTION


def test_the_environment_config_carries_the_switch(tmp_path):
    from hermes_stack.config.loader import load_stack
    from hermes_stack.environment.runtime import build_configs
    from tests.fakes.stack_files import write_stack

    configs = write_stack(tmp_path / "configs", dataset="offline-arith", model_path="embedded")
    toml = configs / "config_grpo.toml"
    toml.write_text(toml.read_text().replace("[environment]\n", "[environment]\nenable_thinking = true\n"))
    stack = load_stack("grpo", configs, "embedded")
    assert stack.config.environment.enable_thinking is True
    env_config, _ = build_configs(stack, {"HERMES_KEYFILE": str(tmp_path / "none")})
    assert env_config.enable_thinking is True


def test_validate_wants_room_to_think_on_a_thinking_model(tmp_path):
    on = {"environment.enable_thinking": True}
    (problem,) = rules.thinking_budget(inputs("grpo", config=on))  # shipped: Qwen/Qwen3-8B, 2048 tokens
    assert problem.line() == (
        "config_grpo.toml: rollout.max_token_length: found 2048 with enable_thinking = true on Qwen/Qwen3-8B, "
        "expected >= 4096 for a thinking model. Hint: a thinking model reasons for thousands of tokens first and "
        "answers cut at the budget score 0; raise max_token_length, or set [environment] enable_thinking = false")
    assert rules.thinking_budget(inputs("grpo", config={**on, "rollout.max_token_length": 4096})) == []
    assert rules.thinking_budget(inputs("grpo")) == []  # thinking off (the default): nothing to check
    # a local model folder is judged by its template, not its name
    plain = tmp_path / "qwen3-lookalike"
    plain.mkdir()
    (plain / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    assert rules.thinking_budget(inputs("grpo", config=on, settings={"inference.model_path": str(plain)})) == []
    (plain / "chat_template.jinja").write_text(THINKING_TEMPLATE)
    assert rules.thinking_budget(inputs("grpo", config=on, settings={"inference.model_path": str(plain)}))


@pytest.mark.parametrize("thinking", [False, True])
def test_the_environments_rollout_prompt_follows_the_switch(tokenizer, thinking):
    """What the environment sends the inference service (HermesMathEnv.prompt_text) for a chat-template dataset:
    the empty think block exactly when the config turns thinking off."""
    from types import SimpleNamespace

    from hermes_stack.environment.env import HermesMathEnv

    env = SimpleNamespace(tokenizer=tokenizer, examples=[], config=SimpleNamespace(
        dataset="gsm8k", system_prompt=None, enable_thinking=thinking))
    text = HermesMathEnv.prompt_text(env, "What is 2 + 3?")
    assert text == prompt_text(tokenizer, "What is 2 + 3?", thinking=thinking)
    assert (NO_THINK in text) is (not thinking)

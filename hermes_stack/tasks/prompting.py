"""The prompt a gsm8k-shaped question becomes, in one place: the environment's rollouts, the trainer's held-out
evaluation and bench/real_model.py all build it here, so they score the same text.

- Default (a hub model on GPU): one user message, the question followed by INSTRUCTION (think step by step, end with
  `#### N`), through the tokenizer's chat template when it has one.
- `[environment] system_prompt` set: that system message, then `[environment] fewshot` solved train rows as
  user/assistant turns, then the question alone. A small model follows a shown answer far better than a described
  one: SmolLM2-135M wrote `#### N` in 0 of 64 samples with a system prompt alone and in 53 of 64 after one solved
  example (measured).
- Thinking templates (Qwen3 family) get `enable_thinking` = `[environment] enable_thinking` (default false): with
  the switch unset Qwen3's template lets the model think, and Qwen3-8B then reasons at length against a budget of
  ~1950 tokens; truncated answers score 0 and widen every batch. Templates without the switch ignore the variable.
"""

from __future__ import annotations


def new_token_budget(max_token_length: int, prompt_tokens: int) -> int:
    """New tokens a rollout of a `prompt_tokens`-token prompt may generate: Atropos drops a sequence of
    >= the trainer's max_token_len tokens, so stay one below rollout.max_token_length (at least 1). The environment's
    rollouts, the trainer's held-out evaluation and bench/learn.py all use it."""
    return max(1, max_token_length - prompt_tokens - 1)

THINKING_SWITCH = "enable_thinking"  # the chat-template variable Qwen3's templates read
THINKING_MIN_TOKENS = 4096  # rollout.max_token_length a thinking model needs at least (config/rules.py)
INSTRUCTION = "Solve the problem step by step. Write the final answer alone on the last line as '#### <number>'."


def messages(question: str, system_prompt: str | None = None, examples: list[dict] = ()) -> list[dict]:
    if system_prompt is None:
        return [{"role": "user", "content": f"{question}\n\n{INSTRUCTION}"}]
    out = [{"role": "system", "content": system_prompt}]
    for row in examples:
        out += [{"role": "user", "content": row["question"]}, {"role": "assistant", "content": row["answer"]}]
    return out + [{"role": "user", "content": question}]


def has_thinking_switch(chat_template: str | None) -> bool:
    """A chat template that turns thinking on or off by `enable_thinking` (Qwen3's)."""
    return bool(chat_template) and THINKING_SWITCH in chat_template


def prompt_text(tokenizer, question: str, system_prompt: str | None = None, examples: list[dict] = (),
                thinking: bool = False) -> str:
    """The text sent for generation (the chat template's generation prompt included); `thinking`: the template's
    enable_thinking ([environment] enable_thinking)."""
    chat = messages(question, system_prompt, examples)
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True,
                                             **{THINKING_SWITCH: thinking})
    return "\n\n".join(m["content"] for m in chat) + "\n"


def fewshot_examples(dataset: str, count: int, **load_kwargs) -> list[dict]:
    """The first `count` train rows in file order (not the seeded shuffle): the same examples for every seed."""
    if count <= 0:
        return []
    from hermes_stack.tasks.datasets import load_items

    rows = load_items(dataset, "train", 10**9, seed=0, shuffle=False, **load_kwargs)
    return rows[:count]

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

from collections.abc import Iterable
from dataclasses import dataclass

from hermes_stack.errors import Problem


def new_token_budget(max_token_length: int, prompt_tokens: int) -> int:
    """New tokens a rollout of a `prompt_tokens`-token prompt may generate: Atropos drops a sequence of
    >= the trainer's max_token_len tokens, so stay one below rollout.max_token_length (at least 1). The environment's
    rollouts, the trainer's held-out evaluation and bench/learn.py all use it."""
    return max(1, max_token_length - prompt_tokens - 1)


# New tokens a prompt must leave at least: `#### N`, the shortest answer the reward reads as well formatted, is about
# four tokens in common tokenizers. A prompt leaving fewer is sampled, truncated and scored 0 every time it comes
# round, and the trainer's held-out evaluation gives every row the budget its longest prompt leaves.
MIN_NEW_TOKENS = 4
ROOM_KEY = "rollout.max_token_length"


@dataclass(frozen=True)
class PromptRoom:
    """How a set of prompts fits rollout.max_token_length: token counts and how many leave too little room."""

    count: int
    shortest: int
    longest: int
    max_token_length: int
    cramped: int  # prompts leaving fewer than MIN_NEW_TOKENS new tokens
    longest_at: int = 0  # the longest prompt's index in the lengths given

    @property
    def least_new_tokens(self) -> int:
        return self.max_token_length - self.longest - 1

    def summary(self, what: str) -> str:
        return f"{self.count} {what} of {self.shortest}-{self.longest} tokens"

    def problem(self, config_file: str, what: str, dataset: str, fewshot: int = 0, system_prompt: str | None = None,
                longest_question: str = "") -> Problem | None:
        """The refusal when any prompt leaves fewer than MIN_NEW_TOKENS new tokens; None when all fit. The hint
        names what makes this dataset's prompts long: the offline task's are its bare sums."""
        if not self.cramped:
            return None
        fixes = [f"raise {ROOM_KEY} to at least {self.longest + MIN_NEW_TOKENS + 1} (more for a worked answer)"]
        if fewshot and system_prompt is not None:
            fixes.append(f"lower [environment] fewshot ({fewshot} solved examples in every prompt)")
        if system_prompt:
            fixes.append("shorten [environment] system_prompt")
        if dataset not in ("offline-arith", "gsm8k"):
            fixes.append(f"shorten or drop the longest rows of {dataset}")
        start = longest_question if len(longest_question) <= 48 else longest_question[:47] + "…"
        longest = f"the longest prompt is {self.longest} tokens" + (f", its question {start!r}" if start else "")
        template = "" if dataset == "offline-arith" else " (a prompt's tokens include its chat template)"
        return Problem(
            config_file, ROOM_KEY,
            f"{self.max_token_length}, which leaves {self.cramped} of {self.count} {what} fewer than "
            f"{MIN_NEW_TOKENS} new tokens ({longest})",
            f"room for at least {MIN_NEW_TOKENS} new tokens after every prompt", " or ".join(fixes) + template)


def prompt_room(lengths: Iterable[int], max_token_length: int) -> PromptRoom:
    """`lengths`: the prompts' token counts as the inference service receives them."""
    counted = list(lengths)
    least = max_token_length - 1 - MIN_NEW_TOKENS  # the longest prompt that still leaves MIN_NEW_TOKENS
    longest_at = max(range(len(counted)), key=counted.__getitem__, default=0)
    return PromptRoom(len(counted), min(counted, default=0), max(counted, default=0), max_token_length,
                      sum(n > least for n in counted), longest_at)


def room_line(rooms: list[tuple[str, PromptRoom]]) -> str:
    """`what` and room of one or more sets of prompts (all against the same max_token_length), for a log line."""
    tightest = min((room for _, room in rooms), key=lambda room: room.least_new_tokens)
    return (", ".join(room.summary(what) for what, room in rooms) + f"; {ROOM_KEY} {tightest.max_token_length} leaves "
            f"the longest {tightest.least_new_tokens} new tokens (at least {MIN_NEW_TOKENS} needed)")


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


def rollout_prompt(tokenizer, dataset: str, question: str, system_prompt: str | None = None,
                   examples: list[dict] = (), thinking: bool = False) -> str:
    """What the environment sends for a row of `dataset`: the offline task's bare `12+34=`, else prompt_text."""
    if dataset == "offline-arith":
        from hermes_stack.tasks.offline_arith import format_prompt

        return format_prompt(question)
    return prompt_text(tokenizer, question, system_prompt, examples, thinking)


def fewshot_examples(dataset: str, count: int, **load_kwargs) -> list[dict]:
    """The first `count` train rows in file order (not the seeded shuffle): the same examples for every seed."""
    if count <= 0:
        return []
    from hermes_stack.tasks.datasets import load_items

    rows = load_items(dataset, "train", 10**9, seed=0, shuffle=False, **load_kwargs)
    return rows[:count]

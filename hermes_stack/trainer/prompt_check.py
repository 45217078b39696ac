"""The dry-run's check that every prompt leaves room to answer within rollout.max_token_length, before any step.

The prompts are built and tokenised as they will be (hermes_stack.tasks.prompting: rollout_prompt, PromptRoom): the
split the environment samples (its rows, its max_samples, its shuffle) and, for a JSONL dataset, the test rows the
trainer's held-out evaluation reads (tasks/heldout.py; the offline task's evaluation has a fixed budget of its own).
A prompt leaving fewer than MIN_NEW_TOKENS new tokens is sampled, truncated and scored 0 each time it comes round,
and the held-out evaluation gives every row the budget its longest prompt leaves, so one long test row stalls the
whole curve at 0. The environment checks its split again when it starts (environment/env.py), which covers gsm8k from
the hub: the trainer image has no `datasets` to load it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_stack.errors import Problem


class PromptRoomFailed(Exception):
    def __init__(self, problem: Problem):
        super().__init__(problem.line())
        self.problem = problem


def check_prompts(stack: Any, tokenizer: Any, held_out_rows: int) -> str:
    """One line with the figures, or PromptRoomFailed naming the file, the key, the count and the fix.
    `tokenizer`: the engine's (None when it holds none); `held_out_rows`: test rows the trainer evaluates on."""
    from hermes_stack import environments_catalog
    from hermes_stack.tasks.datasets import ROLLOUT_SEED, load_items
    from hermes_stack.tasks.prompting import fewshot_examples, prompt_room, rollout_prompt, room_line

    env, length = stack.config.environment, stack.config.rollout.max_token_length
    if env.name not in {builtin.name for builtin in environments_catalog.BUILTIN}:  # validate refused a clash
        return f"prompts: not checked: the environment {env.name} builds its own prompts"
    if env.dataset == "gsm8k":
        return "prompts: checked by the environment when it starts (gsm8k is loaded there, from the hub)"
    if tokenizer is None:
        return "prompts: checked by the environment when it starts (this engine holds no tokenizer here)"
    where = {"offline": True, "base_dir": Path(stack.config_path).parent, "config_file": str(stack.config_path)}
    examples = fewshot_examples(env.dataset, env.fewshot, **where)

    def lengths(rows: list[dict]) -> list[int]:  # as the environment encodes them (env.py _prompt_ids)
        return [len(tokenizer.encode(rollout_prompt(tokenizer, env.dataset, row["question"], env.system_prompt,
                                                    examples, env.enable_thinking), add_special_tokens=True))
                for row in rows]

    rows = load_items(env.dataset, env.split, env.max_samples, seed=ROLLOUT_SEED, **where)
    parts = [(f"{env.split} prompts", rows, lengths(rows))]
    if env.dataset != "offline-arith":  # the offline task's evaluation has its own fixed budget (modelcore/embedded)
        from hermes_stack.tasks.heldout import HeldOut

        held_out = HeldOut.from_stack(stack, tokenizer, rows=held_out_rows)  # the very prompts the trainer scores
        parts.append(("held-out prompts", held_out.rows, [len(prompt) for prompt in held_out.prompts]))
    rooms = []
    for what, rows, counted in parts:
        room = prompt_room(counted, length)
        longest = rows[room.longest_at]["question"] if rows else ""
        problem = room.problem(str(stack.config_path), what, env.dataset, env.fewshot, env.system_prompt, longest)
        if problem is not None:
            raise PromptRoomFailed(problem)
        rooms.append((what, room))
    return "prompts: " + room_line(rooms)

"""Greedy held-out evaluation of a JSONL dataset's test split with the environment's own prompt and reward: the
trainer's `eval_accuracy` / `eval_format` for a real model (hermes_stack.trainer.__main__.held_out_evaluator) and
bench/real_model.py's before/after figures. The same prompt text (hermes_stack.tasks.prompting), the same
new-token budget rule as the environment (rollout.max_token_length minus the prompt), the same scoring
(hermes_stack.tasks.reward: math-verify and the `#### N` format).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_stack.tasks.prompting import fewshot_examples, new_token_budget, prompt_text
from hermes_stack.tasks.reward import RewardWeights, score_completion


@dataclass
class HeldOut:
    rows: list[dict]
    prompts: list[list[int]]
    max_new_tokens: int
    weights: RewardWeights

    @classmethod
    def build(cls, tokenizer, rows: list[dict], system_prompt: str | None, examples: list[dict],
              max_token_length: int, weights: RewardWeights | None = None, thinking: bool = False) -> HeldOut:
        prompts = [tokenizer.encode(prompt_text(tokenizer, r["question"], system_prompt, examples, thinking))
                   for r in rows]
        longest = max((len(p) for p in prompts), default=0)
        return cls(rows, prompts, new_token_budget(max_token_length, longest), weights or RewardWeights())

    @classmethod
    def from_stack(cls, stack: Any, tokenizer, rows: int, split: str = "test") -> HeldOut:
        from hermes_stack.tasks.datasets import load_items

        env = stack.config.environment
        where = {"offline": True, "base_dir": Path(stack.config_path).parent, "config_file": str(stack.config_path)}
        items = load_items(env.dataset, split, rows, seed=0, **where)
        examples = fewshot_examples(env.dataset, env.fewshot, **where)
        reward = stack.config.reward
        return cls.build(tokenizer, items, env.system_prompt, examples, stack.config.rollout.max_token_length,
                         RewardWeights(reward.correctness_weight, reward.format_weight), env.enable_thinking)

    def evaluate(self, engine: Any) -> dict[str, float]:
        """accuracy and format rate of one greedy completion per row (engine: TorchEngine.generate)."""
        outputs = engine.generate(self.prompts, n=1, temperature=0.0, max_new_tokens=self.max_new_tokens)
        results = [score_completion(group[0].text, row["answer"], self.weights)
                   for group, row in zip(outputs, self.rows)]
        count = max(1, len(results))
        return {"accuracy": sum(r.correct for r in results) / count,
                "format": sum(r.well_formatted for r in results) / count}

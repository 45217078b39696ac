"""The generated word problems (configs/word_problems.jsonl), the prompt built from them, and the held-out
evaluation that scores them with the environment's reward."""

from __future__ import annotations

from pathlib import Path

from hermes_stack.tasks import word_problems
from hermes_stack.tasks.datasets import load_items
from hermes_stack.tasks.heldout import HeldOut
from hermes_stack.tasks.prompting import INSTRUCTION, fewshot_examples, messages, prompt_text
from hermes_stack.tasks.reward import score_completion

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DATASET = "word_problems.jsonl"


def test_committed_file_is_exactly_what_the_generator_writes():
    assert (CONFIGS / DATASET).read_text(encoding="utf-8") == word_problems.to_jsonl(word_problems.generate())


def test_splits_are_disjoint_and_every_reference_scores_as_correct_and_well_formatted():
    train = load_items(DATASET, "train", 10**6, offline=True, base_dir=CONFIGS)
    test = load_items(DATASET, "test", 10**6, offline=True, base_dir=CONFIGS)
    assert len(test) >= 40 and len(train) >= 400
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    for row in train[:50] + test:
        work, _final = row["answer"].split("\n")
        a, op, b, _, result = work.split()
        assert int(result) == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0
        verdict = score_completion(row["answer"], row["answer"])
        assert verdict.correct and verdict.well_formatted, row


def test_fewshot_examples_come_from_the_train_split_in_file_order():
    (example,) = fewshot_examples(DATASET, 1, offline=True, base_dir=CONFIGS)
    first_train = load_items(DATASET, "train", 1, offline=True, base_dir=CONFIGS, shuffle=False)[0]
    assert example == first_train
    assert fewshot_examples(DATASET, 0, offline=True, base_dir=CONFIGS) == []


def test_messages_default_instruction_or_system_prompt_with_solved_examples():
    assert messages("Q?") == [{"role": "user", "content": f"Q?\n\n{INSTRUCTION}"}]
    example = {"question": "E?", "answer": "1 + 1 = 2\n#### 2"}
    assert messages("Q?", "Answer as '#### N'.", [example]) == [
        {"role": "system", "content": "Answer as '#### N'."},
        {"role": "user", "content": "E?"}, {"role": "assistant", "content": "1 + 1 = 2\n#### 2"},
        {"role": "user", "content": "Q?"}]


def test_prompt_text_goes_through_the_chat_template(tmp_path):
    from transformers import AutoTokenizer

    from tests.fakes.tiny_tokenizer import build_tiny_tokenizer

    template = ("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
                "{% if add_generation_prompt %}[assistant]{% endif %}")
    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_tokenizer(tmp_path / "tok", template)))
    assert prompt_text(tokenizer, "Q?", "S", []) == "[system]S[user]Q?[assistant]"
    plain = AutoTokenizer.from_pretrained(str(build_tiny_tokenizer(tmp_path / "plain")))
    assert prompt_text(plain, "Q?", "S", []) == "S\n\nQ?\n"


class _Engine:
    """Greedy completions fixed per prompt position: the evaluation's bookkeeping, not a model."""

    def __init__(self, texts):
        self.texts, self.calls = texts, []

    def generate(self, prompts, n, temperature, max_new_tokens):
        from hermes_stack.trainer.engine_torch import Completion

        self.calls.append((len(prompts), n, temperature, max_new_tokens))
        return [[Completion([], [], text, "stop")] for text in self.texts[: len(prompts)]]


def test_held_out_scores_greedy_completions_with_the_environment_reward(tmp_path):
    from transformers import AutoTokenizer

    from tests.fakes.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_tokenizer(tmp_path / "tok")))
    rows = [{"question": "1+1?", "answer": "#### 2"}, {"question": "2+2?", "answer": "#### 4"},
            {"question": "3+3?", "answer": "#### 6"}, {"question": "4+4?", "answer": "#### 8"}]
    held = HeldOut.build(tokenizer, rows, None, [], max_token_length=200)
    longest = max(len(p) for p in held.prompts)
    assert held.max_new_tokens == 200 - longest - 1
    engine = _Engine(["1 + 1 = 2\n#### 2", "#### 5", "it is 6", "\\boxed{8}"])
    result = held.evaluate(engine)
    assert engine.calls == [(4, 1, 0.0, held.max_new_tokens)]  # greedy, one completion per row
    assert result == {"accuracy": 0.5, "format": 0.5}  # right: rows 1 and 4 (boxed); formatted: rows 1 and 2

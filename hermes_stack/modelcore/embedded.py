"""The CPU embedded default model: built from nothing (no download is possible), deterministic for a seed.

    python -m hermes_stack.modelcore.embedded build <dir> [--seed 0]

writes a directory that AutoTokenizer / AutoModelForCausalLM load from the path:
- a character-level tokenizer (`tokenizers` WordLevel over digits, `+ = #`, space, newline, and <pad> <bos> <eos>
  <unk>), saved as a PreTrainedTokenizerFast with a chat template that just concatenates message contents — so a
  chat request and a plain completion of the same question give the same tokens;
- a Llama-shaped model (hidden 64, 2 layers, 4 heads, intermediate 128: ~85k parameters);
- a short supervised warm start on the answer FORMAT only: every offline-arith question followed by `#### r` with r
  RANDOM (as many digits as the first operand: hermes_stack.tasks.offline_arith.warm_start_answer). The model learns
  to write `#### <number><eos>` but not which number, so it starts at chance on the task (~0.01 held-out) and RL has
  a well-formatted policy to improve (docs: rl-on-cpu-notes.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

MARKER_FILE = "hermes_embedded.json"
SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARS = list("0123456789+=# \n")
# transformers' default init std (0.02) is kept on purpose: a larger one left the near-constant warm-started policy
# sooner but memorised the train pairs (0.1: held-out 0.05 with train 0.85; 0.04: GRPO held-out 0.55 on seeds 0, 1).
MODEL_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
MAX_POSITIONS = 64
WARM_START_STEPS = 300
WARM_START_BATCH = 64
WARM_START_LR = 1e-3  # 3e-3 also gave format 1.0 but RL then memorised the train pairs (held-out ~0.4 vs 0.8)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
)


def is_embedded_model(model_dir: Path | str) -> bool:
    """A finished build of this model (the marker is written last), not a real checkpoint."""
    return (Path(model_dir) / MARKER_FILE).is_file()


def one_thread_for_tiny_model(model_dir: Path | str, device) -> bool:
    """The embedded tiny model on CPU runs on one intra-op thread (process-wide); returns whether that was applied.

    It is too small to split across threads: on a busy 2-core machine threads waiting on each other at every op made
    the trainer's steps up to ~50x slower, and the inference service sampled a group of 8 in 31 ms of CPU instead of
    2-5 ms (measured)."""
    import torch

    if is_embedded_model(model_dir) and torch.device(device).type == "cpu":
        torch.set_num_threads(1)
        return True
    return False


def build_tokenizer():
    """The character-level tokenizer as a transformers PreTrainedTokenizerFast."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL + CHARS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one piece per character
    core.decoder = decoders.Fuse()  # join pieces without the spaces WordLevel would insert
    core.add_special_tokens(SPECIAL)
    # <bos> first, like Llama tokenizers: encode(text) and the chat template give the same ids. Without it the first
    # digit doubles as the attention sink and held-out accuracy stayed lower (measured).
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                        special_tokens=[("<bos>", vocab["<bos>"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                        eos_token="<eos>", unk_token="<unk>", model_max_length=MAX_POSITIONS)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer, seed: int):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=MAX_POSITIONS,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False, **MODEL_SHAPE)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id,
                                               eos_token_id=tokenizer.eos_token_id,
                                               bos_token_id=tokenizer.bos_token_id, max_new_tokens=8)
    return model


def warm_start(model, tokenizer, seed: int, steps: int = WARM_START_STEPS) -> float:
    """Supervised steps on `<question>#### <random number><eos>`, loss on the answer part only. Returns last loss."""
    import torch

    from hermes_stack.tasks.offline_arith import format_prompt, offline_arith, warm_start_answer

    rng = random.Random(seed)
    questions = [row["question"] for split in ("train", "test") for row in offline_arith(split)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=WARM_START_LR)
    model.train()
    loss_value = float("nan")
    for _ in range(steps):
        prompts, answers = [], []
        for _ in range(WARM_START_BATCH):
            question = rng.choice(questions)
            prompts.append(tokenizer.encode(format_prompt(question)))
            # a random number of the answer's length: the format, never the arithmetic
            answers.append(tokenizer.encode(warm_start_answer(question, rng), add_special_tokens=False)
                           + [tokenizer.eos_token_id])
        width = max(len(p) + len(a) for p, a in zip(prompts, answers))
        ids = torch.full((len(prompts), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((len(prompts), width), -100, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, (p, a) in enumerate(zip(prompts, answers)):
            ids[i, : len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p): len(p) + len(a)] = torch.tensor(a)
            attention[i, : len(p) + len(a)] = 1
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = float(loss.detach())
    model.eval()
    return loss_value


def evaluate(model, tokenizer, split: str = "test", seed: int = 0) -> dict[str, float]:
    """Greedy accuracy and exact-format rate on an offline-arith split."""
    from hermes_stack.modelcore.sampling_core import sample
    from hermes_stack.tasks.offline_arith import format_prompt, is_well_formatted, offline_arith, parse_answer

    rows = offline_arith(split, seed)
    prompts = [tokenizer.encode(format_prompt(r["question"])) for r in rows]
    outputs = sample(model, prompts, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                     temperature=0.0, max_new_tokens=8)
    texts = [tokenizer.decode(group[0][0], skip_special_tokens=True) for group in outputs]
    correct = sum(parse_answer(t) == parse_answer(r["answer"]) for t, r in zip(texts, rows))
    formatted = sum(is_well_formatted(t) for t in texts)
    return {"accuracy": correct / len(rows), "format": formatted / len(rows)}


def build(directory: Path, seed: int = 0, steps: int = WARM_START_STEPS) -> dict:
    """Build tokenizer + warm-started model into `directory`; returns the facts written to the marker file."""
    import torch

    started = time.monotonic()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    # One thread: this model is too small to split, and on a busy machine threads waiting on each other at every
    # op made the build ~50x slower (measured on 2 shared cores). One thread also keeps the build bit-reproducible.
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        tokenizer = build_tokenizer()
        model = build_model(tokenizer, seed)
        loss = warm_start(model, tokenizer, seed, steps)
        test = evaluate(model, tokenizer, "test")
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    finally:
        torch.set_num_threads(threads)
    facts = {
        "kind": "hermes-stack embedded tiny model",
        "task": "offline-arith",
        "seed": seed,
        "warm_start_steps": steps,
        "warm_start_loss": round(loss, 4),
        "parameters": sum(p.numel() for p in model.parameters()),
        "test_accuracy": test["accuracy"],
        "test_format": test["format"],
        "build_seconds": round(time.monotonic() - started, 1),
    }
    # The marker goes last: a directory without it is not a finished build (and engines treat it as a real checkpoint).
    (directory / MARKER_FILE).write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_stack.modelcore.embedded")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the tiny model + tokenizer into DIR")
    b.add_argument("directory", type=Path)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--steps", type=int, default=WARM_START_STEPS)
    args = parser.parse_args(argv)
    facts = build(args.directory, args.seed, args.steps)
    print(json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

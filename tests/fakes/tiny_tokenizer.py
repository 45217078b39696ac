"""A character-level tokenizer saved to a directory, loadable offline with AutoTokenizer (no hub, no model)."""

from __future__ import annotations

import json
import string
from pathlib import Path

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def build_tiny_tokenizer(directory: Path, chat_template: str | None = None) -> Path:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable) - set("\r\x0b\x0c"))
    vocab = {token: i for i, token in enumerate(SPECIALS + chars)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>")
    if chat_template:
        tokenizer.chat_template = chat_template
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(directory))
    # The stack reads a local model folder's config.json on the GPU profile (rules.model_path_local): a tiny shape.
    (directory / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": len(vocab)}))
    return directory

"""The embedded tiny model: the built directory loads with the Auto classes and is deterministic for a seed."""

from __future__ import annotations

import json

import pytest
import torch

from hermes_stack.modelcore import embedded
from hermes_stack.tasks.offline_arith import format_prompt, offline_arith


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    directory = tmp_path_factory.mktemp("embedded") / "model"
    facts = embedded.build(directory, seed=3, steps=5)
    return directory, facts


def test_directory_loads_with_auto_classes(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, facts = built
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory)
    assert sum(p.numel() for p in model.parameters()) == facts["parameters"]
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.eos_token_id == model.config.eos_token_id
    assert json.loads((directory / embedded.MARKER_FILE).read_text())["seed"] == 3


def test_tokenizer_is_character_level_and_round_trips(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built[0])
    text = "7+8=#### 15\n"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.encode("x", add_special_tokens=False) == [tokenizer.unk_token_id]


def test_every_offline_prompt_encodes_without_unknown_tokens(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built[0])
    for row in offline_arith("train") + offline_arith("test"):
        for text in (format_prompt(row["question"]), row["answer"]):
            assert tokenizer.unk_token_id not in tokenizer.encode(text, add_special_tokens=False)


def test_chat_template_and_plain_encoding_give_the_same_ids(built):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(built[0])
    messages = [{"role": "user", "content": "3+4="}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == tokenizer.bos_token + "3+4="
    plain = tokenizer.encode("3+4=")  # the post-processor puts <bos> first, as the chat template does
    assert plain[0] == tokenizer.bos_token_id
    assert tokenizer.encode(text, add_special_tokens=False) == plain
    full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": "#### 7"}], tokenize=False)
    assert full == tokenizer.bos_token + "3+4=#### 7" + tokenizer.eos_token


def test_same_seed_same_weights(built, tmp_path):
    from safetensors.torch import load_file

    embedded.build(tmp_path / "again", seed=3, steps=5)
    first = load_file(built[0] / "model.safetensors")
    second = load_file(tmp_path / "again" / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_cli_build(tmp_path, capsys):
    assert embedded.main(["build", str(tmp_path / "m"), "--steps", "0"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["warm_start_steps"] == 0
    assert (tmp_path / "m" / "config.json").is_file()

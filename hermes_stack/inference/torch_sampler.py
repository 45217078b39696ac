"""The builtin backend's sampling: rows (prompt + per-row SamplingParams) through the shared sampling core.

The core (hermes_stack.modelcore.sampling_core.sample_batch) batches the rows with a KV cache, applies per-row
temperature/top-p/top-k, stops rows on their stop token ids and budgets, and reports log-probs of the distribution
it sampled from, softmax(logits / temperature) untruncated by top-p/top-k (raw logits when greedy): what SGLang
reports by default and what the trainer's importance ratio compares against. This module adapts SamplingParams to it, matches stop strings through its per-step hook, and builds the
`Generated` results. Not thread-safe: the caller serialises calls (see builtin.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from hermes_stack.inference.backend import Generated
from hermes_stack.inference.sampling import SamplingParams, find_stop
from hermes_stack.modelcore.sampling_core import sample_batch


@dataclass(frozen=True)
class Row:
    prompt_ids: tuple[int, ...]
    params: SamplingParams


def eos_ids(model, tokenizer) -> set[int]:
    ids: set[int] = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids


def context_length(model) -> int:
    return int(getattr(model.config, "max_position_embeddings", 2048) or 2048)


class StopStrings:
    """The per-step hook that ends rows whose decoded text contains one of their stop strings.

    Only rows with stop strings are decoded (their whole output each step, as a stop may span tokens); `hits` keeps,
    per stopped row, the matched string and the text before it (what is returned: the stop string is cut off).
    """

    def __init__(self, tokenizer, rows: list[Row]):
        self.tokenizer = tokenizer
        self.rows = [i for i, row in enumerate(rows) if row.params.stop]
        self.params = [rows[i].params for i in self.rows]
        self.hits: dict[int, tuple[str, str]] = {}

    def __call__(self, tokens: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        index = torch.tensor(self.rows, dtype=torch.long, device=tokens.device)
        stopped = torch.zeros_like(active)
        for i, params, alive, ids in zip(self.rows, self.params, active[index].tolist(), tokens[index].tolist()):
            if not alive:
                continue
            text = self.tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens)
            hit = find_stop(text, params.stop)
            if hit is not None:
                self.hits[i] = (hit[1], text[: hit[0]])
                stopped[i] = True
        return stopped


def sample_rows(model, tokenizer, rows: list[Row], generator: torch.Generator | None = None,
                on_done: Callable[[list[tuple[int, Generated]]], None] | None = None) -> list[Generated]:
    """Every row's `Generated`, in order. `on_done`, when given, is handed each step's ended rows as (index,
    Generated) pairs while the longer rows still sample: a streamed /generate sends them at once."""
    if not rows:
        return []
    ctx = context_length(model)
    eos = eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (min(eos) if eos else 0)
    stops = StopStrings(tokenizer, rows)

    def generated(i: int, s) -> Generated:
        row = rows[i]
        if s.finish == "hook":
            matched, text = stops.hits[i]
            finish = {"type": "stop", "matched": matched}
        else:
            text = tokenizer.decode(s.tokens, skip_special_tokens=row.params.skip_special_tokens)
            finish = ({"type": "stop", "matched": s.tokens[-1]} if s.finish == "token"
                      else {"type": "length", "length": len(s.tokens)})
        top = tuple(tuple(pairs[: row.params.top_logprobs]) for pairs in s.top) if row.params.top_logprobs else ()
        return Generated(tuple(row.prompt_ids), tuple(s.tokens), tuple(s.logprobs), text, finish, top)

    done: dict[int, Generated] = {}  # rows already built for on_done: the same object is returned, not rebuilt

    def ended(indices: list[int], sampled) -> None:
        pairs = [(i, generated(i, s)) for i, s in zip(indices, sampled)]
        done.update(pairs)
        on_done(pairs)

    sampled = sample_batch(
        model,
        [list(r.prompt_ids) for r in rows],
        pad_token_id=pad_id,
        stop_token_ids=[set(r.params.stop_token_ids) | (set() if r.params.ignore_eos else eos) for r in rows],
        budgets=[min(r.params.max_new_tokens, ctx - len(r.prompt_ids)) for r in rows],
        temperature=[r.params.temperature for r in rows],
        top_p=[r.params.top_p for r in rows],
        top_k=[r.params.top_k for r in rows],
        generator=generator,
        on_step=stops if stops.rows else None,
        top_logprobs=max(r.params.top_logprobs for r in rows),
        on_done=ended if on_done is not None else None,
    )
    return [done.get(i) or generated(i, s) for i, s in enumerate(sampled)]

"""Batched sampling with a KV cache on a transformers causal LM: the compute core of the builtin backend.

One call samples a batch of rows (prompt + per-row SamplingParams) together: prompts are left-padded, the cache is
filled once, then one token per step for every unfinished row. The log-prob reported for each chosen token is taken
from the raw model distribution (temperature 1, no truncation), which is what SGLang reports and what the trainer's
importance ratio needs. Not thread-safe: the caller serialises calls (see builtin.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hermes_stack.inference.backend import Generated
from hermes_stack.inference.sampling import SamplingParams, find_stop
from hermes_stack.trainer.engine_torch import kv_cache


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


def filter_logits(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor):
    """Per-row temperature, top-k and top-p applied to logits [B, V]; returns sampling log-weights [B, V]."""
    scaled = logits / temperature.clamp(min=1e-5).unsqueeze(-1)
    vocab = scaled.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    sorted_logits, sorted_idx = torch.sort(scaled, dim=-1, descending=True)
    ranks = torch.arange(vocab, device=logits.device).unsqueeze(0)
    drop = ranks >= k.unsqueeze(-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    # Keep the smallest prefix whose mass reaches top_p (the first token is always kept).
    mass_before = probs.cumsum(dim=-1) - probs
    drop |= mass_before >= top_p.unsqueeze(-1)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, sorted_idx, sorted_logits)


@torch.no_grad()
def sample_rows(model, tokenizer, rows: list[Row], generator: torch.Generator | None = None) -> list[Generated]:
    if not rows:
        return []
    device = next(model.parameters()).device
    ctx = context_length(model)
    stops_eos = eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (min(stops_eos) if stops_eos else 0)
    budgets = [min(r.params.max_new_tokens, ctx - len(r.prompt_ids)) for r in rows]
    width = max(len(r.prompt_ids) for r in rows)
    batch = len(rows)
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row.prompt_ids):] = torch.tensor(row.prompt_ids, dtype=torch.long)
        attention[i, width - len(row.prompt_ids):] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    temperature = torch.tensor([r.params.temperature for r in rows], dtype=torch.float32, device=device)
    top_p = torch.tensor([r.params.top_p for r in rows], dtype=torch.float32, device=device)
    top_k = torch.tensor([r.params.top_k for r in rows], dtype=torch.long, device=device)
    greedy = temperature == 0

    outputs: list[list[int]] = [[] for _ in rows]
    logprobs: list[list[float]] = [[] for _ in rows]
    finish: list[dict | None] = [None] * batch
    texts: list[str | None] = [None] * batch
    for i, budget in enumerate(budgets):
        if budget <= 0:
            finish[i] = {"type": "length", "length": 0}

    if all(f is not None for f in finish):
        step_logits = None
    else:
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
        cache, step_logits = kv_cache(out), out.logits[:, -1, :].float()
    step = 0
    while step_logits is not None:
        raw = torch.log_softmax(step_logits, dim=-1)
        weights = filter_logits(step_logits, temperature, top_p, top_k)
        drawn = torch.multinomial(torch.softmax(weights, dim=-1), 1, generator=generator).squeeze(-1)
        chosen = torch.where(greedy, step_logits.argmax(dim=-1), drawn)
        chosen_lp = raw.gather(-1, chosen.unsqueeze(-1)).squeeze(-1).tolist()
        chosen_ids = chosen.tolist()
        for i, row in enumerate(rows):
            if finish[i] is not None:
                continue
            token = chosen_ids[i]
            outputs[i].append(token)
            logprobs[i].append(chosen_lp[i])
            if token in row.params.stop_token_ids or (token in stops_eos and not row.params.ignore_eos):
                finish[i] = {"type": "stop", "matched": token}
            elif row.params.stop:
                text = tokenizer.decode(outputs[i], skip_special_tokens=row.params.skip_special_tokens)
                hit = find_stop(text, row.params.stop)
                if hit is not None:
                    finish[i] = {"type": "stop", "matched": hit[1]}
                    texts[i] = text[: hit[0]]
            if finish[i] is None and len(outputs[i]) >= budgets[i]:
                finish[i] = {"type": "length", "length": len(outputs[i])}
        step += 1
        if all(f is not None for f in finish):
            break
        feed = torch.tensor([ids[-1] if ids else pad_id for ids in outputs], dtype=torch.long, device=device)
        attention = torch.cat([attention, torch.ones((batch, 1), dtype=torch.long, device=device)], dim=-1)
        positions = positions[:, -1:] + 1
        out = model(input_ids=feed.unsqueeze(-1), attention_mask=attention, position_ids=positions, use_cache=True,
                    **cache)
        cache, step_logits = kv_cache(out), out.logits[:, -1, :].float()

    results = []
    for i, row in enumerate(rows):
        text = texts[i]
        if text is None:
            text = tokenizer.decode(outputs[i], skip_special_tokens=row.params.skip_special_tokens)
        results.append(Generated(tuple(row.prompt_ids), tuple(outputs[i]), tuple(logprobs[i]), text, finish[i]))
    return results

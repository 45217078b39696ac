"""The one sampling core: every torch sampler in the stack draws tokens here.

Callers: the trainer's TorchEngine.generate and the embedded model's evaluate (through `sample`), and the builtin
inference backend (hermes_stack.inference.torch_sampler, which adds stop strings through the `on_step` hook). One
core, so the log-probs the inference service reports are of the same distribution the trainer's ratio uses.
It lives in modelcore, not in a service package: the trainer image bakes the embedded model with this package.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class Sampled:
    """One row of `sample_batch`: the sampled tokens and the log-prob of each under the row's sampled distribution."""

    tokens: list[int]  # the stop token included when one ended the row
    # log softmax(logits / temperature)[token], untruncated by top-p/top-k (raw logits when greedy), as SGLang reports
    # by default: the distribution the trainer's PPO ratio is measured against (it scales its logits the same way).
    logprobs: list[float]
    finish: str  # "token" (a stop token) | "hook" (on_step stopped it) | "length" (its budget is spent)
    # Per position, the `top_logprobs` most likely (token, log-prob) under the same distribution (SGLang's
    # top_logprobs_num); empty when none were asked for.
    top: list[list[tuple[int, float]]] = field(default_factory=list)


StepHook = Callable[[torch.Tensor, torch.Tensor], "torch.Tensor | None"]
# on_done(row indices, their results): the rows that ended at this step, each reported once (a streamed answer sends
# a row as soon as it ends: the caller scores it while the batch's longer rows still sample).
DoneHook = Callable[[list[int], list["Sampled"]], None]
_FINISH = {0: "length", 1: "token", 2: "hook"}


def kv_cache(output) -> dict:
    """The step's KV cache as the keyword the next forward call takes: recent transformers 5.x name it `cache`,
    earlier 5.x (e.g. 5.17, seen on a GPU VM) and 4.x `past_key_values`. An unknown keyword would be dropped
    silently and every step would then see only its last token, so the name is read off the output."""
    if getattr(output, "cache", None) is not None:
        return {"cache": output.cache}
    return {"past_key_values": output.past_key_values}


# The batch drops its ended rows once they are a fifth of it or more (rows left * COMPACT_AT <= rows in the batch).
# SGLang's scheduler drops each finished request from the running batch at every step; here a cut copies the KV
# cache, so it waits for a few. Tiny model on CPU, 256-row PPO chunks of the starting model, one torch thread (issue
# 22, docs/benchmarks.md): a batch kept at full width for its longest row (up to ~18 tokens where most end by ~8)
# took 101-105 ms on average; cut at a fifth 61-63 ms, at half 64-71, at every ended row 62-64; the fastest batches
# (no long row) ~47 ms either way.
COMPACT_AT = 1.25


def _cuttable(cache) -> bool:
    """Whether a transformers Cache's batch_select_indices cuts all its state: 4.x's DynamicCache (key/value lists,
    no layers), or a 5.x cache whose every layer is a plain key/value layer. Exact types on purpose: linear-attention
    (recurrent state), static and quantised layers lack the method or cut only their keys and values, which would
    leave a hybrid model's state for the wrong rows."""
    if not hasattr(cache, "layers"):
        return type(cache).__name__ == "DynamicCache"
    try:
        from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
    except ImportError:
        return False
    return all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in cache.layers)


def _compact(cache: dict, kept: torch.Tensor) -> dict | None:
    """The KV cache keyword (kv_cache) with only the batch rows `kept`; None for a cache kind not known here (the
    batch then keeps its width, which is only slower)."""
    (name, value), = cache.items()
    if hasattr(value, "batch_select_indices"):  # transformers' Cache classes
        if not _cuttable(value):
            return None
        value.batch_select_indices(kept)
        return {name: value}
    if isinstance(value, tuple) and all(isinstance(layer, tuple) for layer in value):  # the legacy tuple form
        return {name: tuple(tuple(t[kept] for t in layer) for layer in value)}
    return None


def filter_logits(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor):
    """Per-row temperature, top-k and top-p on logits [B, V]; returns sampling log-weights [B, V] (-inf: cut).

    top-p keeps the smallest prefix whose mass reaches top_p (the first token always); rows with top_p >= 1 and
    top_k <= 0 keep every token, even where float rounding brings the cumulative mass to 1 before the tail."""
    scaled = logits / temperature.clamp(min=1e-5).unsqueeze(-1)
    vocab = scaled.shape[-1]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    sorted_logits, sorted_idx = torch.sort(scaled, dim=-1, descending=True)
    drop = torch.arange(vocab, device=logits.device).unsqueeze(0) >= k.unsqueeze(-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop |= (mass_before >= top_p.unsqueeze(-1)) & (top_p < 1).unsqueeze(-1)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, sorted_idx, sorted_logits)


def _per_row(value, count: int) -> list:
    return [value] * count if isinstance(value, (int, float)) else list(value)


class _Chooser:
    """Picks each row's next token: argmax where temperature <= 0, else a draw from the filtered distribution.

    What the batch needs (any draw, any greedy row, any top-p/top-k cut) is settled once per call, not per step: the
    sort of a cut and the draw are the costly parts, and skipping a draw no row uses leaves the generator as it was.
    """

    def __init__(self, count: int, temperature, top_p, top_k, device, generator):
        self.temperature = torch.tensor(_per_row(temperature, count), dtype=torch.float32, device=device)
        self.top_p = torch.tensor(_per_row(top_p, count), dtype=torch.float32, device=device)
        self.top_k = torch.tensor(_per_row(top_k, count), dtype=torch.long, device=device)
        self.greedy = self.temperature <= 0
        self.any_greedy = bool(self.greedy.any())
        self.any_drawn = not bool(self.greedy.all())
        self.truncate: bool | None = None  # set at the first step, from the logits' width
        self.generator = generator

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.any_drawn:
            return logits.argmax(-1)
        if self.truncate is None:
            self.truncate = bool(((self.top_p < 1) | ((self.top_k > 0) & (self.top_k < logits.shape[-1]))).any())
        if self.truncate:
            weights = filter_logits(logits, self.temperature, self.top_p, self.top_k)
        else:
            weights = logits / self.temperature.clamp(min=1e-5).unsqueeze(-1)
        drawn = torch.multinomial(torch.softmax(weights, dim=-1), 1, generator=self.generator).squeeze(-1)
        return torch.where(self.greedy, logits.argmax(-1), drawn) if self.any_greedy else drawn

    def take(self, kept: torch.Tensor) -> _Chooser:
        """This chooser for the batch rows `kept` (the batch dropped its ended rows): what the batch needs is kept as
        settled for the whole batch, so a row is drawn the same way before and after the cut."""
        other = object.__new__(_Chooser)
        other.__dict__.update(self.__dict__)
        other.temperature, other.top_p, other.top_k = self.temperature[kept], self.top_p[kept], self.top_k[kept]
        other.greedy = self.greedy[kept]
        return other

    def log_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """log softmax(logits / T) per row, untruncated (SGLang's default); greedy rows: of the raw logits."""
        scale = torch.where(self.greedy, torch.ones_like(self.temperature), self.temperature)
        return torch.log_softmax(logits / scale.unsqueeze(-1), -1)

    def logprob(self, logits: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """log softmax(logits / T)[token] per row (see log_softmax)."""
        return self.log_softmax(logits).gather(-1, token.unsqueeze(-1)).squeeze(-1)


def _stop_table(stop_token_ids: list[Collection[int]], device) -> torch.Tensor:
    """Per-row stop token ids as one [B, S] tensor padded with -1 (never a token), for a vectorised membership test."""
    rows = [list(ids) for ids in stop_token_ids]
    width = max((len(ids) for ids in rows), default=0) or 1
    return torch.tensor([ids + [-1] * (width - len(ids)) for ids in rows], dtype=torch.long, device=device)


@torch.no_grad()
def sample_batch(
    model: nn.Module,
    prompts: list[list[int]],
    *,
    pad_token_id: int,
    stop_token_ids: list[Collection[int]],
    budgets: int | list[int],
    temperature: float | list[float] = 1.0,
    top_p: float | list[float] = 1.0,
    top_k: int | list[int] = -1,
    generator: torch.Generator | None = None,
    on_step: StepHook | None = None,
    top_logprobs: int = 0,
    on_done: DoneHook | None = None,
) -> list[Sampled]:
    """Sample every row (a prompt and its own parameters) in one left-padded batch with a KV cache.

    Per row: temperature (<= 0: greedy), top_p (>= 1: off), top_k (<= 0: off), a budget of new tokens (<= 0: none
    sampled) and the token ids that end it (included in its tokens). `on_step(tokens, active)` is called after each
    step with the tokens so far [B, step+1] and the rows still running; it returns a bool [B] of rows to stop now
    (finish "hook"), or None. Log-probs are of softmax(logits / temperature), untruncated (raw when greedy), for the
    chosen token; with `top_logprobs` > 0, also the most likely tokens of each position under that distribution.
    `on_done(indices, results)` is called with the rows that ended at each step (and, before the first, those with
    no budget), every row exactly once, each result equal to the one returned for it.
    """
    device = next(model.parameters()).device
    count = len(prompts)
    if count == 0:
        return []
    budget_list = [max(0, b) for b in _per_row(budgets, count)]
    steps = max(budget_list)
    budget = torch.tensor(budget_list, dtype=torch.long, device=device)
    stops = _stop_table(stop_token_ids, device)
    choose = _Chooser(count, temperature, top_p, top_k, device, generator)

    width = max(len(p) for p in prompts)
    # Left-padded as plain lists, one tensor each: a slice assignment per row was ~8 % of the built-in server's
    # sampling thread on 256-row chunks (py-spy, issue 22).
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long,
                       device=device)
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long,
                             device=device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)

    out_tokens = torch.full((count, steps), pad_token_id, dtype=torch.long, device=device)
    out_logprobs = torch.zeros((count, steps), device=device)
    top_k_wanted = max(0, int(top_logprobs))
    top_ids = torch.zeros((count, steps, top_k_wanted), dtype=torch.long, device=device)
    top_values = torch.zeros((count, steps, top_k_wanted), device=device)
    lengths = torch.zeros(count, dtype=torch.long, device=device)
    reason = torch.zeros(count, dtype=torch.long, device=device)  # keys of _FINISH
    finished = budget <= 0

    k = top_k_wanted

    def results(rows: list[int], upto: int) -> list[Sampled]:
        # the rows' tokens and log-probs up to step `upto` (exclusive), as plain lists, cut at each row's length
        tokens, logprobs = out_tokens[rows, :upto].tolist(), out_logprobs[rows, :upto].tolist()
        length, why = lengths[rows].tolist(), reason[rows].tolist()
        ids_list, values_list = (top_ids[rows, :upto].tolist(), top_values[rows, :upto].tolist()) if k else ([], [])
        return [Sampled(tokens[j][: length[j]], logprobs[j][: length[j]], _FINISH[why[j]],
                        [list(zip(ids_list[j][t], values_list[j][t])) for t in range(length[j])] if k else [])
                for j in range(len(rows))]

    if on_done is not None and bool(finished.any()):
        rows = finished.nonzero().flatten().tolist()
        on_done(rows, results(rows, 0))
    cache: dict = {}  # the KV cache, under the name this transformers version uses (set after the first step)
    step_ids, step_positions = ids, positions
    # The rows in the batch (their indices in `prompts`): rows that ended leave it (_compact, COMPACT_AT), so the
    # steps left for a few long rows are not paid at the whole batch's width.
    live = torch.arange(count, device=device)
    live_budget, live_stops = budget, stops
    for step in range(steps if not bool(finished.all()) else 0):
        output = model(input_ids=step_ids, attention_mask=attention, position_ids=step_positions, use_cache=True,
                       **cache)
        cache = kv_cache(output)
        logits = output.logits[:, -1, :].float()
        token = choose(logits)
        logprob = choose.logprob(logits, token)
        if top_k_wanted:
            values, indices = choose.log_softmax(logits).topk(min(top_k_wanted, logits.shape[-1]), dim=-1)
            top_ids[live, step, : indices.shape[-1]] = indices
            top_values[live, step, : values.shape[-1]] = values
        running = ~finished[live]
        token = torch.where(running, token, torch.full_like(token, pad_token_id))
        out_tokens[live, step] = token
        out_logprobs[live, step] = logprob
        on_token = running & (token.unsqueeze(-1) == live_stops).any(-1)
        ended = on_token | (running & (live_budget <= step + 1))
        why = torch.where(on_token, 1, reason[live])
        if on_step is not None:
            active = torch.zeros(count, dtype=torch.bool, device=device)
            active[live] = running & ~on_token
            hooked = on_step(out_tokens[:, : step + 1], active)
            if hooked is not None:
                hooked = hooked.to(device)[live] & running & ~on_token
                ended |= hooked
                why = torch.where(hooked, 2, why)
        reason[live] = why
        lengths[live] = torch.where(ended, step + 1, lengths[live])
        finished[live] |= ended
        if on_done is not None and bool(ended.any()):
            rows = live[ended].tolist()
            on_done(rows, results(rows, step + 1))
        if bool(finished.all()):
            break
        step_ids = token.unsqueeze(-1)
        step_positions = step_positions[:, -1:] + 1
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=-1)
        keep = ~finished[live]
        if int(keep.sum()) * COMPACT_AT <= len(live):
            kept = keep.nonzero().flatten()
            compacted = _compact(cache, kept)
            if compacted is not None:  # a cache this code cannot cut keeps the whole batch
                cache = compacted
                live, live_budget, live_stops = live[kept], live_budget[kept], live_stops[kept]
                step_ids, step_positions, attention = step_ids[kept], step_positions[kept], attention[kept]
                choose = choose.take(kept)

    return results(list(range(count)), steps)


def sample(
    model: nn.Module,
    prompts: list[list[int]],
    *,
    eos_token_id: int,
    pad_token_id: int,
    n: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 16,
    generator: torch.Generator | None = None,
) -> list[list[tuple[list[int], list[float], str]]]:
    """Every prompt n times through `sample_batch`, ending on eos: per prompt n (tokens, logprobs, finish_reason).

    temperature 0 is greedy; finish_reason is "stop" (eos) or "length". Log-probs are of softmax(logits / temperature)
    (raw logits when greedy), untruncated by top-p: the distribution the trainer's PPO ratio is measured against.
    """
    rows = [p for p in prompts for _ in range(n)]
    done = sample_batch(model, rows, pad_token_id=pad_token_id, stop_token_ids=[(eos_token_id,)] * len(rows),
                        budgets=max_new_tokens, temperature=temperature, top_p=top_p, generator=generator)
    results = [(s.tokens, s.logprobs, "stop" if s.finish == "token" else "length") for s in done]
    return [results[k * n:(k + 1) * n] for k in range(len(prompts))]

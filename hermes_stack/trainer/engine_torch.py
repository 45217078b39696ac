"""The torch engine: a transformers policy trained by PPO (GAE + critic) or GRPO (group-relative), on CPU or GPU.

- Policy: AutoModelForCausalLM. A real checkpoint with `lora_rank` trains a peft LoRA adapter; the embedded tiny
  model (hermes_stack.modelcore.embedded) is fully fine-tuned.
- Reference for the KL term: the initial policy, frozen (a copy, or the base with the adapter disabled for LoRA).
- Critic (PPO only): a small value head on the policy's last hidden states, DETACHED from the trunk. A critic
  sharing the trunk memorised the train prompts and generalised poorly (docs: rl-on-cpu-notes.md).
- AdamW, gradient norm clipped to 1 (policy and critic separately, so critic gradients never shrink policy steps).
  The critic's learning rate is value_loss_coef x the policy's (trainer/algorithms.py: why not a loss weight).
- Log-probs, entropy and KL are of softmax(logits / T), T the rollout temperature: the distribution the inference
  service sampled from and reports log-probs of (SGLang's default; the built-in server's and `generate`'s sampling
  core: hermes_stack.modelcore.sampling_core).
- Memory: a minibatch is trained in micro-batches (`micro_batch_size` sequences) with gradient accumulation, and the
  float32 log-softmax over the vocabulary is taken in chunks of positions (`logprob_chunk_tokens`). Micro-batches
  are formed longest first and each is cut to its own longest row, so one long completion widens only its own
  micro-batch. On a GPU the policy uses gradient checkpointing (`gradient_checkpointing`): backward keeps each
  decoder layer's input and recomputes the rest one layer at a time, so peft's float32 LoRA input copies and the
  layer's intermediate tensors exist for one layer, not all of them. What that keeps is what the GPU plan counts
  (hermes_stack.config.memory, activation_bytes_per_sequence; docs/memory.md).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hermes_stack.config.memory import LOGPROB_CHUNK_BYTES
from hermes_stack.modelcore.embedded import is_embedded_model, one_thread_for_tiny_model
from hermes_stack.modelcore.location import trains_lora
from hermes_stack.modelcore.sampling_core import sample
from hermes_stack.trainer import algorithms as alg
from hermes_stack.trainer.engine import IGNORE, Sequence

if TYPE_CHECKING:
    from hermes_stack.config.models import AlgorithmSection

GRAD_CLIP = 1.0


def logprob_chunk_tokens(vocab_size: int, budget_bytes: int = LOGPROB_CHUNK_BYTES) -> int:
    """Positions per chunk of the float32 log-softmax: [chunk, vocab] floats fit `budget_bytes` (and its exp, for
    the entropy, as much again). 1 GiB with a 151,936-token vocabulary: 883 positions; the tiny model never chunks."""
    return max(1, budget_bytes // (2 * 4 * vocab_size))


# ---------------------------------------------------------------- sampling (core: modelcore.sampling_core)


@dataclass(frozen=True)
class Completion:
    tokens: list[int]  # completion tokens only (the eos included when generation stopped on it)
    logprobs: list[float]  # log p(token) under softmax(logits / temperature) (raw when greedy), per token
    text: str
    finish_reason: str  # "stop" (eos) | "length"


# ---------------------------------------------------------------- critic


def minibatch_rows(count: int, minibatches: int) -> int:
    """Sequences per minibatch when a batch of `count` is split in `minibatches` optimiser steps per pass: the
    ceiling, so a pass takes at most `minibatches` steps and no minibatch is empty."""
    return max(1, -(-count // max(1, minibatches)))


def default_checkpointing(device_type: str, embedded: bool) -> bool:
    """Gradient checkpointing unless set: on for a real model on a GPU (the memory plan, config/memory.py, counts
    only the layer inputs and one recomputed layer: without it an 8B model's micro-batch of 2048-token rows keeps
    ~23 GiB a row and runs out at step 1), off on CPU and for the tiny model (nothing to save, only time lost)."""
    return device_type == "cuda" and not embedded


class ValueHead(nn.Module):
    """V(prefix) from the policy's last hidden state at each position (the input is detached by the caller)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh(), nn.Linear(hidden_size, 1))
        nn.init.zeros_(self.net[-1].weight)  # start at V = 0: no bias before the first return is seen
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net(hidden.to(self.net[0].weight.dtype)).squeeze(-1)  # float32 head on bf16 hidden states


# ---------------------------------------------------------------- batch


@dataclass
class _Batch:
    input_ids: torch.Tensor  # [B, T] right-padded
    attention: torch.Tensor  # [B, T]
    action_mask: torch.Tensor  # [B, T-1] 1.0 where logits[t] predict a trained completion token (t+1)
    old_logprobs: torch.Tensor | None  # [B, T-1] inference log-probs of token t+1, None when not all have them
    scores: torch.Tensor  # [B]

    def select(self, rows: torch.Tensor) -> _Batch:
        """These rows, cut to the longest of them: padding up to the whole batch's width would cost every row the
        longest completion's activations."""
        width = max(int(self.attention[rows].sum(dim=1).max()), 2)
        return _Batch(self.input_ids[rows, :width], self.attention[rows, :width], self.action_mask[rows, :width - 1],
                      None if self.old_logprobs is None else self.old_logprobs[rows, :width - 1], self.scores[rows])

    @property
    def width(self) -> int:
        return self.input_ids.shape[1]


def build_batch(sequences: list[Sequence], pad_token_id: int, device: torch.device | str = "cpu") -> _Batch:
    """Right-pad sequences into tensors aligned for next-token prediction (position t predicts token t+1)."""
    width = max(len(s.tokens) for s in sequences)
    ids = torch.full((len(sequences), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width - 1))
    with_logprobs = all(len(s.logprobs) == len(s.tokens) for s in sequences)
    old = torch.zeros((len(sequences), width - 1)) if with_logprobs else None
    for i, s in enumerate(sequences):
        if len(s.mask) != len(s.tokens):
            raise ValueError(f"sequence {i}: {len(s.mask)} mask entries for {len(s.tokens)} tokens")
        ids[i, : len(s.tokens)] = torch.tensor(s.tokens, dtype=torch.long)
        attention[i, : len(s.tokens)] = 1
        mask[i, : len(s.tokens) - 1] = torch.tensor([float(m != IGNORE) for m in s.mask[1:]])
        if old is not None:
            old[i, : len(s.tokens) - 1] = torch.tensor(s.logprobs[1:], dtype=torch.float32)
    scores = torch.tensor([float(s.score) for s in sequences])
    to = (lambda x: None if x is None else x.to(device))
    return _Batch(to(ids), to(attention), to(mask), to(old), to(scores))


# ---------------------------------------------------------------- engine


class TorchEngine:
    """The torch implementation of hermes_stack.trainer.engine.Engine (plus `generate` for in-process sampling)."""

    def __init__(
        self,
        model_dir: str | Path,
        algo: AlgorithmSection,
        learning_rate: float,
        *,
        temperature: float,
        device: str = "cpu",
        lora_rank: int | None = None,
        epochs: int = 2,
        minibatches: int = 1,
        whiten_gae: bool = True,
        critic_learning_rate: float | None = None,
        weight_decay: float = 0.0,
        lr_decay_steps: int | None = None,
        min_lr_ratio: float = 0.1,
        lr_hold_steps: int = 0,
        seed: int = 0,
        dtype: torch.dtype | None = None,
        micro_batch_size: int | None = None,
        gradient_checkpointing: bool | None = None,
        decoupled: bool = True,
    ):
        """`temperature`: the rollout temperature ([rollout] temperature), by which logits are divided for the ratio,
        the KL and the entropy; required, because a default of 1 silently mismatched behaviour log-probs sampled at
        0.7/0.8 (bench/real_model.py trained that way before). `micro_batch_size`: sequences per forward/backward pass (None: a whole minibatch).
        `critic_learning_rate` overrides value_loss_coef x learning_rate. `gradient_checkpointing` None: on for a
        real model on a GPU (what the GPU memory plan assumes), off on CPU (there it costs a third more compute and
        memory is not the limit) and for the embedded tiny model."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        self.algo = algo
        self.model_dir = Path(model_dir)
        self.device = torch.device(device)
        self.epochs = epochs
        if minibatches < 1:
            raise ValueError(f"minibatches {minibatches}: expected >= 1")
        self.minibatches = minibatches
        self.whiten_gae = whiten_gae
        self.lr_decay_steps = lr_decay_steps
        self.min_lr_ratio = min_lr_ratio
        self.lr_hold_steps = lr_hold_steps
        if micro_batch_size is not None and micro_batch_size < 1:
            raise ValueError(f"micro_batch_size {micro_batch_size}: expected >= 1 or None")
        self.micro_batch_size = micro_batch_size
        self.temperature = float(temperature)
        self.decoupled = decoupled
        self.steps_done = 0
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

        embedded = is_embedded_model(self.model_dir)
        one_thread_for_tiny_model(self.model_dir, self.device)
        self.use_lora = trains_lora("torch", self.model_dir, lora_rank)  # the inference service's rule too
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" and not embedded else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.pad_token_id = self.tokenizer.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = self.tokenizer.eos_token_id
        base = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=dtype).to(self.device)
        if gradient_checkpointing is None:
            gradient_checkpointing = default_checkpointing(self.device.type, embedded)
        self.gradient_checkpointing = bool(gradient_checkpointing)
        if self.gradient_checkpointing:
            enable_checkpointing(base)

        if self.use_lora:
            from peft import LoraConfig, get_peft_model

            self.policy = get_peft_model(base, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                                          target_modules="all-linear", task_type="CAUSAL_LM"))
            self.reference = None  # the base with the adapter disabled is the reference: no second copy in memory
        else:
            self.policy = base
            self.reference = copy.deepcopy(base).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)

        self.critic = ValueHead(base.config.hidden_size).to(self.device) if algo.uses_critic else None
        groups = [{"params": [p for p in self.policy.parameters() if p.requires_grad], "lr": learning_rate}]
        if self.critic is not None:
            critic_lr = critic_learning_rate or alg.critic_learning_rate(learning_rate, algo.value_loss_coef)
            groups.append({"params": list(self.critic.parameters()), "lr": critic_lr})
        self.optimizer = torch.optim.AdamW(groups, weight_decay=weight_decay)
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]

    # ------------------------------------------------------------ sampling

    def generate(
        self,
        prompts: list[list[int]] | list[str],
        n: int = 1,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 16,
    ) -> list[list[Completion]]:
        """Sample n completions per prompt (token ids, or text encoded with the tokenizer's special tokens) from the policy: per prompt, n Completions."""
        ids = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]  # with <bos>, as served
        was_training = self.policy.training
        self.policy.eval()
        try:
            raw = sample(self.policy, ids, eos_token_id=self.tokenizer.eos_token_id, pad_token_id=self.pad_token_id,
                         n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                         generator=self.generator)
        finally:
            self.policy.train(was_training)
        return [[Completion(t, lp, self.tokenizer.decode(t, skip_special_tokens=True), reason)
                 for t, lp, reason in group] for group in raw]

    # ------------------------------------------------------------ training

    def _advantage_inputs(self, groups: list[list[Sequence]]) -> torch.Tensor | None:
        """Group-relative: one advantage per sequence, from its group's scores. GAE: computed later from values."""
        if self.algo.advantage_estimator != "group_relative":
            return None
        out = [alg.group_relative_advantages(torch.tensor([float(s.score) for s in g], dtype=torch.float32))
               for g in groups]
        return torch.cat(out).to(self.device)

    def _micro_batches(self, rows: torch.Tensor, batch: _Batch | None = None) -> list[torch.Tensor]:
        """`rows` in micro-batches of micro_batch_size, longest first when `batch` is given (each micro-batch is then
        cut to its own longest row: _Batch.select). Gradients accumulate, so the grouping does not change the step."""
        size = self.micro_batch_size or len(rows)
        if batch is not None and size < len(rows):
            lengths = batch.attention[rows].sum(dim=1)
            rows = rows[torch.argsort(lengths, descending=True, stable=True)]
        return [rows[start:start + size] for start in range(0, len(rows), size)]

    def _logprobs(self, logits: torch.Tensor, batch: _Batch, with_entropy: bool):
        """Log-probs of the next tokens and entropies under softmax(logits / rollout temperature), chunked."""
        chunk = logprob_chunk_tokens(logits.shape[-1])
        return alg.logprobs_and_entropy(logits, batch.input_ids[:, 1:], self.temperature, with_entropy, chunk)

    def _forward(self, batch: _Batch, with_values: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(log-probs, entropies, values) of the policy on `batch`, all [B, T-1]; values only with a critic."""
        output = self.policy(input_ids=batch.input_ids, attention_mask=batch.attention,
                             output_hidden_states=with_values, use_cache=False)
        logprobs, entropy = self._logprobs(output.logits[:, :-1], batch, with_entropy=True)
        values = None
        if with_values:
            values = self.critic(output.hidden_states[-1][:, :-1].detach())
        return logprobs, entropy, values

    @torch.no_grad()
    def _reference_logprobs(self, batch: _Batch) -> torch.Tensor:
        if self.reference is not None:
            logits = self.reference(input_ids=batch.input_ids, attention_mask=batch.attention, use_cache=False).logits
        else:
            with self.policy.disable_adapter():
                logits = self.policy(input_ids=batch.input_ids, attention_mask=batch.attention, use_cache=False).logits
        return self._logprobs(logits[:, :-1], batch, with_entropy=False)[0]

    def train_step(self, groups: list[list[Sequence]]) -> dict[str, float]:
        """One training step on a batch of groups: `epochs` passes over minibatches, one optimiser step each.

        A minibatch is trained in micro-batches of `micro_batch_size` sequences whose gradients accumulate: each
        micro-batch's loss is its share of the minibatch's token mean, so the step equals one full pass exactly."""
        sequences = [s for g in groups for s in g]
        if not sequences:
            raise ValueError("train_step got an empty batch")
        batch = build_batch(sequences, self.pad_token_id, self.device)
        count = len(sequences)
        size = minibatch_rows(count, self.minibatches)
        self.policy.train()
        self._set_learning_rate()
        fixed = self._fixed(batch, self._advantage_inputs(groups))

        order = torch.arange(count, device=self.device)
        totals: dict[str, float] = {}
        passes = 0
        for epoch in range(self.epochs):
            if epoch > 0 or size < count:  # a whole-batch pass needs no order; minibatches are drawn at random
                order = order[torch.randperm(count, generator=None).to(self.device)]
            for start in range(0, count, size):
                rows = order[start:start + size]
                tokens = batch.action_mask[rows].sum()
                self.optimizer.zero_grad(set_to_none=True)
                terms: dict[str, torch.Tensor] = {}
                for micro in self._micro_batches(rows, batch):
                    part = self._micro_step(fixed, batch, micro, tokens)
                    for k, v in part.items():
                        terms[k] = terms.get(k, 0.0) + v.detach()
                terms["grad_norm"] = torch.nn.utils.clip_grad_norm_(
                    [p for p in self.policy.parameters() if p.requires_grad], GRAD_CLIP)
                if self.critic is not None:
                    terms["critic_grad_norm"] = torch.nn.utils.clip_grad_norm_(self.critic.parameters(), GRAD_CLIP)
                self.optimizer.step()
                for k, v in terms.items():
                    totals[k] = totals.get(k, 0.0) + float(v)
                passes += 1
        self.steps_done += 1

        metrics = {k: v / passes for k, v in totals.items()}
        mask = batch.action_mask
        adv = fixed["advantages"]
        adv_values = adv[mask > 0]
        metrics.update(
            reward_mean=float(batch.scores.mean()),
            reward_std=float(batch.scores.std(unbiased=False)),
            advantage_mean=float(adv_values.mean()) if adv_values.numel() else 0.0,
            advantage_std=float(adv_values.std(unbiased=False)) if adv_values.numel() else 0.0,
            # 1.0: rollouts of this very policy; below, the behaviour policy lagged (decoupled objective's weights)
            behaviour_weight=(float(alg.masked_mean(fixed["behaviour_weights"], mask)) if "behaviour_weights" in fixed
                              else 1.0),
            tokens=float(mask.sum()),
            sequences=float(count),
            optimizer_steps=float(passes),
            learning_rate=float(self.optimizer.param_groups[0]["lr"]),
        )
        return metrics

    def _micro_step(self, fixed, batch: _Batch, micro: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """Forward and backward of one micro-batch (`micro`: its rows); its loss terms. Gradients accumulate."""
        mb = batch.select(micro)
        logprobs, entropy, values = self._forward(mb, with_values=self.critic is not None)
        part = self._loss_terms(fixed, micro, mb, logprobs, entropy, values, tokens)
        part["loss"].backward()
        return part

    def probe_step(self, sequences: list[Sequence]) -> None:
        """What one micro-batch of train_step costs, without training: `sequences` as one group and one micro-batch,
        the no-gradient pass over them (behaviour, reference, values), then one forward and backward. The gradients
        are dropped; no optimiser step, so the weights, the optimiser's state and the step count stay as they are.
        The dry-run measures memory with it (hermes_stack.trainer.memory_check)."""
        batch = build_batch(sequences, self.pad_token_id, self.device)
        was_training = self.policy.training
        self.policy.train()
        try:
            fixed = self._fixed(batch, self._advantage_inputs([sequences]))
            rows = torch.arange(len(sequences), device=self.device)
            self._micro_step(fixed, batch, rows, batch.action_mask.sum())
        finally:
            self.optimizer.zero_grad(set_to_none=True)
            self.policy.train(was_training)

    @torch.no_grad()
    def sequence_logprobs(self, token_lists: list[list[int]], temperature: float | None = None,
                          base: bool = False) -> list[list[float]]:
        """Log-probs of tokens[1:] of each token list under the policy (`base`: with the LoRA adapter disabled), of
        softmax(logits / T) with T the rollout temperature unless given (1: the raw logits, which is also what a
        greedy request reports). One row at a time: no padding enters the figures."""
        temperature = self.temperature if temperature is None else temperature
        was_training = self.policy.training
        self.policy.eval()
        out = []
        try:
            for tokens in token_lists:
                ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
                if base and self.use_lora:
                    with self.policy.disable_adapter():
                        logits = self.policy(input_ids=ids, use_cache=False).logits
                else:
                    logits = self.policy(input_ids=ids, use_cache=False).logits
                picked, _ = alg.logprobs_and_entropy(logits[:, :-1], ids[:, 1:], temperature, with_entropy=False)
                out.append(picked[0].float().tolist())
        finally:
            self.policy.train(was_training)
        return out

    def _set_learning_rate(self) -> None:
        """When set, the base rate for lr_hold_steps, then cosine decay to min_lr_ratio of it at lr_decay_steps
        (then flat).

        Derived from steps_done, so a resumed run continues the same schedule. Why: once the train prompts are
        solved, full-rate updates kept moving the policy and held-out accuracy drifted (docs: rl-on-cpu-notes.md).
        """
        factor = alg.lr_factor(self.steps_done, self.lr_decay_steps, self.min_lr_ratio, self.lr_hold_steps)
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = base * factor

    @torch.no_grad()
    def _fixed(self, batch: _Batch, sequence_adv: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """What every pass of the step compares against, per row [B, T-1], from a no-gradient pass over the whole
        batch in micro-batches before the first update: the clip's centre ("old" log-probs), reference log-probs,
        advantages, returns and old values. Behaviour log-probs are the inference service's; recomputed only when it
        sent none. `decoupled` (the default): the clip is centred on this policy before the step (the proximal
        policy) and the behaviour policy's lag enters as alg.behaviour_weights, so a rollout sampled one or more
        updates ago (trainer.max_staleness) is corrected outside the clip; with fresh rollouts the weights are 1."""
        mask = batch.action_mask
        algo = self.algo
        ref = torch.zeros_like(mask)
        behaviour = batch.old_logprobs
        old = behaviour.clone() if behaviour is not None else torch.zeros_like(mask)
        proximal = torch.zeros_like(mask) if self.decoupled and behaviour is not None else None
        values = torch.zeros_like(mask) if self.critic is not None else None
        all_rows = torch.arange(mask.shape[0], device=self.device)
        was_training = self.policy.training
        self.policy.eval()  # no dropout in the reference quantities (the tiny model has none; LoRA has 0.0)
        try:
            for micro in self._micro_batches(all_rows, batch):
                mb = batch.select(micro)
                cols = slice(0, mb.width - 1)  # the micro-batch's own width; the rest of its rows is padding
                ref[micro, cols] = self._reference_logprobs(mb).to(ref.dtype)
                if behaviour is None or values is not None or proximal is not None:
                    logprobs, _, micro_values = self._forward(mb, with_values=values is not None)
                    if behaviour is None:
                        old[micro, cols] = logprobs.to(old.dtype)
                    if proximal is not None:
                        proximal[micro, cols] = logprobs.to(proximal.dtype)
                    if values is not None:
                        values[micro, cols] = micro_values.to(values.dtype)
        finally:
            self.policy.train(was_training)

        fixed = {"old_logprobs": old, "ref_logprobs": ref}
        if proximal is not None:
            fixed.update(old_logprobs=proximal, behaviour_weights=alg.behaviour_weights(proximal, behaviour, mask))
        kl_rewards = (alg.kl_rewards(old, ref, mask, algo.kl_coef) if algo.kl_penalty == "k1_reward"
                      else torch.zeros_like(mask))
        if algo.advantage_estimator == "group_relative":
            # k1 in the reward: each token also gets the return to go of its KL rewards (gamma 1, as GRPO's score).
            fixed["advantages"] = (sequence_adv.unsqueeze(1) * mask
                                   + alg.discounted_returns(kl_rewards, mask, 1.0))
        else:
            rewards = alg.terminal_rewards(batch.scores, mask) + kl_rewards
            advantages, returns = alg.gae(rewards, values, mask, algo.gamma, algo.lam)
            if self.whiten_gae:
                advantages = alg.whiten(advantages, mask)
            fixed.update(advantages=advantages, returns=returns)
        return fixed

    def _loss_terms(self, fixed, rows, mb, logprobs, entropy, values, tokens) -> dict[str, torch.Tensor]:
        """This micro-batch's share of the minibatch's loss and metrics (`tokens`: the minibatch's token count)."""
        algo = self.algo
        mask = mb.action_mask
        cols = slice(0, mb.width - 1)
        mine = {k: (None if v is None else v[rows, cols]) for k, v in fixed.items()}  # this micro-batch's part
        pg, clip_fraction = alg.policy_loss(logprobs, mine["old_logprobs"], mine["advantages"], mask,
                                            algo.clip_epsilon, count=tokens, weights=mine.get("behaviour_weights"))
        entropy_mean = alg.masked_mean(entropy, mask, tokens)
        kl_term, kl = alg.kl_penalty(logprobs, mine["ref_logprobs"], mask, algo.kl_coef, count=tokens)
        loss = pg + alg.entropy_bonus(entropy, mask, algo.entropy_coef, count=tokens)
        if algo.kl_penalty == "k3_loss":
            loss = loss + kl_term
        terms = {"policy_loss": pg.detach(), "entropy": entropy_mean.detach(), "kl": kl, "clip_fraction": clip_fraction}
        if values is not None:
            # Unweighted: value_loss_coef acts through the critic's learning rate (algorithms module docstring).
            v_loss = alg.value_loss(values, mine["returns"], mask, 1.0, count=tokens)
            loss = loss + v_loss
            terms["value_loss"] = v_loss.detach()
            terms["value_mean"] = alg.masked_mean(values.detach(), mask, tokens)
        terms["loss"] = loss
        return terms

    # ------------------------------------------------------------ weights and checkpoints

    def export_weights(self, directory: Path) -> Path:
        """save_pretrained of the policy (LoRA: the adapter only) and the tokenizer, for the inference service."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.policy.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        return directory

    def state_dict(self) -> dict[str, Any]:
        if self.use_lora:
            from peft import get_peft_model_state_dict

            policy = get_peft_model_state_dict(self.policy)
        else:
            policy = self.policy.state_dict()
        return {
            "policy": {k: v.detach().cpu().clone() for k, v in policy.items()},
            "critic": None if self.critic is None else {k: v.cpu().clone() for k, v in self.critic.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "steps_done": self.steps_done,
            "lora": self.use_lora,
            "algo": self.algo.name,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("lora") != self.use_lora or state.get("algo") != self.algo.name:
            raise ValueError(f"checkpoint is for algo={state.get('algo')} lora={state.get('lora')}, "
                             f"this engine is algo={self.algo.name} lora={self.use_lora}")
        if self.use_lora:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.policy, state["policy"])
        else:
            self.policy.load_state_dict(state["policy"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps_done = int(state.get("steps_done", 0))


def enable_checkpointing(model) -> None:
    """Gradient checkpointing of every decoder layer. Non-reentrant: correct with a frozen base under peft (no input
    that requires grad) without extra hooks. transformers 5 renamed the call; the GPU image's may be either."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def is_checkpointing(model) -> bool:
    name = "is_activation_checkpointing" if hasattr(type(model), "is_activation_checkpointing") else \
        "is_gradient_checkpointing"
    return bool(getattr(model, name))

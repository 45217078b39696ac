"""What the local Tinker service trains behind its API: a causal LM in torch on CPU, with Tinker's semantics.

- `create_model` with a LoRA config: a peft LoRA adapter on the base model (attention, MLP and, with
  `train_unembed`, the unembedding), alpha = rank; `full=True` trains every weight instead (the embedded tiny model's
  choice in the torch engine) and exports a whole model directory.
- `forward_backward` ACCUMULATES gradients (Tinker's semantics) until `optim_step`, which applies Adam with the
  request's AdamParams (lr, betas, eps, decoupled weight decay, optional global-norm clipping) and zeroes them.
- Losses as Tinker documents them (docs: Loss Functions), per token and SUMMED over the batch's tokens:
  importance_sampling: -(ratio * A);  ppo: -min(ratio * A, clip(ratio, low, high) * A), ratio = exp(logp - old),
  thresholds from loss_fn_config (clip_low_threshold / clip_high_threshold, default 0.8 / 1.2).
  The per-datum output is the policy's log-prob of each target token BEFORE this call's update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

LOSSES = ("importance_sampling", "ppo")
DEFAULT_CLIP = (0.8, 1.2)


def token_losses(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, loss_fn: str,
                 config: dict[str, float] | None = None) -> torch.Tensor:
    """Per-token loss (not yet summed) of Tinker's built-in policy-gradient losses."""
    ratio = torch.exp(logprobs - old_logprobs)
    if loss_fn == "importance_sampling":
        return -(ratio * advantages)
    if loss_fn == "ppo":
        config = config or {}
        low = float(config.get("clip_low_threshold", DEFAULT_CLIP[0]))
        high = float(config.get("clip_high_threshold", DEFAULT_CLIP[1]))
        clipped = torch.clamp(ratio, low, high)
        return -torch.minimum(ratio * advantages, clipped * advantages)
    raise ValueError(f"loss_fn {loss_fn!r} is not supported here; expected one of {LOSSES}")


@dataclass(frozen=True)
class DatumIn:
    tokens: list[int]  # model input
    target_tokens: list[int]
    logprobs: list[float]  # the sampler's
    advantages: list[float]


class Policy:
    """One training run's model + optimizer (Tinker's "model_id")."""

    def __init__(self, model_dir: str | Path, lora_rank: int, *, full: bool = False, seed: int | None = None,
                 train_unembed: bool = True, train_mlp: bool = True, train_attn: bool = True):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if seed is not None:
            torch.manual_seed(seed)
        self.model_dir = Path(model_dir)
        self.full = full
        self.lora_rank = lora_rank
        # Which modules the adapter covers, kept with each saved state: Tinker rebuilds a model from a checkpoint with
        # the checkpoint's own LoRA config (a resumed run's adapter must match the one it saved).
        self.lora_options = {"train_unembed": train_unembed, "train_mlp": train_mlp, "train_attn": train_attn}
        base = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        if full:
            self.model = base
        else:
            from peft import LoraConfig, get_peft_model

            targets = ((["q_proj", "k_proj", "v_proj", "o_proj"] if train_attn else [])
                       + (["gate_proj", "up_proj", "down_proj"] if train_mlp else [])
                       + (["lm_head"] if train_unembed else []))
            self.model = get_peft_model(base, LoraConfig(r=lora_rank, lora_alpha=lora_rank, lora_dropout=0.0,
                                                         target_modules=targets, task_type="CAUSAL_LM"))
        self.model.train()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)
        self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    # ------------------------------------------------------------ training

    def _logprobs(self, data: list[DatumIn]) -> list[torch.Tensor]:
        width = max(len(d.tokens) for d in data)
        ids = torch.full((len(data), width), self.pad, dtype=torch.long)
        attention = torch.zeros((len(data), width), dtype=torch.long)
        targets = torch.zeros((len(data), width), dtype=torch.long)
        for i, d in enumerate(data):
            if len(d.target_tokens) != len(d.tokens):
                raise ValueError(f"datum {i}: {len(d.target_tokens)} target_tokens for {len(d.tokens)} input tokens")
            ids[i, : len(d.tokens)] = torch.tensor(d.tokens)
            attention[i, : len(d.tokens)] = 1
            targets[i, : len(d.tokens)] = torch.tensor(d.target_tokens)
        logits = self.model(input_ids=ids, attention_mask=attention, use_cache=False).logits.float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return [logp[i, : len(d.tokens)] for i, d in enumerate(data)]

    def forward_backward(self, data: list[DatumIn], loss_fn: str, config: dict[str, float] | None,
                         forward_only: bool = False) -> tuple[list[list[float]], dict[str, float]]:
        if loss_fn not in LOSSES:
            raise ValueError(f"loss_fn {loss_fn!r} is not supported by the local service; expected one of {LOSSES}")
        if forward_only:
            with torch.no_grad():
                per_datum = self._logprobs(data)
        else:
            per_datum = self._logprobs(data)
        losses = [token_losses(lp, torch.tensor(d.logprobs), torch.tensor(d.advantages), loss_fn, config)
                  for lp, d in zip(per_datum, data)]
        loss = torch.stack([x.sum() for x in losses]).sum()
        if not forward_only:
            loss.backward()  # accumulates until optim_step, as on Tinker
        tokens = sum(len(d.tokens) for d in data)
        return [lp.detach().tolist() for lp in per_datum], {"loss:sum": float(loss.detach()),
                                                            "tokens:sum": float(tokens)}

    def optim_step(self, learning_rate: float, beta1: float = 0.9, beta2: float = 0.95, eps: float = 1e-12,
                   weight_decay: float = 0.0, grad_clip_norm: float = 0.0) -> dict[str, float]:
        for group in self.optimizer.param_groups:
            group.update(lr=learning_rate, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) \
            if grads else 0.0
        if grad_clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.params, grad_clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm:mean": norm if math.isfinite(norm) else float("nan")}

    # ------------------------------------------------------------ weights and state

    def trainable_state(self) -> dict[str, torch.Tensor]:
        if self.full:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        from peft import get_peft_model_state_dict

        # save_embedding_layers=False: only the adapter, not a copy of the (frozen) unembedding it sits on.
        return {k: v.detach().clone()
                for k, v in get_peft_model_state_dict(self.model, save_embedding_layers=False).items()}

    def state(self, with_optimizer: bool = True) -> dict[str, Any]:
        import copy

        return {"weights": self.trainable_state(), "full": self.full, "lora_rank": self.lora_rank,
                "lora_options": dict(self.lora_options),
                "optimizer": copy.deepcopy(self.optimizer.state_dict()) if with_optimizer else None}

    def load(self, state: dict[str, Any], with_optimizer: bool) -> None:
        if state["full"] != self.full or (not self.full and state["lora_rank"] != self.lora_rank):
            raise ValueError(f"checkpoint is full={state['full']} rank={state['lora_rank']}, this model is "
                             f"full={self.full} rank={self.lora_rank}")
        if self.full:
            self.model.load_state_dict(state["weights"])
        else:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, state["weights"])
        if with_optimizer and state.get("optimizer") is not None:
            self.optimizer.load_state_dict(state["optimizer"])

    def export(self, directory: Path, weights: dict[str, torch.Tensor] | None = None) -> list[Path]:
        """Hugging Face files the inference service loads: a peft adapter (adapter_config.json +
        adapter_model.safetensors) or, for full training, a whole model directory with its tokenizer."""
        directory.mkdir(parents=True, exist_ok=True)
        current = self.trainable_state() if weights is not None else None
        try:
            if weights is not None:
                self._set(weights)
            if self.full:
                self.model.save_pretrained(directory)
            else:
                self.model.save_pretrained(directory, save_embedding_layers=False)
            if self.full:
                self.tokenizer.save_pretrained(directory)
        finally:
            if current is not None:
                self._set(current)
        return sorted(p for p in directory.rglob("*") if p.is_file())

    def _set(self, weights: dict[str, torch.Tensor]) -> None:
        if self.full:
            self.model.load_state_dict(weights)
        else:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, weights)

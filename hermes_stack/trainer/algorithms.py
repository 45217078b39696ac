"""The RL math of PPO and GRPO as pure functions over torch tensors. No I/O, no model, no state.

Shapes: `B` sequences, `T` token positions. A `mask` is 1.0 where a position is a trained completion token and
0.0 elsewhere (prompt, padding); every per-token mean below is a *masked* mean over all masked-in tokens of the
batch (token-level averaging, so long and short completions weigh the same per token).

Sign convention: every `*_loss` is to be minimised; the total loss of a step is

    loss = policy_loss + value_loss_coef * value_loss - entropy_coef * entropy + kl_coef * kl

(`entropy_bonus` and `kl_penalty` return the already-weighted terms so callers just add them).
"""

from __future__ import annotations

import torch

EPS = 1e-6
KL_CLAMP = 10.0


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum(values * mask) / max(sum(mask), 1): the mean over masked-in positions; 0 when nothing is masked in."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def group_relative_advantages(
    scores: torch.Tensor, normalize_std: bool = True, eps: float = EPS
) -> torch.Tensor:
    """GRPO advantages for one group of completions of the same prompt, or a [G, n] batch of groups (last dim = group).

        A_i = s_i - mean(s)                      (normalize_std=False)
        A_i = (s_i - mean(s)) / (std(s) + eps)   (normalize_std=True; population std, i.e. divided by n)

    A group whose scores are all equal yields all-zero advantages (nothing to learn from it).
    """
    centred = scores - scores.mean(dim=-1, keepdim=True)
    if not normalize_std:
        return centred
    std = scores.std(dim=-1, keepdim=True, unbiased=False)
    return centred / (std + eps)


def terminal_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-level rewards [B, T]: each sequence's score sits on its last masked-in (completion) token, 0 elsewhere."""
    mask = mask.to(scores.dtype)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(dim=1).values  # -1: no completion
    rewards = torch.zeros_like(mask)
    has_tokens = last >= 0
    rows = torch.nonzero(has_tokens).squeeze(1)
    rewards[rows, last[has_tokens]] = scores[has_tokens]
    return rewards


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over token-level rewards and critic values, [B, T] each.

    Only masked-in positions are time steps; masked-out positions are skipped (the recursion jumps over them) and
    get advantage 0. With t' the next masked-in position after t (none → terminal, V(t') = 0):

        delta_t = r_t + gamma * V(t') - V(t)
        A_t     = delta_t + gamma * lam * A_t'
        R_t     = A_t + V(t)                      (the critic's regression target, "returns")

    Returns (advantages, returns), both [B, T] and zero outside the mask.
    """
    mask = mask.to(values.dtype)
    values = values * mask
    rewards = rewards * mask
    advantages = torch.zeros_like(values)
    next_value = torch.zeros(values.shape[0], dtype=values.dtype, device=values.device)
    next_advantage = torch.zeros_like(next_value)
    for t in reversed(range(values.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = advantage * m
        # Masked-out positions pass the "next" state through unchanged, so the recursion skips them.
        next_value = torch.where(m > 0, values[:, t], next_value)
        next_advantage = torch.where(m > 0, advantage, next_advantage)
    returns = (advantages + values) * mask
    return advantages, returns


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Monte-Carlo returns R_t = r_t + gamma * R_t' over masked-in positions (t' the next one), 0 outside the mask."""
    mask = mask.to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t]
        updated = rewards[:, t] * m + gamma * running
        returns[:, t] = updated * m
        running = torch.where(m > 0, updated, running)
    return returns


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """(x - mean) / (std + eps) over masked-in positions (population std), 0 outside the mask."""
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    return (values - mean) / (var.sqrt() + eps) * mask.to(values.dtype)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_epsilon: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate (the same objective serves GRPO with group-relative advantages).

        ratio_t = exp(logp_t - logp_old_t)
        L       = masked_mean( -min(ratio_t * A_t, clip(ratio_t, 1 - eps, 1 + eps) * A_t) )

    Returns (loss, clip_fraction) — clip_fraction: share of tokens where the clipped term was the active one.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon) * advantages
    loss = masked_mean(-torch.minimum(unclipped, clipped), mask)
    clip_fraction = masked_mean((clipped < unclipped).to(logprobs.dtype), mask)
    return loss, clip_fraction.detach()


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_loss_coef: float,
    old_values: torch.Tensor | None = None,
    clip_range: float | None = None,
) -> torch.Tensor:
    """Weighted critic regression loss.

        unclipped: value_loss_coef * 0.5 * masked_mean( (V_t - R_t)^2 )
        clipped:   value_loss_coef * 0.5 * masked_mean( max((V_t - R_t)^2, (V_old_t + clip(V_t - V_old_t, ±c) - R_t)^2) )

    The clipped form (old_values and clip_range given) stops one batch from moving the critic far.
    """
    error = (values - returns) ** 2
    if old_values is not None and clip_range is not None:
        clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
        error = torch.maximum(error, (clipped_values - returns) ** 2)
    return value_loss_coef * 0.5 * masked_mean(error, mask)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H_t = -sum_v p_t(v) log p_t(v) of the policy's next-token distribution, [B, T] from logits [B, T, V]."""
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, entropy_coef: float) -> torch.Tensor:
    """The term to ADD to the loss: -entropy_coef * masked_mean(H_t) (minimising it raises entropy)."""
    return -entropy_coef * masked_mean(entropy, mask)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, clamp: float | None = KL_CLAMP) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate, Schulman's k3 (unbiased, always >= 0), on the sampled tokens:

        d_t  = logp_ref_t - logp_t
        k3_t = min(exp(d_t) - d_t - 1, clamp)

    The clamp (10 by default, None to disable) bounds the term where the policy has made a sampled token far less
    likely than the reference does: there exp(d) explodes (we measured single tokens at ~1e4), and its clipped
    gradient still inflated Adam's second moment and stalled learning for hundreds of steps.
    """
    d = ref_logprobs - logprobs
    k3 = torch.exp(d) - d - 1.0
    return k3 if clamp is None else torch.clamp(k3, max=clamp)


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, kl_coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The term to ADD to the loss: kl_coef * masked_mean(k3_t). Returns (weighted term, unweighted mean KL)."""
    kl = masked_mean(kl_k3(logprobs, ref_logprobs), mask)
    return kl_coef * kl, kl.detach()


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position: logits [B, T, V], targets [B, T] → [B, T]."""
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    # Half-precision softmax loses the small probability differences PPO ratios depend on.
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()

"""The RL math of PPO and GRPO as pure functions over torch tensors. No I/O, no model, no state.

Shapes: `B` sequences, `T` token positions. A `mask` is 1.0 where a position is a trained completion token and
0.0 elsewhere (prompt, padding); every per-token mean below is a *masked* mean over all masked-in tokens of the
batch (token-level averaging, so long and short completions weigh the same per token).

Sign convention: every `*_loss` is to be minimised; the total loss of a step is

    loss = policy_loss + value_loss_coef * value_loss - entropy_coef * entropy + kl_coef * kl

(`entropy_bonus` and `kl_penalty` return the already-weighted terms so callers just add them).

Temperature: every log-prob, entropy and KL here is of the temperature-scaled distribution the rollout sampled from,
softmax(logits / T) with T the rollout temperature, untruncated by top-p/top-k: the log-probs SGLang returns by
default and the built-in server returns too (`scale_logits`). T <= 0 (greedy) means the raw logits.

KL regulariser (`[algorithm] kl_penalty`, the same in both engines; d_t = logp_ref_t - logp_t):
- "k3_loss" (default): kl_coef * masked_mean(k3_t) is a loss term, k3_t = exp(d^_t) - d^_t - 1 with the LOG-RATIO
  clamped, d^_t = min(d_t, KL_LOG_RATIO_MAX), not the estimate. Its gradient is
      d(k3_t)/d(logp_t) = 1 - exp(d^_t)
  for every token, so a token the policy made far less likely than the reference keeps a bounded push back
  (at most exp(KL_LOG_RATIO_MAX) - 1), where clamping the estimate would zero its gradient. The Tinker engine, whose
  losses have no KL term, adds exactly this gradient as per-token advantage kl_coef * (exp(d^_t) - 1)
  (`k3_advantage`): with Tinker's one optimiser step per batch (ratio 1) that is the same update direction.
- "k1_reward": no loss term; the per-token reward -kl_coef * (logp_old_t - logp_ref_t) (`kl_rewards`) on the
  behaviour log-probs, a constant w.r.t. the parameters. PPO adds it to the rewards before GAE; GRPO adds its return
  to go (sum over the token and those after it) to every token's group-relative advantage.

Critic: `value_loss_coef` is the critic's step size relative to the policy's. The critic has its own parameters (a
head on detached hidden states) and Adam's step is invariant to a constant factor on a loss, so weighting its loss
would change nothing; it is trained on the unweighted `value_loss` with `critic_learning_rate(lr, value_loss_coef)`
= value_loss_coef * lr, what the weight means under plain gradient descent.
"""

from __future__ import annotations

import math

import torch

EPS = 1e-6
# The behaviour weights' truncation (behaviour_weights): verl's truncated importance sampling uses 2 by default.
BEHAVIOUR_WEIGHT_CAP = 2.0
KL_LOG_RATIO_MAX = 2.5  # k3 <= e^2.5 - 3.5 = 8.7 and its gradient <= e^2.5 - 1 = 11.2 per token


def masked_mean(values: torch.Tensor, mask: torch.Tensor, count: torch.Tensor | float | None = None) -> torch.Tensor:
    """sum(values * mask) / max(sum(mask), 1): the mean over masked-in positions; 0 when nothing is masked in.

    `count` replaces sum(mask) as the denominator: a micro-batch's share of the mean over its whole minibatch, so the
    micro-batches' terms add up to the full pass exactly (gradient accumulation)."""
    mask = mask.to(values.dtype)
    denominator = mask.sum() if count is None else torch.as_tensor(count, dtype=values.dtype)
    return (values * mask).sum() / denominator.clamp(min=1.0)


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
    count: torch.Tensor | float | None = None,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate (the same objective serves GRPO with group-relative advantages).

        ratio_t = exp(logp_t - logp_old_t)
        L       = masked_mean( -w_t * min(ratio_t * A_t, clip(ratio_t, 1 - eps, 1 + eps) * A_t) )

    `weights` w_t (constants; 1 when None): the decoupled objective's behaviour weights (`behaviour_weights`), with
    logp_old the proximal policy's log-probs. Returns (loss, clip_fraction) — clip_fraction: share of tokens where the
    clipped term was the active one.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    if weights is not None:
        surrogate = weights * surrogate
    loss = masked_mean(-surrogate, mask, count)
    clip_fraction = masked_mean((clipped < unclipped).to(logprobs.dtype), mask, count)
    return loss, clip_fraction.detach()


def behaviour_weights(proximal_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor,
                      cap: float = BEHAVIOUR_WEIGHT_CAP) -> torch.Tensor:
    """The decoupled PPO objective's per-token importance weights for rollouts a stale policy sampled (AReaL,
    "decoupled PPO": the clip is centred on the proximal policy, the trainer's own policy before this step's first
    update, and the lag to the behaviour policy is corrected by a weight outside the clip):

        w_t = min(exp(logp_prox_t - logp_behav_t), cap)     (0 where mask is 0)

    With fresh rollouts prox == behaviour and every w_t is 1: the plain PPO objective. Truncated at `cap` as
    truncated importance sampling does, so a token the behaviour policy sampled by luck cannot dominate the step."""
    return torch.exp(proximal_logprobs - behaviour_logprobs).clamp(max=cap) * mask.to(proximal_logprobs.dtype)


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_loss_coef: float,
    old_values: torch.Tensor | None = None,
    clip_range: float | None = None,
    count: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Weighted critic regression loss.

        unclipped: value_loss_coef * 0.5 * masked_mean( (V_t - R_t)^2 )
        clipped:   value_loss_coef * 0.5 * masked_mean( max((V_t - R_t)^2, (V_old_t + clip(V_t - V_old_t, ±c) - R_t)^2) )

    The clipped form (old_values and clip_range given) stops one batch from moving the critic far. The engines pass
    value_loss_coef = 1 and give the weight to the critic's learning rate instead (module docstring).
    """
    error = (values - returns) ** 2
    if old_values is not None and clip_range is not None:
        clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
        error = torch.maximum(error, (clipped_values - returns) ** 2)
    return value_loss_coef * 0.5 * masked_mean(error, mask, count)


def critic_learning_rate(learning_rate: float, value_loss_coef: float) -> float:
    """The critic's Adam learning rate: value_loss_coef * learning_rate (module docstring: why not a loss weight)."""
    return value_loss_coef * learning_rate


def lr_factor(step: int, decay_steps: int | None, min_ratio: float, hold_steps: int = 0) -> float:
    """The learning-rate multiplier at `step` (0-based): 1 without decay; else 1 for the first `hold_steps`, then
    cosine from 1 down to min_ratio at `decay_steps`, then flat ([trainer] lr_schedule; both engines)."""
    if not decay_steps:
        return 1.0
    span = max(1, decay_steps - hold_steps)
    progress = min(max(step - hold_steps, 0) / span, 1.0)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def scale_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / T, upcast to float32: the sampled distribution at rollout temperature T; T <= 0 (greedy): raw."""
    logits = _upcast(logits)
    return logits / temperature if temperature > 0 and temperature != 1.0 else logits


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H_t = -sum_v p_t(v) log p_t(v) of the policy's next-token distribution, [B, T] from logits [B, T, V]."""
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, entropy_coef: float,
                  count: torch.Tensor | float | None = None) -> torch.Tensor:
    """The term to ADD to the loss: -entropy_coef * masked_mean(H_t) (minimising it raises entropy)."""
    return -entropy_coef * masked_mean(entropy, mask, count)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor,
          max_log_ratio: float | None = KL_LOG_RATIO_MAX) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate, Schulman's k3 (always >= 0), on the sampled tokens, log-ratio clamped:

        d_t  = logp_ref_t - logp_t,   d^_t = min(d_t, max_log_ratio)
        k3_t = exp(d^_t) - d^_t - 1,  d(k3_t)/d(logp_t) = 1 - exp(d^_t)   (also where d_t > max_log_ratio)

    The clamp bounds the term where the policy has made a sampled token far less likely than the reference (exp(d)
    explodes there: single tokens measured at ~1e4 inflated Adam's second moment and stalled learning for hundreds
    of steps). It clamps the log-ratio's value but passes its gradient straight through, so those tokens keep the
    bounded gradient of k3 at the clamp; clamping the estimate instead zeroed exactly their gradient. None: no clamp.
    """
    d = ref_logprobs - logprobs
    if max_log_ratio is not None:
        d = d - (d - d.clamp(max=max_log_ratio)).detach()  # value clamped, d(d)/d(logp) = -1 everywhere
    return torch.exp(d) - d - 1.0


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, kl_coef: float,
    count: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The "k3_loss" term to ADD to the loss: kl_coef * masked_mean(k3_t). Returns (weighted term, mean k3)."""
    kl = masked_mean(kl_k3(logprobs, ref_logprobs), mask, count)
    return kl_coef * kl, kl.detach()


def k3_advantage(old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                 kl_coef: float) -> torch.Tensor:
    """The "k3_loss" regulariser as a per-token advantage, for losses without a KL term (Tinker's):

        a_t = kl_coef * (exp(d^_t) - 1),  d^_t = min(logp_ref_t - logp_old_t, KL_LOG_RATIO_MAX)

    A policy-gradient loss -ratio_t * a_t has gradient -a_t w.r.t. logp_t at ratio 1, which is kl_coef * d(k3_t)/
    d(logp_t): the same per-token push as the k3 loss term, relative to the policy-gradient term."""
    d = (ref_logprobs - old_logprobs).clamp(max=KL_LOG_RATIO_MAX)
    return kl_coef * (torch.exp(d) - 1.0) * mask.to(d.dtype)


def kl_rewards(old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
               kl_coef: float) -> torch.Tensor:
    """The "k1_reward" regulariser: per-token reward -kl_coef * (logp_old_t - logp_ref_t), 0 outside the mask."""
    return -kl_coef * (old_logprobs - ref_logprobs) * mask.to(old_logprobs.dtype)


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position: logits [B, T, V], targets [B, T] → [B, T]."""
    logp = torch.log_softmax(_upcast(logits), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                         with_entropy: bool = True, chunk_tokens: int | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of `targets` [B, T] and entropies [B, T] of softmax(logits / T) (`scale_logits`), from logits
    [B, T, V], computed `chunk_tokens` positions at a time.

    Chunked, the float32 log-softmax over the vocabulary exists for one chunk at a time, in the forward pass and,
    recomputed under activation checkpointing, in the backward pass: with a 152k vocabulary a full [B, T, V] float32
    copy is 0.6 MB per token. The values are the unchunked ones exactly."""
    def piece(chunk_logits: torch.Tensor, chunk_targets: torch.Tensor):
        logp = torch.log_softmax(scale_logits(chunk_logits, temperature), dim=-1)
        picked = logp.gather(-1, chunk_targets.unsqueeze(-1)).squeeze(-1)
        if not with_entropy:
            return picked, None
        return picked, -(logp.exp() * logp).sum(dim=-1)

    batch, width = targets.shape
    if not chunk_tokens or batch * width <= chunk_tokens:
        return piece(logits, targets)
    from torch.utils.checkpoint import checkpoint

    flat_logits = logits.reshape(batch * width, logits.shape[-1])
    flat_targets = targets.reshape(batch * width)
    picked, entropy = [], []
    for start in range(0, batch * width, chunk_tokens):
        part = slice(start, start + chunk_tokens)
        lp, h = checkpoint(piece, flat_logits[part], flat_targets[part], use_reentrant=False)
        picked.append(lp)
        entropy.append(h)
    return (torch.cat(picked).reshape(batch, width),
            torch.cat(entropy).reshape(batch, width) if with_entropy else None)


def _upcast(logits: torch.Tensor) -> torch.Tensor:
    # Half-precision softmax loses the small probability differences PPO ratios depend on.
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()

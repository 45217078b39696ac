"""The dry-run's two checks of the trainer/inference contract, against the running inference server, before any step.

- Weight sync round trip: a changed copy of the trainer's policy is pushed the way the training loop pushes (the
  inference client's push_weights: /load_lora_adapter or /update_weights_from_disk); the served log-probs of a fixed
  probe prompt must then be the changed policy's, not the old one's. Then the trainer's own policy is served again
  (the probe adapter unloaded, or the trainer's weights pushed) and checked the same way.
- Log-prob convention: a rollout sampled by the server at the config's temperature and top_p, scored by the trainer's
  engine: the first-pass importance ratio exp(logp_trainer - logp_served) must be 1 within LOGPROB_TOLERANCE (mean
  |log ratio| over the completion tokens). Otherwise the likely cause is named: the temperature convention (the
  served figures fit softmax(logits) at T = 1 better), the tokenizer (the server's text is not the decoded tokens),
  an adapter not applied (they fit the base model), or a different model.

The probe is greedy (temperature 0): SGLang and the built-in server both report log softmax(logits) for greedy
requests, so the round trip does not depend on the temperature convention the second check tests.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_stack.service_defaults import LOGPROB_TOLERANCE

# LOGPROB_TOLERANCE, mean |log ratio| per completion token: float32 measures ~1e-7 on CPU, 6e-6 on an H200; a bf16
# trainer there 0.021-0.029 against a float32 server (service_defaults says why 0.05). HERMES_LOGPROB_TOLERANCE can
# widen it where kernels differ more, up to MIN_MOVE / 2: past that a push that did not reach would pass.
TOLERANCE_ENV = "HERMES_LOGPROB_TOLERANCE"
MIN_MOVE = 0.2  # mean |change| per probe token the pushed change must cause (so "moved" cannot be noise)
PROBE_TOKENS = 8
PROBE_PUSHES = 3  # probe pushes at most, each with a larger change, until the served tokens tell the two apart
ROLLOUT_SAMPLES = 4
ROLLOUT_TOKENS = 16
PROBE_NAME, POLICY_NAME = "dry-run-probe", "dry-run-policy"


class PolicyCheckFailed(Exception):
    """One line: what the check saw, the likely cause and the fix."""

    def __init__(self, layer: str, message: str):
        super().__init__(message)
        self.layer = layer


# ---------------------------------------------------------------- the probe prompt


def probe_prompt(stack: Any, tokenizer: Any) -> list[int]:
    """A prompt as the environment builds it (hermes_stack.tasks: the offline task's format, else the chat prompt
    with the configured system prompt), tokenised with the trainer's tokenizer as atroposlib sends it (input_ids)."""
    from hermes_stack.tasks.prompting import rollout_prompt

    env = stack.config.environment
    question = "12+34" if env.dataset == "offline-arith" else ("Tom has 12 apples and buys 7 more. How many apples "
                                                               "does he have now?")
    text = rollout_prompt(tokenizer, env.dataset, question, env.system_prompt, [])
    return tokenizer.encode(text)


@dataclass(frozen=True)
class Served:
    tokens: list[int]  # the completion
    logprobs: list[float]
    text: str


def served(answer: Any) -> list[Served]:
    """SGLang's /generate answer (one object, or a list for n > 1) -> completions with their log-probs."""
    out = []
    for item in answer if isinstance(answer, list) else [answer]:
        triples = (item.get("meta_info") or {}).get("output_token_logprobs") or []
        out.append(Served([int(t[1]) for t in triples], [float(t[0]) for t in triples], str(item.get("text", ""))))
    return out


def sample(client: Any, prompt: list[int], temperature: float, top_p: float, n: int, tokens: int,
           layer: str) -> list[Served]:
    """n completions with their log-probs; none (no tokens, or no log-probs for them) fails: a check with nothing
    to compare would pass on nothing."""
    params = {"temperature": temperature, "top_p": top_p, "max_new_tokens": tokens, "n": n}
    completions = [c for c in served(client.generate_logprobs(prompt, params)) if c.tokens]
    if not completions:
        raise PolicyCheckFailed(layer, "the inference server returned no completion tokens with log-probs "
                                       "(meta_info.output_token_logprobs) for a /generate request with "
                                       "return_logprob. Hint: the server must answer as SGLang does")
    return completions


def mean_abs(a: list[float], b: list[float]) -> tuple[float, float]:
    """(mean, max) of |a - b| over the pairs (0, 0 when empty)."""
    diffs = [abs(x - y) for x, y in zip(a, b)]
    return (sum(diffs) / len(diffs), max(diffs)) if diffs else (0.0, 0.0)


def _scored(engine: Any, prompt: list[int], completions: list[Served], temperature: float | None = None,
            base: bool = False) -> tuple[list[float], list[float]]:
    """(served log-probs, the engine's for the same tokens), flattened over the completions."""
    rows = engine.sequence_logprobs([prompt + c.tokens for c in completions], temperature, base=base)
    ours, theirs = [], []
    for row, c in zip(rows, completions):
        ours += row[len(prompt) - 1:]
        theirs += c.logprobs
    return theirs, ours


# ---------------------------------------------------------------- weight sync round trip


def _perturbed(engine: Any) -> list[Any]:
    """The tensors the probe changes: every LoRA B matrix (the adapter), or the output head for full weights."""
    if engine.use_lora:
        return [p for name, p in engine.policy.named_parameters() if "lora_B" in name and p.requires_grad]
    return [engine.policy.get_output_embeddings().weight]


def _push(client: Any, engine: Any, directory: Path, name: str) -> str:
    shutil.rmtree(directory, ignore_errors=True)
    engine.export_weights(directory)
    client.push_weights(directory, 0, lora_name=name)
    return "/load_lora_adapter" if (directory / "adapter_config.json").exists() else "/update_weights_from_disk"


def _spread(saved) -> float:
    """A tensor's standard deviation, which sizes the probe's noise on it; 0.02 for a constant or one-element one."""
    value = float(saved.float().std()) if saved.numel() > 1 else 0.0
    return value if value > 0 else 0.02


def check_weight_sync(engine: Any, client: Any, stack: Any, work_dir: Path, resumed: bool,
                      tolerance: float = LOGPROB_TOLERANCE) -> str:
    """The round trip's line, or PolicyCheckFailed. `resumed`: the engine holds a checkpoint (else a fresh LoRA
    adapter is the identity, and unloading the probe restores what was served exactly)."""
    import torch

    started = time.monotonic()
    prompt = probe_prompt(stack, engine.tokenizer)
    room = max(1, min(PROBE_TOKENS, _context(engine) - len(prompt) - 1))
    greedy = lambda: sample(client, prompt, 0.0, 1.0, 1, room, "weight-sync")
    before = greedy()
    tensors = _perturbed(engine)
    saved = [t.detach().to("cpu", copy=True) for t in tensors]
    generator = torch.Generator().manual_seed(1234)
    noise = [torch.randn(t.shape, generator=generator) for t in saved]
    original = _scored(engine, prompt, before, 1.0)[1]

    def restore_tensors() -> None:
        with torch.no_grad():
            for t, s in zip(tensors, saved):
                t.copy_(s.to(t.device, t.dtype))

    # each tensor's own spread sizes its noise (constant: computed once, not at every growth step)
    spreads = [_spread(s) for s in saved]

    def perturb(scale: float) -> None:
        with torch.no_grad():
            for t, s, z, spread in zip(tensors, saved, noise, spreads):
                t.copy_((s + scale * spread * z).to(t.dtype))

    try:
        scale = 0.25
        for _ in range(PROBE_PUSHES):
            for _ in range(10):  # grow the change until the probe moves by MIN_MOVE in the trainer's own copy
                perturb(scale)
                if mean_abs(_scored(engine, prompt, before, 1.0)[1], original)[0] >= MIN_MOVE:
                    break
                scale *= 2
            route = _push(client, engine, work_dir / "probe", PROBE_NAME)
            after = greedy()
            served_now, expected = _scored(engine, prompt, after, 1.0)
            reached = mean_abs(served_now, expected)[0]
            restore_tensors()
            old = mean_abs(served_now, _scored(engine, prompt, after, 1.0)[1])[0]
            if reached > tolerance or old >= MIN_MOVE / 2:
                break
            # The pushed policy chose other tokens than the ones the change was sized on, and on those it barely
            # differs from the old one (a resumed, trained policy: issue 22's clean clone, |pushed - old| 0.053): a
            # larger change, pushed again.
            scale *= 2
    finally:
        restore_tensors()

    def restore() -> str:
        if engine.use_lora and not resumed:
            client.unload_adapter(PROBE_NAME)
            return "the probe adapter unloaded"
        _push(client, engine, work_dir / "policy", POLICY_NAME)
        # The push unloads the probe adapter in the background (SGLang's unload waits for requests holding it); the
        # dry-run exits next, so wait (bounded) for it: the served policy is then the trainer's alone.
        settle = getattr(client, "settle", None)
        if settle is not None:
            settle()
        return "the trainer's weights pushed"

    failure = None
    if reached > tolerance:
        cause = (f"they are still the old policy's (|served - old| {old:.4f})" if old <= tolerance
                 else f"they are neither the pushed policy's nor the old one's (|served - old| {old:.4f})")
        failure = (f"a weight push did not reach the served policy: POST {route} answered success, but the served "
                   f"log-probs of the probe are not the pushed policy's (|served - pushed| {reached:.4f} > "
                   f"{tolerance}); {cause}. Hint: the inference server must serve the newest pushed adapter "
                   "or weights to requests that name none (the inference service's default adapter; with SGLang, "
                   "--enable-lora and a lora_path); `docker compose logs inference`")
    elif old < MIN_MOVE / 2:  # the pushed and the old policy agree on this probe: "reached" would prove nothing
        failure = (f"the probe cannot tell the pushed policy from the old one (|pushed - old| {old:.4f} on the "
                   f"served tokens, at least {MIN_MOVE / 2} needed). Hint: this is the check's own limit, not the "
                   "stack's; report it with the model's name")
    if failure is not None:
        with contextlib.suppress(Exception):  # best effort: leave the trainer's policy served, not the probe
            restore()
        shutil.rmtree(work_dir / "probe", ignore_errors=True)
        raise PolicyCheckFailed("weight-sync", failure)
    restored_by = restore()
    shutil.rmtree(work_dir / "probe", ignore_errors=True)
    final = greedy()
    back = mean_abs(*_scored(engine, prompt, final, 1.0))[0]
    if back > tolerance:
        raise PolicyCheckFailed("weight-sync", (
            f"after the probe push, serving the trainer's policy again ({restored_by}) did not take: "
            f"|served - trainer| {back:.4f} > {tolerance}. Hint: `docker compose restart inference` "
            "serves the newest synced weights; `docker compose logs inference`"))
    return (f"weight sync: a changed policy pushed through POST {route} moved the served log-probs of a "
            f"{len(after[0].tokens)}-token probe by {old:.3f} as the trainer's copy predicts (|served - pushed| "
            f"{reached:.2g}); then the trainer's policy serves again ({restored_by}; |served - trainer| "
            f"{back:.2g}); {time.monotonic() - started:.1f} s")


class FreshTinkerPolicy:
    """The Tinker engine's policy before its first step, for check_logprobs: Tinker's LoRA adapter starts with B = 0,
    so the policy is the base model the local critic holds (frozen, on this machine), and the inference server
    serves that base until the first push. A resumed run's policy lives only on Tinker: not checked then."""

    use_lora = False

    def __init__(self, critic: Any, tokenizer: Any):
        self.critic, self.tokenizer, self.policy = critic, tokenizer, critic.base

    def sequence_logprobs(self, token_lists: list[list[int]], temperature: float | None = None,
                          base: bool = False) -> list[list[float]]:
        return self.critic.sequence_logprobs(token_lists, temperature, base=base)


def _context(engine: Any) -> int:
    return int(getattr(engine.policy.config, "max_position_embeddings", 2048) or 2048)


# ---------------------------------------------------------------- log-prob convention


def check_logprobs(engine: Any, client: Any, stack: Any, tolerance: float = LOGPROB_TOLERANCE) -> str:
    """The convention's line, or PolicyCheckFailed."""
    started = time.monotonic()
    rollout = stack.config.rollout
    temperature, top_p = rollout.temperature, rollout.top_p
    prompt = probe_prompt(stack, engine.tokenizer)
    room = max(1, min(ROLLOUT_TOKENS, rollout.max_token_length - len(prompt) - 1, _context(engine) - len(prompt) - 1))
    completions = sample(client, prompt, temperature, top_p, ROLLOUT_SAMPLES, room, "logprobs")
    theirs, ours = _scored(engine, prompt, completions)
    mean, worst = mean_abs(ours, theirs)
    count = len(theirs)
    figures = (f"mean |log ratio| {mean:.2g}, max {worst:.2g} over {count} tokens of {len(completions)} rollouts "
               f"at temperature {temperature:g}, top_p {top_p:g}")
    at_one = None
    if temperature > 0 and temperature != 1.0:
        at_one = mean_abs(_scored(engine, prompt, completions, 1.0)[1], theirs)[0]
    convention = at_one is not None and (at_one <= tolerance or at_one < mean / 2) and at_one < mean
    if mean <= tolerance and not convention:
        return (f"log-probs: the trainer scores the server's rollouts as it samples them: {figures} "
                f"(tolerance {tolerance}); first-pass ratio 1; {time.monotonic() - started:.1f} s")
    if convention:
        cause = (f"temperature convention: the served log-probs fit softmax(logits) at T = 1 (mean |log ratio| "
                 f"{at_one:.2g}), not softmax(logits / {temperature:g}) the rollouts sample from. Hint: the server "
                 "must report log-probs of the distribution it sampled from (SGLang's default; unset "
                 "SGLANG_RETURN_ORIGINAL_LOGPROB)")
    elif any(engine.tokenizer.decode(c.tokens, skip_special_tokens=True).strip() != c.text.strip()
             for c in completions):
        cause = ("tokenizer: the server's text is not the trainer's decoding of the same token ids. Hint: trainer and "
                 "inference must load the same tokenizer (inference.model_path)")
    elif engine.use_lora and mean_abs(_scored(engine, prompt, completions, base=True)[1], theirs)[0] < mean / 2:
        cause = ("adapter not applied: the served log-probs fit the base model, not the trainer's LoRA adapter. "
                 "Hint: the inference server must apply the newest adapter (SGLang: --enable-lora, lora_path)")
    else:
        cause = ("the served model is not the trainer's: a different model, chat template or weights. Hint: trainer "
                 "and inference must be given the same inference.model_path; after a crash `docker compose restart "
                 "inference` serves the newest synced weights")
    raise PolicyCheckFailed("logprobs", f"the first-pass importance ratio is not 1: {figures} (tolerance "
                                        f"{tolerance}, {TOLERANCE_ENV}); likely cause: {cause}")

"""The Tinker engine: the policy is a LoRA adapter trained on Tinker; critic and reference run locally in torch.

What goes where:
- Tinker (remote): the LoRA policy. One step = `forward_backward(data, "ppo", {clip_low_threshold: 1-eps,
  clip_high_threshold: 1+eps})` (or "importance_sampling"), `optim_step(AdamParams(learning_rate))`. Nothing is
  saved for Tinker's own sampler: the inference service serves the adapter exported below, and every save without a
  TTL is a checkpoint that never expires on the account.
- The adapter leaves the unembedding out (`train_unembed=False`; the SDK's default trains it): SGLang is launched with
  the attention and MLP projections as its LoRA target modules (inference/sglang.py LORA_TARGET_MODULES), and its
  memory pool refuses an adapter with modules beyond them (lora/mem_pool.py `can_support`).
- Local torch (`LocalCritic`, optional): the frozen base model (= the reference policy: LoRA starts at zero) gives
  reference log-probs (of softmax(logits / T), T the rollout temperature, like the behaviour log-probs) for the KL
  and detached hidden states for a value head (PPO's critic, trained here at value_loss_coef x the learning rate).
  Tinker has no value head and its losses have no KL or entropy term, so those enter through the advantages, the
  same regulariser as the torch engine's (trainer/algorithms.py, `[algorithm] kl_penalty`):
      k3_loss:   a_t += kl_coef * (exp(min(logp_ref_t - logp_old_t, c)) - 1)   (the k3 loss term's gradient)
      k1_reward: r_t += -kl_coef * (logp_old_t - logp_ref_t)                    (a per-token reward)
  and the entropy bonus as the per-token reward r_t += entropy_coef * (-logp_old_t) (a one-sample estimate of the
  token entropy: entropy-regularised RL, not silently dropped). Per-token rewards go into GAE (PPO), or add their
  return to go to the group-relative advantage (GRPO).
- Weights for the inference service: `export_weights(dir)` saves the adapter in Hugging Face/peft format on Tinker
  (`save_weights_external`, with the SDK's shortest TTL: the files are downloaded at once) and downloads its files
  into `dir`; the training loop then POSTs /load_lora_adapter.
- Checkpoints: `state_dict` saves "state-<N>" on Tinker (overwriting a save of the same step); `load_state_dict`
  resumes on a new training client built from it (`create_training_client_from_state_with_optimizer`: the SDK
  deprecates TrainingClient.load_state*). `close()` ends the Tinker session.

Fail fast: the key prefix is checked (tml- or a JWT) and TINKER_BASE_URL is probed with a short timeout before the
SDK is asked for anything (the SDK would otherwise retry silently for ~300 s). The SDK's own failures (a refused key,
a request whose future failed on the server, an HTTP error after its retries) become one-line StackErrors, and every
wait on a future is bounded by HERMES_TINKER_TIMEOUT_S (a silent server or a stuck future is one line, not a hang).
Tested with the real SDK over HTTP against tests.fakes.tinker_service.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from hermes_stack.errors import InputError, Problem, StackError
from hermes_stack.modelcore.weights_layout import adapter_problem
from hermes_stack.trainer.engine import IGNORE, Sequence

if TYPE_CHECKING:
    from hermes_stack.config.models import AlgorithmSection

LOSSES = ("ppo", "importance_sampling")
PROBE_PATH = "/api/v1/healthz"
# Every wait on a Tinker future is bounded: the SDK itself polls (and retries a lost connection) for ~300 s or forever.
TIMEOUT_ENV = "HERMES_TINKER_TIMEOUT_S"  # named in messages; read by ServiceEnv.tinker_timeout_s
DEFAULT_TIMEOUT_S = 900.0  # a large batch may queue on Tinker for minutes; a stopped server must still end the run
# An exported adapter is downloaded right after its save; the SDK's shortest TTL (an hour) lets Tinker drop it, where a
# save without one never expires (one a step would pile up on the account).
EXPORT_TTL_S = 3600
T = TypeVar("T")


# ---------------------------------------------------------------- fail fast


def check_key(key: str | None, source: str = ".env.taotoken") -> str:
    if not key:
        raise InputError(Problem(source, "TINKER_API_KEY", "nothing", "a Tinker key (tml-... or a JWT eyJ...)",
                                 "the tinker engine needs a Tinker key; a gateway key cannot be used"))
    if not (key.startswith(("tml-", "eyJ"))):
        shown = key[:3] + "..." if len(key) > 3 else "***"
        raise InputError(Problem(source, "TINKER_API_KEY", f"a key starting {shown!r}", "a key starting tml- or eyJ",
                                 "a gateway key cannot be used as a Tinker key"))
    return key


def resolve_base_url(base_url: str | None = None) -> str:
    from tinker.lib.base_url import resolve_base_url as sdk_resolve

    return sdk_resolve(base_url)


def probe(base_url: str, timeout_s: float = 5.0, transport: httpx.BaseTransport | None = None) -> None:
    """Any HTTP answer means reachable (auth is checked later); no answer within `timeout_s` is a StackError.

    A refused connection is retried until `timeout_s` has passed (a service started alongside the trainer may still
    be binding its port); a silent one uses the whole `timeout_s` once."""
    import time

    url = base_url.rstrip("/") + PROBE_PATH
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=timeout_s, transport=transport) as client:
            while True:
                try:
                    client.get(url)
                    return
                except httpx.ConnectError:
                    if time.monotonic() + 0.25 >= deadline:
                        raise
                    time.sleep(0.25)
    except httpx.HTTPError as exc:
        raise StackError(f"tinker: {base_url} is not reachable ({type(exc).__name__}: {exc or 'no answer'} within "
                         f"{timeout_s:.0f} s). Hint: check TINKER_BASE_URL and the VM's outbound network, or use "
                         "[trainer] engine = \"torch\"") from exc


def _detail(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get("detail"):
        return str(body["detail"])
    return str(getattr(exc, "message", None) or exc)


def sdk_call(what: str, call: Callable[[], T], base_url: str | None = None, timeout_s: float | None = None) -> T:
    """Runs one SDK call (usually a future's `.result(timeout)`); the SDK's failures become one-line StackErrors.

    The key is never part of the message. A failed future poisons the SDK's TrainingClient, hence the resume hint.
    `timeout_s` only names the bound in the message: the call itself must pass it to `.result(timeout=...)`."""
    import tinker

    where = f" at {base_url}" if base_url else ""
    try:
        return call()
    except TimeoutError as exc:  # concurrent.futures.TimeoutError is TimeoutError since Python 3.11
        bound = f" within {timeout_s:g} s" if timeout_s else ""
        raise StackError(f"tinker: {what}: no answer from the Tinker API{where}{bound}. Hint: the service stopped "
                         "answering or is overloaded; restart the trainer to resume from the last checkpoint, or "
                         f"raise {TIMEOUT_ENV}") from exc
    except (tinker.TinkerError, ValueError) as exc:
        # The SDK reports an HTTP error met while polling a future as a ValueError caused by the APIStatusError.
        cause = exc if isinstance(exc, tinker.TinkerError) else exc.__cause__
        if isinstance(cause, (tinker.AuthenticationError, tinker.PermissionDeniedError)):
            raise StackError(f"tinker: the Tinker API{where} refused TINKER_API_KEY during {what} "
                             f"(HTTP {cause.status_code}: {_detail(cause)}). Hint: put a valid key (tml-...) from "
                             "the Tinker console in .env.taotoken as TINKER_API_KEY") from exc
        if isinstance(cause, tinker.RequestFailedError):
            raise StackError(f"tinker: {what} failed on the server ({cause.category}): {cause.message}. Hint: the "
                             "Tinker training client cannot continue after a failed request; restart the trainer "
                             "to resume from the last checkpoint") from exc
        if isinstance(cause, tinker.APIStatusError):
            raise StackError(f"tinker: {what} answered HTTP {cause.status_code}{where}: {_detail(cause)}") from exc
        if isinstance(cause, tinker.APIConnectionError):
            raise StackError(f"tinker: {what}: no connection to the Tinker API{where} ({cause}). Hint: check "
                             "TINKER_BASE_URL and the outbound network") from exc
        raise


# ---------------------------------------------------------------- pure data shaping


@dataclass(frozen=True)
class TokenArrays:
    """One sequence in next-token layout: position t predicts targets[t] = tokens[t+1]."""

    inputs: list[int]
    targets: list[int]
    trained: list[float]  # 1.0 where targets[t] is a completion token, else 0.0
    old_logprobs: list[float]  # sampler logprob of targets[t] (0.0 on prompt positions)


def token_arrays(seq: Sequence) -> TokenArrays:
    if len(seq.tokens) < 2:
        raise ValueError("a sequence needs at least 2 tokens")
    if len(seq.mask) != len(seq.tokens):
        raise ValueError(f"{len(seq.mask)} mask entries for {len(seq.tokens)} tokens")
    if len(seq.logprobs) != len(seq.tokens):
        raise StackError("tinker: a sequence arrived without inference logprobs; the ppo and importance_sampling "
                         "losses need them. Hint: the environment must use server_type \"sglang\" (/generate)")
    trained = [0.0 if m == IGNORE else 1.0 for m in seq.mask[1:]]
    old = [lp if t else 0.0 for lp, t in zip(seq.logprobs[1:], trained)]
    return TokenArrays(list(seq.tokens[:-1]), list(seq.tokens[1:]), trained, [float(v) for v in old])


def build_datum(arrays: TokenArrays, advantages: list[float]):
    """tinker.Datum for the ppo / importance_sampling losses. Prompt positions carry advantage 0: no gradient."""
    from tinker import Datum, ModelInput

    if len(advantages) != len(arrays.targets):
        raise ValueError(f"{len(advantages)} advantages for {len(arrays.targets)} targets")
    masked = [a * t for a, t in zip(advantages, arrays.trained)]
    return Datum(model_input=ModelInput.from_ints(arrays.inputs),
                 loss_fn_inputs={"target_tokens": arrays.targets, "logprobs": arrays.old_logprobs,
                                 "advantages": masked})


def loss_config(loss: str, clip_epsilon: float) -> tuple[str, dict[str, float] | None]:
    if loss == "ppo":
        return "ppo", {"clip_low_threshold": 1.0 - clip_epsilon, "clip_high_threshold": 1.0 + clip_epsilon}
    if loss == "importance_sampling":
        return "importance_sampling", None
    raise InputError(Problem("settings", "tinker loss", repr(loss), " or ".join(LOSSES)))


def token_rewards(arrays: TokenArrays, ref_logprobs: list[float] | None, algo: AlgorithmSection) -> list[float]:
    """Per-token rewards (0 on prompt positions): the entropy bonus, plus the KL as k1 when kl_penalty = k1_reward."""
    out = []
    for t, (old, trained) in enumerate(zip(arrays.old_logprobs, arrays.trained)):
        value = 0.0
        if trained:
            if algo.kl_coef and algo.kl_penalty == "k1_reward":
                value -= algo.kl_coef * (old - ref_logprobs[t])
            if algo.entropy_coef:
                value += algo.entropy_coef * (-old)
        out.append(value)
    return out


# ---------------------------------------------------------------- local critic / reference


class LocalCritic:
    """Frozen base model (reference policy) + a value head on its detached hidden states, trained locally.

    Memory (the trainer's share of the GPU split, config/memory.py; docs/memory.md): the base is loaded in `dtype`
    (bfloat16 on a GPU, float32 on CPU), a batch runs in micro-batches of `micro_batch_size` rows (the split's, as
    the torch engine's), each cut to its own longest row, and the float32 log-softmax over the vocabulary is taken
    `chunk_tokens` positions at a time: never [batch, width, vocabulary] in float32 at once. Hidden states are asked
    for only when there is a value head."""

    def __init__(self, model_path: str, device: str = "cpu", learning_rate: float = 1e-4, with_value_head: bool = True,
                 temperature: float = 1.0, micro_batch_size: int | None = None, dtype: Any = None,
                 chunk_tokens: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM

        from hermes_stack.config.memory import LOGPROB_CHUNK_BYTES

        self.torch = torch
        self.device = device
        self.temperature = temperature  # the rollout temperature: reference log-probs of softmax(logits / T)
        if micro_batch_size is not None and micro_batch_size < 1:
            raise ValueError(f"micro_batch_size {micro_batch_size}: expected >= 1 or None")
        self.micro_batch_size = micro_batch_size
        if dtype is None:
            dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
        self.base = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device).eval()
        for p in self.base.parameters():
            p.requires_grad_(False)
        vocab = int(self.base.config.vocab_size)
        # [chunk, vocabulary] float32 log-softmax and its exp within LOGPROB_CHUNK_BYTES (engine_torch's rule).
        self.chunk_tokens = chunk_tokens or max(1, LOGPROB_CHUNK_BYTES // (2 * 4 * vocab))
        self.head = None
        self.optimizer = None
        if with_value_head:
            try:
                from hermes_stack.trainer.engine_torch import ValueHead
            except ImportError:  # the torch engine's head is preferred; this twin keeps the engine usable alone
                ValueHead = None
            hidden = self.base.config.hidden_size
            self.head = (ValueHead(hidden) if ValueHead else torch.nn.Sequential(
                torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))).to(device)
            self.optimizer = torch.optim.AdamW(self.head.parameters(), lr=learning_rate)

    def _micro_batches(self, count: int) -> list[range]:
        size = self.micro_batch_size or count
        return [range(start, min(start + size, count)) for start in range(0, count, size)]

    def reference_and_hidden(self, arrays: list[TokenArrays]):
        """Reference log-probs of every target (lists, one per sequence) and, with a value head, the last hidden
        states [B, width, hidden] (detached; None without a head)."""
        torch = self.torch
        from hermes_stack.trainer.algorithms import logprobs_and_entropy

        width = max(len(a.inputs) for a in arrays)
        pad = self.base.config.pad_token_id if self.base.config.pad_token_id is not None else 0
        refs: list[list[float]] = []
        hidden = None
        for rows in self._micro_batches(len(arrays)):
            part = [arrays[r] for r in rows]
            w = max(len(a.inputs) for a in part)  # this micro-batch's own width, not the batch's
            ids = torch.full((len(part), w), pad, dtype=torch.long)
            targets = torch.zeros((len(part), w), dtype=torch.long)
            attention = torch.zeros((len(part), w), dtype=torch.long)
            for i, a in enumerate(part):
                ids[i, : len(a.inputs)] = torch.tensor(a.inputs)
                targets[i, : len(a.targets)] = torch.tensor(a.targets)
                attention[i, : len(a.inputs)] = 1
            with torch.no_grad():
                out = self.base(input_ids=ids.to(self.device), attention_mask=attention.to(self.device),
                                output_hidden_states=self.head is not None, use_cache=False)
                picked, _ = logprobs_and_entropy(out.logits, targets.to(self.device), self.temperature,
                                                 with_entropy=False, chunk_tokens=self.chunk_tokens)
            refs += [picked[i, : len(a.targets)].float().tolist() for i, a in enumerate(part)]
            if self.head is not None:
                last = out.hidden_states[-1].detach()
                if hidden is None:
                    hidden = torch.zeros((len(arrays), width, last.shape[-1]), dtype=last.dtype, device=last.device)
                hidden[rows.start:rows.stop, :w] = last
            del out
        return refs, hidden

    def sequence_logprobs(self, token_lists: list[list[int]], temperature: float | None = None,
                          base: bool = False) -> list[list[float]]:
        """Log-probs of tokens[1:] of each list under the frozen base, of softmax(logits / T) (T the rollout
        temperature unless given), one row at a time: TorchEngine.sequence_logprobs' contract, so the dry-run's
        log-prob check can score served rollouts with it while the Tinker policy is still the base (step 0: its LoRA
        B starts at zero). `base` changes nothing: this is the base."""
        torch = self.torch
        from hermes_stack.trainer.algorithms import logprobs_and_entropy

        temperature = self.temperature if temperature is None else temperature
        out = []
        with torch.no_grad():
            for tokens in token_lists:
                ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
                logits = self.base(input_ids=ids, use_cache=False).logits
                picked, _ = logprobs_and_entropy(logits[:, :-1], ids[:, 1:], temperature, with_entropy=False,
                                                 chunk_tokens=self.chunk_tokens)
                out.append(picked[0].float().tolist())
        return out

    def _head_values(self, hidden):
        head_out = self.head(hidden)
        return head_out.squeeze(-1) if head_out.dim() == 3 else head_out

    def values(self, hidden):
        """V for every position of [B, width, hidden], in micro-batches of rows: the float32 head's activations over
        a whole step at once are ~30 GiB for an 8B model's 256 x 2048 (issue 24)."""
        return self.torch.cat([self._head_values(hidden[r.start:r.stop])
                               for r in self._micro_batches(hidden.shape[0])])

    def update(self, hidden, returns, mask, clip_epsilon: float, old_values) -> float:
        """One Adam step on the unweighted value loss (value_loss_coef is in the learning rate: algorithms.py),
        its gradient accumulated over micro-batches of rows: each term is divided by the whole batch's token count,
        so the sum is the full batch's masked mean exactly."""
        from hermes_stack.trainer import algorithms as alg

        count = mask.sum()
        self.optimizer.zero_grad()
        total = 0.0
        for r in self._micro_batches(hidden.shape[0]):
            rows = slice(r.start, r.stop)
            old = None if old_values is None else old_values[rows]
            loss = alg.value_loss(self._head_values(hidden[rows]), returns[rows], mask[rows], 1.0, old, clip_epsilon,
                                  count=count)
            loss.backward()
            total += float(loss.detach())
        self.torch.nn.utils.clip_grad_norm_(self.head.parameters(), 1.0)
        self.optimizer.step()
        return total


# ---------------------------------------------------------------- the engine


class TinkerEngine:
    """hermes_stack.trainer.engine.Engine on Tinker. `service_client` is injectable (tests, shared sessions)."""

    def __init__(self, *, base_model: str, algo: AlgorithmSection, lora_rank: int, learning_rate: float,
                 api_key: str | None = None, base_url: str | None = None, loss: str = "ppo",
                 critic: LocalCritic | None = None, service_client: Any = None, rest_client: Any = None,
                 probe_timeout_s: float = 5.0, probe_transport: httpx.BaseTransport | None = None,
                 download: Callable[[str, Path], None] | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, lr_decay_steps: int | None = None, min_lr_ratio: float = 0.1,
                 lr_hold_steps: int = 0):
        self.algo = algo
        self.lora_rank = lora_rank
        self.learning_rate = learning_rate
        self.lr_decay_steps, self.min_lr_ratio, self.lr_hold_steps = lr_decay_steps, min_lr_ratio, lr_hold_steps
        self.loss_fn, self.loss_fn_config = loss_config(loss, algo.clip_epsilon)
        if (algo.uses_critic or algo.kl_coef > 0) and critic is None:
            need = "a critic (gae)" if algo.uses_critic else f"reference log-probs (kl_coef {algo.kl_coef})"
            raise InputError(Problem("config", "[algorithm]", f"{need} without a local base model",
                                     "a LocalCritic on the same base model", "Tinker has no value head and no KL "
                                     "term: they run locally in torch; give the engine the base model directory"))
        if algo.uses_critic and critic is not None and critic.head is None:
            raise InputError(Problem("config", "[algorithm] advantage_estimator", "gae", "a critic with a value head"))
        self.critic = critic
        self.timeout_s = timeout_s  # the trainer passes HERMES_TINKER_TIMEOUT_S (hermes_stack.service_env)
        self.download = download or _download
        self.step = 0
        self.base_url, self._api_key = base_url, api_key
        if service_client is None:
            self._api_key = check_key(api_key or os.environ.get("TINKER_API_KEY"))
            self.base_url = resolve_base_url(base_url)
            probe(self.base_url, probe_timeout_s, probe_transport)
            import logging

            import tinker

            # "Retrying request ... because of try_again" is the SDK polling a queued future, once per poll: normal
            # on Tinker, and it would bury the trainer's one line per step. Real failures still surface as errors.
            logging.getLogger("tinker.lib.api_future_impl").setLevel(logging.ERROR)
            service_client = tinker.ServiceClient(base_url=self.base_url, api_key=self._api_key)
        self.service_client = service_client
        self._rest_client = rest_client
        # The SDK contacts the server first here (config, session, model); a refused key surfaces at this call.
        self.training_client = self._sdk("creating the LoRA training client", lambda: service_client
                                         .create_lora_training_client(base_model=base_model, rank=lora_rank,
                                                                      train_unembed=False)
                                         .result(timeout=self.timeout_s))

    def _sdk(self, what: str, call: Callable[[], T]) -> T:
        return sdk_call(what, call, self.base_url, self.timeout_s)

    def close(self, status: str = "success") -> None:
        """Ends the Tinker session (stops the SDK's heartbeats); the engine is unusable afterwards."""
        close = getattr(self.service_client, "close", None)
        if close is None:
            return
        try:
            self._sdk("closing the session", lambda: close(status).result(timeout=min(self.timeout_s, 30.0)))
        except StackError:
            self._stop_sdk_threads()
            raise

    def _stop_sdk_threads(self) -> None:
        """A close the server never confirmed leaves the SDK's heartbeat and future pollers running (and logging every
        10 s) for the life of the process: stop them locally. tinker 0.38 keeps them on its client holders (private
        names, hence getattr: a later SDK without them is left as it is)."""
        for name in ("_session_holder", "_rest_holder"):
            holder = getattr(self.service_client, name, None)
            if holder is not None and callable(getattr(holder, "close", None)):
                holder.close()

    # ------------------------------------------------------------------ one step

    def advantages(self, groups: list[list[Sequence]]) -> tuple[list[list[TokenArrays]], list[list[list[float]]],
                                                                   dict[str, float]]:
        """Per-token advantages of every sequence (0 on prompt positions), grouped like `groups`, and metrics."""
        import torch

        from hermes_stack.trainer import algorithms as alg

        algo = self.algo
        arrays = [[token_arrays(s) for s in g] for g in groups]
        flat = [a for g in arrays for a in g]
        refs, hidden = (self.critic.reference_and_hidden(flat) if self.critic is not None else (None, None))
        width = max(len(a.targets) for a in flat)

        def padded(rows: list[list[float]]) -> torch.Tensor:
            out = torch.zeros((len(rows), width), dtype=torch.float32)
            for i, row in enumerate(rows):
                out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
            return out

        mask = padded([a.trained for a in flat])
        old = padded([a.old_logprobs for a in flat])
        rewards = padded([token_rewards(a, r, algo) for a, r in zip(flat, refs or [None] * len(flat))])
        k3 = torch.zeros_like(mask)
        metrics: dict[str, float] = {}
        if refs is not None:
            ref = padded([r[: len(a.targets)] for a, r in zip(flat, refs)])
            metrics["kl"] = float(alg.masked_mean(alg.kl_k3(old, ref), mask))
            if algo.kl_coef and algo.kl_penalty == "k3_loss":
                k3 = alg.k3_advantage(old, ref, mask, algo.kl_coef)
        scores = torch.tensor([s.score for g in groups for s in g], dtype=torch.float32)
        if not algo.uses_critic:
            sequence_adv = torch.cat([alg.group_relative_advantages(
                torch.tensor([s.score for s in g], dtype=torch.float64))
                .float() for g in groups])
            adv = sequence_adv.unsqueeze(1) * mask + alg.discounted_returns(rewards, mask, 1.0) + k3
        else:
            # PPO: token-level GAE over (terminal score + per-token rewards) with the local critic's values.
            mask_h = torch.zeros((len(flat), hidden.shape[1]))
            mask_h[:, :width] = mask
            rewards_h = torch.zeros_like(mask_h)
            rewards_h[:, :width] = rewards
            rewards_h = rewards_h + alg.terminal_rewards(scores, mask_h)
            with torch.no_grad():
                old_values = self.critic.values(hidden).float().cpu()
            gae_adv, returns = alg.gae(rewards_h, old_values, mask_h, algo.gamma, algo.lam)
            adv = alg.whiten(gae_adv, mask_h)[:, :width] + k3
            metrics["value_loss"] = self.critic.update(hidden, returns.to(hidden.device), mask_h.to(hidden.device),
                                                       algo.clip_epsilon, old_values.to(hidden.device))
        flat_adv = [adv[i, : len(a.targets)].tolist() for i, a in enumerate(flat)]
        out, k = [], 0
        for g in arrays:
            out.append(flat_adv[k:k + len(g)])
            k += len(g)
        return arrays, out, metrics

    def current_learning_rate(self) -> float:
        """The rate of the next optimiser step: the schedule on the steps done (restored on resume, as the torch
        engine's)."""
        from hermes_stack.trainer import algorithms as alg

        return self.learning_rate * alg.lr_factor(self.step, self.lr_decay_steps, self.min_lr_ratio,
                                                       self.lr_hold_steps)

    def train_step(self, groups: list[list[Sequence]]) -> dict[str, float]:
        from tinker import AdamParams

        arrays, advs, metrics = self.advantages(groups)
        data = [build_datum(a, adv) for ga, gadv in zip(arrays, advs) for a, adv in zip(ga, gadv)]
        # Submit both before waiting: Tinker pipelines them.
        fb_future = self.training_client.forward_backward(data, self.loss_fn, self.loss_fn_config)
        learning_rate = self.current_learning_rate()
        optim_future = self.training_client.optim_step(AdamParams(learning_rate=learning_rate))
        fb = self._sdk("forward_backward", lambda: fb_future.result(timeout=self.timeout_s))
        optim = self._sdk("optim_step", lambda: optim_future.result(timeout=self.timeout_s))
        self.step += 1
        trained = [t for ga, gadv in zip(arrays, advs) for a, adv in zip(ga, gadv)
                   for t, v in zip(a.trained, adv) if t]
        token_advs = [v for ga, gadv in zip(arrays, advs) for a, adv in zip(ga, gadv)
                      for t, v in zip(a.trained, adv) if t]
        mean = sum(token_advs) / max(len(token_advs), 1)
        scores = [s.score for g in groups for s in g]
        metrics.update({
            "reward_mean": sum(scores) / max(len(scores), 1),
            "advantage_mean": mean,
            "advantage_std": math.sqrt(sum((v - mean) ** 2 for v in token_advs) / max(len(token_advs), 1)),
            "trained_tokens": float(len(trained)),
            "learning_rate": learning_rate,
        })
        for key, value in {**(fb.metrics or {}), **(getattr(optim, "metrics", None) or {})}.items():
            if isinstance(value, (int, float)):
                metrics[f"tinker/{key}"] = float(value)
        return metrics

    # ------------------------------------------------------------------ weights and state

    def export_weights(self, directory: Path) -> Path:
        """The adapter in peft format from Tinker into `directory` (adapter_config.json: /load_lora_adapter)."""
        import tinker

        directory = Path(directory)
        saved = self._sdk("save_weights_external",
                          lambda: self.training_client.save_weights_external(name=f"step-{self.step}",
                                                                             ttl_seconds=EXPORT_TTL_S)
                          .result(timeout=self.timeout_s))
        # Same server and key as the session (a bare RestClient() would read TINKER_BASE_URL/TINKER_API_KEY again).
        rest = self._rest_client or tinker.RestClient(base_url=self.base_url, api_key=self._api_key)
        urls = self._sdk("get_external_weights_urls", lambda: rest.get_external_weights_urls(saved.path)
                         .result(timeout=self.timeout_s)).urls
        for relative, url in urls.items():
            target = (directory / relative).resolve()
            if directory.resolve() not in target.parents:
                raise StackError(f"tinker: refusing to write {relative!r} outside {directory}")
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.download(url, target)
            except httpx.HTTPError as exc:
                raise StackError(f"tinker: downloading {relative} of {saved.path} failed: {type(exc).__name__}: "
                                 f"{exc}") from exc
        # Refused here, named, rather than by SGLang at the push: the export's layout is Tinker's to change.
        if problem := adapter_problem(directory):
            raise StackError(f"tinker: the exported weights {saved.path}: {problem}; the inference server could not "
                             "load them as a LoRA adapter")
        return directory

    def state_dict(self) -> dict[str, Any]:
        # overwrite: a second save at the same step (periodic + final) is the same state, not a conflict.
        saved = self._sdk("save_state",
                          lambda: self.training_client.save_state(name=f"state-{self.step}", overwrite=True)
                          .result(timeout=self.timeout_s))
        state: dict[str, Any] = {"engine": "tinker", "step": self.step, "tinker_state_path": saved.path}
        if self.critic is not None and self.critic.head is not None:
            import copy

            # Copies: a live state_dict shares storage with the head, and the checkpoint is written later.
            state["critic"] = {k: v.detach().clone() for k, v in self.critic.head.state_dict().items()}
            state["critic_optimizer"] = copy.deepcopy(self.critic.optimizer.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("engine") != "tinker":
            raise StackError("tinker: this checkpoint was not written by the tinker engine")
        path = state["tinker_state_path"]
        self.training_client = self._sdk("loading the checkpoint", lambda: self.service_client
                                         .create_training_client_from_state_with_optimizer(path)
                                         .result(timeout=self.timeout_s))
        self.step = int(state["step"])
        if "critic" in state and self.critic is not None and self.critic.head is not None:
            self.critic.head.load_state_dict(state["critic"])
            self.critic.optimizer.load_state_dict(state["critic_optimizer"])


def _download(url: str, target: Path) -> None:
    tmp = target.with_name(target.name + ".part")
    # 60 s without a byte (not for the whole file): a stalled download ends, a large adapter still arrives.
    with httpx.stream("GET", url, timeout=httpx.Timeout(60.0, connect=10.0), follow_redirects=True) as response:
        response.raise_for_status()
        with open(tmp, "wb") as out:
            out.writelines(response.iter_bytes())
    tmp.replace(target)

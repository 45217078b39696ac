"""The trainer's side of the Atropos protocol (atroposlib `run-api`): register, poll /batch, convert groups.

Atropos facts this relies on (atroposlib 0.4.0, api/server.py):
- POST /register initialises the run only the first time; later calls (a restarted trainer) just get a uuid.
- GET /batch answers {"status": "error", "batch": []} before /register, then {"batch": [group, ...] | null}.
  The first /batch after /register is also what lets environments register (/register-env says "wait for trainer
  to start" until then), so the trainer must poll promptly after registering.
- A batch is a list of ScoredData groups totalling exactly `batch_size` sequences (batch_size counts sequences).
- GET /status -> {current_step, queue_size (groups)}; GET /status-env with body {env_id} fails while no
  environment has registered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from hermes_stack.errors import StackError
from hermes_stack.trainer.departures import DepartureWatch
from hermes_stack.trainer.engine import Sequence

# atroposlib's ManagedServer writes 1.0 as the "logprob" of prompt positions (a real logprob is <= 0).
PROMPT_LOGPROB = 1.0
MASKED = -100
DEPARTURE_SAMPLE_S = 2.0  # how often a waiting trainer samples each environment's queued groups,
DEPARTURE_FIRST_S = 5.0   # from this far into a wait (a normal step's wait is shorter: no probing then)


class AtroposError(StackError):
    """Atropos unreachable or answering something the protocol does not allow."""


class NoBatchError(StackError):
    """No batch arrived within the wait budget; the message names the likely cause."""


class AtroposUnavailable(AtroposError):
    """Atropos did not answer (connection refused, timeout, 5xx): it may be restarting."""


class AtroposGone(AtroposError):
    """Atropos stayed unavailable past the outage bound; the trainer checkpoints and stops."""


class AtroposClient:
    def __init__(self, base_url: str, *, timeout_s: float = 10.0, transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)
        self.batch_size: int | None = None
        self._registration: dict[str, Any] | None = None
        self.on_reregister: Callable[[str], None] = print
        # The trainer's own last completed step: a re-registration starts Atropos there (run-api keeps no state).
        self.trainer_step = 0
        self.outage_s = 600.0  # how long to wait for a restarted Atropos before giving up (then checkpoint, stop)
        self.outages = 0
        # Departed environments (departures.py): how long an environment's queued groups may sit unchanged while
        # no batch forms, which env_ids are the stack's own, and where the trainer records what it did.
        self.departure_s = 120.0
        self.own_env_ids: Callable[[], set[int]] = set
        self.on_event: Callable[[str, str, dict[str, Any]], None] = lambda kind, message, fields: None
        self.departures = 0

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------ plain calls

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            try:
                response = self._http.request(method, path, **kwargs)
            except (httpx.ReadError, httpx.RemoteProtocolError):
                if method != "GET":
                    raise
                # run-api closes a kept-alive connection after a 500 (e.g. /status-env for an unknown env): the next
                # request on it is reset. A GET is safe to send once more on a fresh connection.
                response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise AtroposUnavailable(f"atropos: {method} {self.base_url}{path} failed: {type(exc).__name__}: {exc}. "
                                     "Hint: is the atropos service (run-api) up? `docker compose logs atropos`") from exc
        if response.status_code >= 500:
            raise AtroposUnavailable(f"atropos: {method} {path} answered HTTP {response.status_code}: "
                                     f"{response.text[:300]}")
        if response.status_code >= 400:
            raise AtroposError(f"atropos: {method} {path} answered HTTP {response.status_code}: "
                               f"{response.text[:300]}")
        try:
            return response.json()
        except ValueError as exc:
            raise AtroposError(f"atropos: {method} {path} answered non-JSON: {response.text[:200]!r}") from exc

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/status")

    def info(self) -> dict[str, Any]:
        return self._call("GET", "/info")

    def env_registered(self, env_id: int = 0) -> bool:
        """Whether environment `env_id` has registered (atroposlib has no listing route; /status-env 500s)."""
        try:
            response = self._http.request("GET", "/status-env", json={"env_id": env_id})
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def env_queued_groups(self, max_envs: int = 64) -> dict[int, int]:
        """{env_id: groups of that environment in Atropos' queue} for every registered environment. run-api has
        no listing route: /status-env answers for ids 0..n-1 and fails after."""
        found: dict[int, int] = {}
        for env_id in range(max_envs):
            try:
                response = self._http.request("GET", "/status-env", json={"env_id": env_id})
                if response.status_code != 200:
                    break
                found[env_id] = int(response.json().get("self_queue_size") or 0)
            except (httpx.HTTPError, ValueError):
                break
        return found

    def disconnect_env(self, env_id: int) -> None:
        self._call("POST", "/disconnect-env", json={"env_id": int(env_id)})

    def clear_queue_and_reregister(self, attempts: int = 5) -> None:
        """Drop every queued group and register again at the trainer's step. atroposlib has no route that drops one
        environment's groups, only /reset_data (everything); the stack's environment then registers again by
        itself (environment/env.py get_status). A group posted between the reset and /register would stop run-api
        from initialising the run (it checks for a queue): /info tells, and the pair is repeated."""
        assert self._registration is not None
        for _ in range(attempts):
            try:
                self._http.request("GET", "/reset_data")
            except httpx.HTTPError as exc:
                raise AtroposUnavailable(f"atropos: GET /reset_data failed: {exc}") from exc
            self._registration = {**self._registration, "starting_step": int(self.trainer_step)}
            self._call("POST", "/register", json=self._registration)
            if int(self.info().get("batch_size", -1)) == int(self._registration["batch_size"]):
                return
        raise AtroposError(f"atropos: could not register again after clearing the queue ({attempts} attempts): "
                           "groups kept arriving in between")

    def _handle_departures(self, watch: DepartureWatch, now: float, log: Callable[[str], None]) -> bool:
        """Sample the environments; when some stopped sending while no batch formed, disconnect them and clear
        the queue they block. True when it acted."""
        departed = watch.observe(now, self.env_queued_groups(), self.own_env_ids())
        if not departed:
            return False
        try:
            queued = int(self.status().get("queue_size") or 0)
        except AtroposError:
            queued = -1
        for env_id in departed:
            self.disconnect_env(env_id)
        self.clear_queue_and_reregister()
        self.departures += 1
        names = ", ".join(f"environment {env_id} ({count} group(s) queued, unchanged for {quiet:.0f} s)"
                          for env_id, (count, quiet) in sorted(departed.items()))
        message = (f"{names} stopped sending while no batch of {self.batch_size} sequences could form from the "
                   f"{queued} queued group(s); disconnected it (/disconnect-env) and cleared Atropos' queue "
                   f"(/reset_data: atroposlib cannot drop one environment's groups); registered again at step "
                   f"{self.trainer_step}; the stack's environment registers again by itself")
        log(message)
        self.on_event("environment_departed", message,
                      {"env_ids": sorted(departed), "queued_groups": queued, "at_step": self.trainer_step})
        watch.reset()
        return True

    def register(self, *, batch_size_sequences: int, max_token_len: int, checkpoint_dir: str,
                 save_checkpoint_interval: int, starting_step: int, num_steps: int,
                 wandb_group: str | None = None, wandb_project: str | None = None) -> dict[str, Any]:
        payload = {
            "wandb_group": wandb_group or "hermes-stack",
            "wandb_project": wandb_project or "hermes-stack",
            "batch_size": int(batch_size_sequences),
            "max_token_len": int(max_token_len),
            "checkpoint_dir": str(checkpoint_dir),
            "save_checkpoint_interval": int(save_checkpoint_interval),
            "starting_step": int(starting_step),
            "num_steps": int(num_steps),
        }
        answer = self._call("POST", "/register", json=payload)
        if "uuid" not in answer:
            raise AtroposError(f"atropos: /register answered {answer!r}, expected a uuid")
        # A run-api that outlived a previous trainer keeps that trainer's batch size: warn through the caller.
        self.batch_size = int(batch_size_sequences)
        self._registration = payload
        return answer

    def reregister(self) -> None:
        """Register again at the trainer's own step: run-api keeps everything in memory, so a restarted atropos
        service forgot this trainer (the environment re-registers on its own)."""
        assert self._registration is not None
        self._registration = {**self._registration, "starting_step": int(self.trainer_step)}
        self._call("POST", "/register", json=self._registration)
        if int(self.info().get("batch_size", -1)) != int(self._registration["batch_size"]):
            # The environment posted a group to the fresh run-api before this /register: run-api then skips
            # initialising the run (it checks for a queue) and answers every /batch "not registered". Clear it.
            self.clear_queue_and_reregister()
        self.on_reregister(f"atropos: registered again at step {self.trainer_step} "
                           f"(batch {self._registration['batch_size']} sequences); training continues")

    def ride_out(self, cause: AtroposError, should_stop: Callable[[], bool] = lambda: False,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> bool:
        """Atropos stopped answering: wait for it (bounded by `outage_s`), keeping the weights and optimiser in
        memory, then register again at the trainer's step. False when a stop was requested meanwhile; raises
        AtroposGone when the bound passes."""
        self.outages += 1
        started = clock()
        self.on_reregister(f"atropos unreachable ({cause}); waiting up to {self.outage_s:.0f} s for it to come "
                           f"back, keeping the model and optimiser in memory at step {self.trainer_step}")
        next_note = started + 30.0
        while True:
            if should_stop():
                return False
            try:
                self.status()
                break
            except AtroposUnavailable as exc:
                now = clock()
                if now - started >= self.outage_s:
                    raise AtroposGone(f"atropos did not come back within {self.outage_s:.0f} s ({exc})") from None
                if now >= next_note:
                    self.on_reregister(f"still waiting for atropos: {now - started:.0f} s of {self.outage_s:.0f} s")
                    next_note = now + 30.0
                sleep(0.5)
        if self._registration is not None:
            self.reregister()
        down_s = clock() - started
        self.on_reregister(f"atropos back after {down_s:.1f} s")
        self.on_event("atropos_restarted", f"atropos was unreachable for {down_s:.0f} s; the trainer kept its model "
                      f"and registered again at step {self.trainer_step}", {"at_step": self.trainer_step})
        return True

    def poll_batch(self) -> list[dict[str, Any]] | None:
        """One GET /batch: the list of groups, or None when no full batch is queued yet."""
        answer = self._call("GET", "/batch")
        if answer.get("status") == "error" and self._registration is not None:
            # run-api keeps everything in memory: a restarted atropos service forgot us. Register again at our own
            # step and keep polling rather than dying.
            self.on_reregister("atropos forgot this trainer (restarted?)")
            self.reregister()
            return None
        if answer.get("status") == "error":
            raise AtroposError(f"atropos: /batch: {answer.get('message')}. Hint: the trainer must /register first "
                               "(a restarted atropos service forgets every registration)")
        batch = answer.get("batch")
        if batch is None:
            return None
        if not isinstance(batch, list):
            raise AtroposError(f"atropos: /batch answered batch={type(batch).__name__}, expected a list of groups")
        return batch

    # ------------------------------------------------------------ waiting

    def get_batch(self, *, timeout_s: float = 600.0, first_wait_s: float = 0.05, max_wait_s: float = 0.25,
                  progress_every_s: float = 30.0, should_stop: Callable[[], bool] = lambda: False,
                  log: Callable[[str], None] = print,
                  inference_ok: Callable[[], bool] | None = None) -> list[dict[str, Any]] | None:
        """Poll /batch with exponential backoff until a batch arrives. Returns None when `should_stop()` turns
        true; raises NoBatchError naming the likely cause after `timeout_s` without data.

        The backoff stops at 0.25 s: a batch usually lands 1-3 s into the wait, and a 2 s cap made the trainer
        sleep past it by ~1 s a step on average (a 4.2 s step on CPU). A GET /batch that finds nothing is cheap."""
        start = time.monotonic()
        wait = first_wait_s
        next_progress = start + progress_every_s
        watch = DepartureWatch(self.departure_s)
        next_sample = start + DEPARTURE_FIRST_S
        while True:
            try:
                batch = self.poll_batch()
            except AtroposUnavailable as exc:
                if not self.ride_out(exc, should_stop):
                    return None
                start = time.monotonic()  # the outage does not count against the batch wait
                next_progress, next_sample = start + progress_every_s, start + DEPARTURE_FIRST_S
                watch.reset()
                continue
            if batch is not None:
                return batch
            now = time.monotonic()
            if now >= next_sample and self._registration is not None:
                next_sample = now + DEPARTURE_SAMPLE_S
                try:
                    acted = self._handle_departures(watch, now, log)
                except AtroposUnavailable as exc:
                    if not self.ride_out(exc, should_stop):
                        return None
                    acted = True
                if acted:
                    start = now = time.monotonic()  # a fresh wait: the blocked queue is gone
                    next_progress, next_sample = now + progress_every_s, now + DEPARTURE_FIRST_S
                    watch.reset()
                    continue
            if now - start >= timeout_s:
                raise NoBatchError(self.diagnose(now - start, inference_ok))
            if now >= next_progress:
                log(f"waiting for a batch: {now - start:.0f} s so far; {self.describe_queue()}")
                next_progress = now + progress_every_s
            deadline = min(now + wait, start + timeout_s)
            while time.monotonic() < deadline:
                if should_stop():
                    return None
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if should_stop():
                return None
            wait = min(wait * 2, max_wait_s)

    def describe_queue(self) -> str:
        try:
            status = self.status()
        except AtroposError as exc:
            return str(exc)
        return (f"atropos step {status.get('current_step')}, {status.get('queue_size')} group(s) queued, "
                f"a batch needs {self.batch_size} sequence(s)")

    def diagnose(self, waited_s: float, inference_ok: Callable[[], bool] | None = None) -> str:
        """One line: what the trainer waited for and the most likely reason nothing came."""
        head = f"no batch from atropos in {waited_s:.0f} s"
        try:
            status = self.status()
        except AtroposError as exc:
            return f"{head}: {exc}"
        queued = int(status.get("queue_size") or 0)
        if not self.env_registered(0):
            return (f"{head}: no environment has registered with atropos. Hint: is the environment service running? "
                    "`docker compose logs environment` (it registers only after the trainer's first /batch; a "
                    "missing wandb_name makes /register-env fail with 422)")
        if queued > 0:
            return (f"{head}: {queued} group(s) queued but a batch needs {self.batch_size} sequence(s). Hint: the "
                    "environment is slow, or its group_size does not divide the trainer's batch (batch_size = "
                    "[rollout] batch_size x group_size)")
        if inference_ok is not None and not inference_ok():
            return (f"{head}: the environment registered but sends nothing, and the inference service does not "
                    "answer. Hint: `docker compose logs inference`")
        return (f"{head}: the environment registered but no scored group reached atropos. Likely cause: every group "
                "was dropped because all its scores were equal (ensure_scores_are_not_same; always the case with "
                "group_size 1, or when the model fails every prompt), or the environment cannot reach inference. "
                "Hint: `docker compose logs environment`")


# ---------------------------------------------------------------- conversion (pure)


def _aligned_logprobs(tokens: list[int], mask: list[int], logprobs: list[float] | None) -> list[float]:
    """Inference logprobs aligned with `tokens`; prompt positions carry PROMPT_LOGPROB.

    atroposlib's ManagedServer already aligns them (prompt positions = 1.0). Environments that send only the
    completion's logprobs get them right-aligned; absent logprobs give [] (the engine recomputes old logprobs).
    """
    if not logprobs:
        return []
    n = len(tokens)
    if len(logprobs) == n:
        return [float(x) for x in logprobs]
    trained = sum(1 for m in mask if m != MASKED)
    if len(logprobs) == trained < n:
        return [PROMPT_LOGPROB] * (n - len(logprobs)) + [float(x) for x in logprobs]
    raise AtroposError(f"atropos: a sequence has {n} tokens but {len(logprobs)} inference logprobs "
                       f"({trained} trained positions); cannot align them")


def groups_from_batch(batch: list[dict[str, Any]], max_len: int | None = None) -> list[list[Sequence]]:
    """Atropos batch (ScoredData groups) -> one list of engine Sequences per prompt group.

    `max_len` (tinker.max_token_trainer_length) cuts longer sequences at that many tokens. Atropos environments
    already drop groups at or above the registered max_token_len, so this only guards against ones that do not.
    """
    groups: list[list[Sequence]] = []
    for g, item in enumerate(batch):
        tokens, masks, scores = item.get("tokens"), item.get("masks"), item.get("scores")
        if not (isinstance(tokens, list) and isinstance(masks, list) and isinstance(scores, list)):
            raise AtroposError(f"atropos: batch group {g} lacks tokens/masks/scores")
        if not (len(tokens) == len(masks) == len(scores)):
            raise AtroposError(f"atropos: batch group {g}: {len(tokens)} token lists, {len(masks)} masks, "
                               f"{len(scores)} scores; expected equal counts")
        all_logprobs = item.get("inference_logprobs") or [None] * len(tokens)
        group = []
        for i, (toks, mask, score) in enumerate(zip(tokens, masks, scores)):
            if len(toks) != len(mask):
                raise AtroposError(f"atropos: batch group {g} sequence {i}: {len(toks)} tokens but "
                                   f"{len(mask)} mask entries")
            lp = _aligned_logprobs(toks, mask, all_logprobs[i] if i < len(all_logprobs) else None)
            cut = len(toks) if max_len is None else max_len
            group.append(Sequence(tokens=[int(t) for t in toks[:cut]], mask=[int(m) for m in mask[:cut]],
                                  score=float(score), logprobs=lp[:cut]))
        groups.append(group)
    return groups

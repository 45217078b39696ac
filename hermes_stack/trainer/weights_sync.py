"""Policy weights -> inference service, the same code for both backends (SGLang and the built-in one).

After each optimisation step the policy is written to `<data>/weights/step-<N>` (temp dir + rename, so the
inference service never reads a half-written directory) and announced with SGLang's own routes:
`POST /update_weights_from_disk {"model_path"}` for full weights, `POST /load_lora_adapter {"lora_name",
"lora_path"}` when the export is a peft adapter (it holds adapter_config.json). The folder layout, which the
inference service reads too, is hermes_stack.modelcore.weights_layout.

SGLang's semantics, which both backends' front follows (hermes_stack/inference/sglang.py):
- a name is loaded once: SGLang answers 400 "... because it is already loaded" for a second load of it
  (python/sglang/srt/lora/lora_manager.py `validate_new_adapter`). A push is idempotent: that answer means the name is
  served, which is what the push wanted (after a restart the inference front loads `step-<N>` itself);
- an unload waits until no request holds the adapter (managers/tokenizer_control_mixin.py
  `_unload_lora_adapter_locked`), which can outlast this client's timeout: unloads run in the background;
- readiness is `/health`'s `ready`, not its status code: our front answers 200 while SGLang still loads.

With N replicas (`make up REPLICAS=N`) generation goes through SGLang's router and the weights go past it, to each
replica's own URL (HERMES_INFERENCE_REPLICA_URLS), as prime-rl pushes to each server's admin URL: the router routes
generation only (it answers 404 to /update_weights_from_disk). A push counts only when every replica that answers
has loaded it; a replica that does not answer is skipped and loads the newest `step-<N>` itself when it starts
(hermes_stack/inference/server.py `load_newest_weights`), before the router's health check lets traffic reach it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from hermes_stack.errors import StackError
from hermes_stack.health import server_root as inference_root  # SGLang's native routes live at the root


class InferenceError(StackError):
    """The inference service is unreachable, refuses the key, or rejected a weight update."""


def key_mismatch_hint(algo: str | None) -> str:
    """The hint for a refused internal key. The usual cause: containers started with an older key (.hermes/ deleted, or
    the key file's line changed, while they existed) that an `up` did not recreate (one from before the secrets'
    digest label, or a hand-typed `docker compose up`); a fresh start gives every service the same one. The
    commands name this run's algorithm: with .hermes/ gone, a bare `make down` would take grpo's stack."""
    flag = f" ALGO={algo}" if algo in ("grpo", "ppo") else ""
    return (f"trainer and inference must get the same HERMES_INFERENCE_KEY; if the key changed while the containers "
            f"existed (.hermes/ deleted, the key file edited), `make down{flag}` then `make up{flag}` starts every "
            "service with the new one")


class InferenceKeyRefused(InferenceError):
    """HTTP 401/403 from inference: a wrong key does not get better by waiting. Its own type, not a word in the
    message: a restarting server's "[Errno 111] Connection refused" must be ridden out, not taken for it."""


class InferenceUnreachable(InferenceError):
    """No HTTP answer at all (refused, reset, timed out): the server is down or restarting. Its own type, so a
    replica that answered and refused a push is never taken for one that is merely away."""


class InferenceClient:
    def __init__(self, url: str, api_key: str | None, *, timeout_s: float = 60.0,
                 transport: httpx.BaseTransport | None = None, replica_urls: tuple[str, ...] = (),
                 algo: str | None = None):
        self.root = inference_root(url)
        self.algo = algo  # named in a refused key's hint (key_mismatch_hint)
        # Behind the router: one client per replica for the weight routes (none: `url` is the one server).
        self.replicas = tuple(InferenceClient(u, api_key, timeout_s=timeout_s, transport=transport, algo=algo)
                              for u in replica_urls)
        self.last_sync: dict[str, str] = {}  # replica root -> "loaded" or why it was skipped, for the step's log
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.root, headers=headers, timeout=timeout_s, transport=transport)
        self._adapter: str | None = None  # the LoRA adapter this client loaded last
        self._headers, self._transport = headers, transport
        # From the front's /health when it was last seen ready: how long its backend took to start, and its limit.
        self.start_s: float | None = None
        self.start_timeout_s: float | None = None
        self._unloads: list[threading.Thread] = []

    def close(self) -> None:
        self._http.close()
        for replica in self.replicas:
            replica.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise InferenceUnreachable(f"inference: {method} {self.root}{path} failed: {type(exc).__name__}: {exc}. "
                                 "Hint: `docker compose logs inference`") from exc
        if response.status_code in (401, 403):
            raise InferenceKeyRefused(f"inference: {method} {path} answered HTTP {response.status_code}: the internal key "
                                      f"was refused. Hint: {key_mismatch_hint(self.algo)}")
        return response

    def health(self) -> bool:
        """Liveness: the front answers (it may still be loading the model)."""
        try:
            return self._http.get("/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def ready(self) -> bool:
        """Readiness: the front answers AND its backend can serve (`ready` in /health; a server without the field
        counts as ready when it answers 200). Remembers the start figures for the restart ride-out bound."""
        try:
            response = self._http.get("/health", timeout=5.0)
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        try:
            body = response.json()
        except ValueError:
            return True
        if not isinstance(body, dict):
            return True
        ready = body.get("ready", True) is not False
        # The limit is configuration (known while loading); the start time is measured (known once started).
        for key in ("start_s", "start_timeout_s") if ready else ("start_timeout_s",):
            if isinstance(body.get(key), (int, float)) and not isinstance(body.get(key), bool):
                setattr(self, key, float(body[key]))
        return ready

    def restart_bound_s(self, floor_s: float) -> float:
        """How long a restarting inference service is waited for: its backend's own start time (measured when it
        last started, doubled, plus a minute for the container itself), never past its start limit (the front gives
        up there), never under `floor_s`. Without figures: the start limit, else `floor_s`."""
        bound = floor_s
        if self.start_s is not None:
            expected = 2.0 * self.start_s + 60.0
            if self.start_timeout_s is not None:
                expected = min(expected, self.start_timeout_s + 60.0)
            bound = max(bound, expected)
        elif self.start_timeout_s is not None:
            bound = max(bound, self.start_timeout_s + 60.0)
        return bound

    def models(self) -> list[str]:
        if self.replicas:  # the router lists its own model id ("unknown"), not the replicas' served name
            return self.replicas[0].models()
        response = self._call("GET", "/v1/models")
        if response.status_code != 200:
            raise InferenceError(f"inference: GET /v1/models answered HTTP {response.status_code}: "
                                 f"{response.text[:200]}")
        return [str(m.get("id")) for m in response.json().get("data", [])]

    def generate_one_token(self, prompt: str = "1+1=") -> dict[str, Any]:
        """One greedy token through SGLang's native /generate — the route atroposlib's sglang client uses."""
        sampling = {"max_new_tokens": 1, "temperature": 0.0}
        response = self._call("POST", "/generate", json={"text": prompt, "sampling_params": sampling})
        if response.status_code in (400, 422):
            # A backend that only takes token ids (as atroposlib sends them).
            response = self._call("POST", "/generate", json={"input_ids": [1, 2], "sampling_params": sampling,
                                                             "return_logprob": True})
        if response.status_code != 200:
            raise InferenceError(f"inference: POST /generate answered HTTP {response.status_code}: "
                                 f"{response.text[:200]}")
        return response.json()

    def generate_logprobs(self, input_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        """One /generate of token ids with their log-probs, as atroposlib's sglang client asks for rollouts (the
        dry-run's checks, hermes_stack.trainer.policy_checks)."""
        response = self._call("POST", "/generate", json={"input_ids": input_ids, "sampling_params": sampling_params,
                                                         "return_logprob": True})
        if response.status_code != 200:
            raise InferenceError(f"inference: POST /generate answered HTTP {response.status_code}: "
                                 f"{response.text[:200]}")
        return response.json()

    def unload_adapter(self, name: str) -> None:
        """Unload a LoRA adapter this client loaded (the dry-run's probe); from every replica behind a router."""
        if self.replicas:
            for replica in self.replicas:
                replica.unload_adapter(name)
            return
        response = self._call("POST", "/unload_lora_adapter", json={"lora_name": name})
        if response.status_code != 200:
            raise InferenceError(f"inference: POST /unload_lora_adapter {name} answered HTTP {response.status_code}: "
                                 f"{response.text[:200]}")
        if self._adapter == name:
            self._adapter = None

    def push_weights(self, directory: Path, step: int, *, lora_name: str | None = None) -> dict[str, Any]:
        """Tell the inference service to serve `directory` (full weights or a LoRA adapter, named `step-<step>`
        unless `lora_name` says otherwise). Behind a router: every replica that answers, or InferenceError."""
        if self.replicas:
            return self._push_to_replicas(directory, step, lora_name)
        if (directory / "adapter_config.json").exists():
            path, payload = "/load_lora_adapter", {"lora_name": lora_name or f"step-{step}",
                                                   "lora_path": str(directory)}
        else:
            path, payload = "/update_weights_from_disk", {"model_path": str(directory)}
        response = self._call("POST", path, json=payload)
        body: dict[str, Any] = {}
        try:
            body = response.json()
        except ValueError:
            pass
        # SGLang answers 200 {"success": bool, "message": str}; 400 with success false on a bad path.
        message = str(body.get("message") or body.get("error_message") or "")
        if path == "/load_lora_adapter" and "already loaded" in message:
            self._unload_previous(payload["lora_name"])
            return {"success": True, "message": message}  # idempotent: the name is served
        if response.status_code != 200 or body.get("success") is False:
            raise InferenceError(f"inference: POST {path} for {directory} answered HTTP {response.status_code}: "
                                 f"{body.get('message') or response.text[:200]}")
        if path == "/load_lora_adapter":
            self._unload_previous(payload["lora_name"])
        return body

    def _push_to_replicas(self, directory: Path, step: int, lora_name: str | None) -> dict[str, Any]:
        """Synced = every replica that answers has loaded it. One that refuses the push fails the step (its weights
        would differ from the others'); one that does not answer (down, restarting) is skipped: it loads the newest
        weights itself before it serves again. None answering is an InferenceError, ridden out like one server's."""
        self.last_sync, loaded, unreachable = {}, [], []
        for replica in self.replicas:
            try:
                replica.push_weights(directory, step, lora_name=lora_name)
            except InferenceUnreachable as exc:
                unreachable.append(f"{replica.root} ({exc})")
                self.last_sync[replica.root] = "unreachable: loads the newest weights when it returns"
                continue
            loaded.append(replica.root)
            self.last_sync[replica.root] = "loaded"
        if not loaded:
            raise InferenceError(f"inference: no replica answered the push of {directory.name}: "
                                 + "; ".join(unreachable))
        return {"success": True, "loaded": loaded, "skipped": [u.split(" ")[0] for u in unreachable]}

    def _unload_previous(self, current: str) -> None:
        """Adapters stay loaded until unloaded (SGLang and the built-in server alike): one per step would pile up
        (a rank-8 adapter of SmolLM2-135M is ~10 MB; 200 steps, 2 GB). The new one serves first, then the one this
        client loaded before goes, in a background thread: SGLang's unload waits for every request holding that
        adapter, and the trainer must not. A refusal is not fatal: the next load tries again with its own
        predecessor."""
        previous, self._adapter = self._adapter, current
        if previous is None or previous == current:
            return
        self._unloads = [t for t in self._unloads if t.is_alive()]
        thread = threading.Thread(target=self._unload, args=(previous,), name=f"unload-{previous}", daemon=True)
        self._unloads.append(thread)
        thread.start()

    def settle(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for the background unloads started so far; for tests and a tidy close."""
        for thread in self._unloads:
            thread.join(timeout_s)

    def _unload(self, name: str, timeout_s: float = 1800.0) -> None:
        # Its own client: httpx clients are not shared across threads mid-request, and this one may wait long.
        try:
            with httpx.Client(base_url=self.root, headers=self._headers, timeout=timeout_s,
                              transport=self._transport) as http:
                http.post("/unload_lora_adapter", json={"lora_name": name})
        except httpx.HTTPError:
            pass

"""Policy weights -> inference service, the same code for both backends (SGLang and the built-in one).

After each optimisation step the policy is written to `<data>/weights/step-<N>` (temp dir + rename, so the
inference service never reads a half-written directory) and announced with SGLang's own routes:
`POST /update_weights_from_disk {"model_path"}` for full weights, `POST /load_lora_adapter {"lora_name",
"lora_path"}` when the export is a peft adapter (it holds adapter_config.json). The folder layout, which the
inference service reads too, is hermes_stack.modelcore.weights_layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from hermes_stack.errors import StackError
from hermes_stack.health import server_root as inference_root  # SGLang's native routes live at the root


class InferenceError(StackError):
    """The inference service is unreachable, refuses the key, or rejected a weight update."""


class InferenceClient:
    def __init__(self, url: str, api_key: str | None, *, timeout_s: float = 60.0,
                 transport: httpx.BaseTransport | None = None):
        self.root = inference_root(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.root, headers=headers, timeout=timeout_s, transport=transport)
        self._adapter: str | None = None  # the LoRA adapter this client loaded last

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise InferenceError(f"inference: {method} {self.root}{path} failed: {type(exc).__name__}: {exc}. "
                                 "Hint: `docker compose logs inference`") from exc
        if response.status_code in (401, 403):
            raise InferenceError(f"inference: {method} {path} answered HTTP {response.status_code}: the internal key "
                                 "was refused. Hint: trainer and inference must get the same HERMES_INFERENCE_KEY")
        return response

    def health(self) -> bool:
        try:
            return self._http.get("/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def models(self) -> list[str]:
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
        """Unload a LoRA adapter this client loaded (the dry-run's probe)."""
        response = self._call("POST", "/unload_lora_adapter", json={"lora_name": name})
        if response.status_code != 200:
            raise InferenceError(f"inference: POST /unload_lora_adapter {name} answered HTTP {response.status_code}: "
                                 f"{response.text[:200]}")
        if self._adapter == name:
            self._adapter = None

    def push_weights(self, directory: Path, step: int, *, lora_name: str | None = None) -> dict[str, Any]:
        """Tell the inference service to serve `directory` (full weights or a LoRA adapter, named `step-<step>`
        unless `lora_name` says otherwise)."""
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
        if response.status_code != 200 or body.get("success") is False:
            raise InferenceError(f"inference: POST {path} for {directory} answered HTTP {response.status_code}: "
                                 f"{body.get('message') or response.text[:200]}")
        if path == "/load_lora_adapter":
            self._unload_previous(payload["lora_name"])
        return body

    def _unload_previous(self, current: str) -> None:
        """Adapters stay loaded until unloaded (SGLang and the built-in server alike): one per step would pile up
        (a rank-8 adapter of SmolLM2-135M is ~10 MB; 200 steps, 2 GB). The new one serves first, then the one this
        client loaded before goes. A refusal is not fatal: the next load tries again with its own predecessor."""
        previous, self._adapter = self._adapter, current
        if previous is None or previous == current:
            return
        try:
            self._call("POST", "/unload_lora_adapter", json={"lora_name": previous})
        except InferenceError:
            pass

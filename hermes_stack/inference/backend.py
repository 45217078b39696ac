"""The small interface both inference backends implement, and the result type of one generated sequence.

The FastAPI front (server.py) owns auth and routing; a backend answers the SGLang-shaped and OpenAI-shaped
request bodies. `builtin` computes the answers itself; `sglang` forwards them to a supervised SGLang child.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Generated:
    """One sampled continuation. `logprobs[i]` is log p(output_ids[i]) under softmax(logits / temperature), the
    distribution sampled from, untruncated by top-p/top-k (raw logits when greedy), as SGLang reports
    `output_token_logprobs` by default: the behaviour log-probs the trainer's ratio compares against.
    """

    prompt_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: dict[str, Any]  # {"type": "stop", "matched": ...} | {"type": "length", "length": N}
    # Per output position, the most likely (token id, log-prob) pairs, when the request asked for top_logprobs.
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = field(default=())


class BackendReply(Exception):
    """A backend's non-200 answer (status + JSON body), passed through the front unchanged."""

    def __init__(self, status: int, body: Any):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body


class Backend(Protocol):
    name: str
    served_model: str

    def is_ready(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def generate(self, body: dict[str, Any]) -> Any: ...

    async def completions(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def chat_completions(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def update_weights_from_disk(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def load_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def unload_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def health_generate(self) -> bool: ...

    def model_info(self) -> dict[str, Any]: ...

    def models(self) -> list[str]: ...


def exit_process(reason: str) -> None:
    """A backend whose model is gone (SGLang's child, the built-in sampler's process) ends the service."""
    logging.getLogger("hermes.inference").error("inference: %s; exiting so the container restarts", reason)
    # os._exit: uvicorn would otherwise keep serving a front with no backend behind it.
    os._exit(1)

"""Sampling parameters as SGLang's /generate and the OpenAI routes spell them, parsed into one frozen type.

Pure functions only: request dicts in, `SamplingParams` out; `RequestError` (HTTP 400) for bad values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class RequestError(ValueError):
    """A client sent a request we cannot serve: answered with HTTP 400 and this message."""


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k cut (SGLang's spelling)
    n: int = 1
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    # How many most likely tokens to report per position (SGLang's top_logprobs_num; OpenAI's top_logprobs, or the
    # completions route's integer `logprobs`). Not a sampling parameter upstream, carried here per row.
    top_logprobs: int = 0
    # Keys we received but do not implement (penalties, regex, json_schema...): reported, never applied silently.
    ignored: tuple[str, ...] = field(default=(), compare=False)


# Keys accepted and ignored without changing the result (they only affect things we do not compute).
_HARMLESS = {"spaces_between_special_tokens", "no_stop_trim", "logprobs", "model", "sampling_seed", "seed"}
_KNOWN = {"max_new_tokens", "temperature", "top_p", "top_k", "n", "stop", "stop_token_ids", "ignore_eos",
          "skip_special_tokens", "top_logprobs"}
MAX_TOP_LOGPROBS = 20  # OpenAI's limit for chat top_logprobs


def _number(params: dict[str, Any], key: str, default: float, low: float, high: float | None = None) -> float:
    value = params.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"sampling_params.{key}: found {value!r}, expected a number")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise RequestError(f"sampling_params.{key}: found {value!r}, expected {bound}")
    return float(value)


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(s for s in value if s)
    raise RequestError(f"stop: found {value!r}, expected a string or a list of strings")


def parse_sampling_params(params: dict[str, Any] | None) -> SamplingParams:
    """SGLang `sampling_params` dict -> SamplingParams. Unknown keys are kept in `ignored` (logged by the caller)."""
    params = dict(params or {})
    stop_ids = params.get("stop_token_ids") or []
    if not (isinstance(stop_ids, list) and all(isinstance(i, int) for i in stop_ids)):
        raise RequestError(f"sampling_params.stop_token_ids: found {stop_ids!r}, expected a list of token ids")
    top_k = params.get("top_k", -1)
    if top_k is None:
        top_k = -1
    if isinstance(top_k, bool) or not isinstance(top_k, int) or (top_k < 1 and top_k != -1):
        raise RequestError(f"sampling_params.top_k: found {top_k!r}, expected -1 or an integer >= 1")
    max_new = params.get("max_new_tokens", 128)
    if max_new is None:
        max_new = 128
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 0:
        raise RequestError(f"sampling_params.max_new_tokens: found {max_new!r}, expected an integer >= 0")
    # n = 0 is refused, not read as 1: SGLang fans a request out into `n` samples as given
    # (srt/managers/io_struct.py, GenerateReqInput._handle_parallel_sampling) and OpenAI's schema has minimum 1.
    n = params.get("n", 1)
    if n is None:
        n = 1
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > 1024:
        raise RequestError(f"sampling_params.n: found {n!r}, expected an integer in [1, 1024]")
    top = params.get("top_logprobs") or 0
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise RequestError(f"top_logprobs: found {top!r}, expected an integer in [0, {MAX_TOP_LOGPROBS}]")
    ignored = tuple(sorted(k for k in params if k not in _KNOWN and k not in _HARMLESS and params[k] is not None))
    return SamplingParams(
        max_new_tokens=max_new,
        temperature=_number(params, "temperature", 1.0, 0.0),
        top_p=_number(params, "top_p", 1.0, 1e-9, 1.0),
        top_k=top_k,
        n=n,
        stop=_stops(params.get("stop")),
        stop_token_ids=tuple(stop_ids),
        ignore_eos=bool(params.get("ignore_eos", False)),
        skip_special_tokens=bool(params.get("skip_special_tokens", True)),
        top_logprobs=top,
        ignored=ignored,
    )


def openai_sampling_params(body: dict[str, Any], default_max_tokens: int, context: int | None = None,
                           top_logprobs: int = 0) -> SamplingParams:
    """OpenAI completions/chat body -> SamplingParams (max_tokens / max_completion_tokens -> max_new_tokens).

    max_tokens as SGLang validates it: a positive integer (entrypoints/openai/protocol.py,
    CompletionRequest.validate_max_tokens_positive: "max_tokens must be positive"), at most the model's context
    (entrypoints/openai/serving_chat.py, OpenAIServingChat._validate_request: "max_completion_tokens is too large")."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
            raise RequestError(f"max_tokens must be positive (found {max_tokens!r})")
        if context is not None and max_tokens > context:
            raise RequestError(f"max_completion_tokens is too large: {max_tokens}. This model supports at most "
                               f"{context} completion tokens.")
    mapped = {
        "max_new_tokens": default_max_tokens if max_tokens is None else max_tokens,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "top_k": body.get("top_k"),
        "n": body.get("n"),
        "stop": body.get("stop"),
        "stop_token_ids": body.get("stop_token_ids"),
        "ignore_eos": body.get("ignore_eos", False),
        "top_logprobs": top_logprobs or None,
    }
    return parse_sampling_params({k: v for k, v in mapped.items() if v is not None})


def find_stop(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    """Earliest occurrence of any stop string in `text`: (index, stop) or None."""
    best: tuple[int, str] | None = None
    for stop in stops:
        index = text.find(stop)
        if index >= 0 and (best is None or index < best[0]):
            best = (index, stop)
    return best

"""Response bodies in SGLang's /generate shape and OpenAI's completion / chat shapes, built from `Generated` rows."""

from __future__ import annotations

import time
import uuid
from typing import Any

from hermes_stack.inference.backend import Generated

FALLBACK_ROLE_FORMAT = "{role}: {content}\n"


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def _finish(reason: dict[str, Any]) -> str:
    return "length" if reason.get("type") == "length" else "stop"


def _token_texts(tokenizer, ids) -> list[str]:
    return [tokenizer.decode([t]) for t in ids]


def _usage(results: list[Generated]) -> dict[str, int]:
    # Prompt tokens counted once per distinct prompt (n samples of one prompt share it, as OpenAI reports).
    prompts = {r.prompt_ids for r in results}
    prompt_tokens = sum(len(p) for p in prompts)
    completion_tokens = sum(len(r.output_ids) for r in results)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def generate_response(results: list[Generated], return_logprob: bool, text_in_logprobs: bool, tokenizer,
                      weight_version: int) -> list[dict[str, Any]]:
    answers = []
    for r in results:
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": r.finish_reason,
            "prompt_tokens": len(r.prompt_ids),
            "completion_tokens": len(r.output_ids),
            "cached_tokens": 0,
            "weight_version": str(weight_version),
        }
        if return_logprob:
            texts = _token_texts(tokenizer, r.output_ids) if text_in_logprobs else [None] * len(r.output_ids)
            meta["output_token_logprobs"] = [[lp, t, s] for lp, t, s in zip(r.logprobs, r.output_ids, texts)]
        answers.append({"text": r.text, "output_ids": list(r.output_ids), "meta_info": meta})
    return answers


def completion_response(results: list[Generated], logprobs: bool, tokenizer, model: str) -> dict[str, Any]:
    choices = []
    for index, r in enumerate(results):
        lp = None
        if logprobs:
            tokens = _token_texts(tokenizer, r.output_ids)
            offsets, at = [], 0
            for token in tokens:
                offsets.append(at)
                at += len(token)
            lp = {"tokens": tokens, "token_logprobs": list(r.logprobs), "top_logprobs": None, "text_offset": offsets}
        choices.append({"index": index, "text": r.text, "logprobs": lp, "finish_reason": _finish(r.finish_reason)})
    return {"id": _id("cmpl"), "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": _usage(results)}


def chat_response(results: list[Generated], logprobs: bool, tokenizer, model: str) -> dict[str, Any]:
    choices = []
    for index, r in enumerate(results):
        lp = None
        if logprobs:
            lp = {"content": [
                {"token": tok, "logprob": value, "bytes": list(tok.encode("utf-8")), "top_logprobs": []}
                for tok, value in zip(_token_texts(tokenizer, r.output_ids), r.logprobs)
            ]}
        choices.append({"index": index, "message": {"role": "assistant", "content": r.text}, "logprobs": lp,
                        "finish_reason": _finish(r.finish_reason)})
    return {"id": _id("chatcmpl"), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": _usage(results)}


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def prompt_from_messages(tokenizer, messages: list[dict[str, Any]]) -> list[int]:
    """Token ids of a chat prompt: the tokenizer's own chat template when it has one, else 'role: content' lines."""
    clean = [{"role": m.get("role", "user"), "content": _content(m)} for m in messages if isinstance(m, dict)]
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(clean, add_generation_prompt=True, tokenize=False)
        ids = tokenizer.encode(text, add_special_tokens=False)
        if tokenizer.bos_token_id is not None and (not ids or ids[0] != tokenizer.bos_token_id) \
                and tokenizer.bos_token and tokenizer.bos_token not in text:
            ids = [tokenizer.bos_token_id, *ids]
        return ids
    text = "".join(FALLBACK_ROLE_FORMAT.format(**m) for m in clean) + "assistant:"
    return tokenizer.encode(text)

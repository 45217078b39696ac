"""Response bodies in SGLang's /generate shape and OpenAI's completion / chat shapes, built from `Generated` rows."""

from __future__ import annotations

import itertools
import json
import math
import time
import uuid
from typing import Any

from hermes_stack.inference.backend import BackendReply, Generated

FALLBACK_ROLE_FORMAT = "{role}: {content}\n"
# A /generate answer's `meta_info.id` (SGLang's request id, a uuid4's 32 hex digits): this process's random 20 hex
# digits and a count, unique as uuid4 is, without uuid4's system call for random bytes per row (~3-4 us: ~1 ms of
# a 256-row PPO chunk's answer, built on the server's event loop after the last decode step, issue 22).
_ANSWER_ID_RUN = uuid.uuid4().hex[:20]
_answer_count = itertools.count()


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
    version = str(weight_version)
    for r in results:
        meta: dict[str, Any] = {
            "id": f"{_ANSWER_ID_RUN}{next(_answer_count):012x}",
            "finish_reason": r.finish_reason,
            "prompt_tokens": len(r.prompt_ids),
            "completion_tokens": len(r.output_ids),
            "cached_tokens": 0,
            "weight_version": version,
        }
        if return_logprob:
            if not math.isfinite(sum(r.logprobs)):
                # json.dumps refused NaN (a 500); orjson would write null, which the environment cannot score
                raise BackendReply(500, {"error": {"message": "the model produced a non-finite log-prob (NaN or "
                                                              "inf): its weights are broken", "type": "internal"}})
            if text_in_logprobs:
                triples = [[lp, t, s] for lp, t, s in zip(r.logprobs, r.output_ids,
                                                           _token_texts(tokenizer, r.output_ids))]
            else:
                triples = [[lp, t, None] for lp, t in zip(r.logprobs, r.output_ids)]
            meta["output_token_logprobs"] = triples
        answers.append({"text": r.text, "output_ids": list(r.output_ids), "meta_info": meta})
    return answers


def _top_completion(tokenizer, r: Generated) -> list[dict[str, float]] | None:
    # OpenAI completions: per position {token text: log-prob} of the most likely tokens (SGLang's LogProbs)
    if not r.top_logprobs:
        return None
    return [{tokenizer.decode([t]): v for t, v in pairs} for pairs in r.top_logprobs]


def _top_chat(tokenizer, r: Generated, position: int) -> list[dict[str, Any]]:
    if not r.top_logprobs:
        return []
    out = []
    for t, v in r.top_logprobs[position]:
        text = tokenizer.decode([t])
        out.append({"token": text, "logprob": v, "bytes": list(text.encode("utf-8"))})
    return out


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
            lp = {"tokens": tokens, "token_logprobs": list(r.logprobs), "top_logprobs": _top_completion(tokenizer, r),
                  "text_offset": offsets}
        choices.append({"index": index, "text": r.text, "logprobs": lp, "finish_reason": _finish(r.finish_reason)})
    return {"id": _id("cmpl"), "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, "usage": _usage(results)}


def chat_response(results: list[Generated], logprobs: bool, tokenizer, model: str) -> dict[str, Any]:
    choices = []
    for index, r in enumerate(results):
        lp = None
        if logprobs:
            lp = {"content": [
                {"token": tok, "logprob": value, "bytes": list(tok.encode("utf-8")),
                 "top_logprobs": _top_chat(tokenizer, r, i)}
                for i, (tok, value) in enumerate(zip(_token_texts(tokenizer, r.output_ids), r.logprobs))
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


# ---------------------------------------------------------------- streaming (server-sent events)
# The chunk shapes of SGLang's streaming routes (entrypoints/openai/serving_chat.py,
# OpenAIServingChat._generate_chat_stream; serving_completions.py, OpenAIServingCompletion._generate_completion_stream;
# protocol.py ChatCompletionStreamResponse / CompletionStreamResponse): a first chat chunk with the role, content
# chunks, a last chunk per choice with finish_reason, a usage chunk with no choices when
# stream_options.include_usage is set, then `data: [DONE]`. Built here from a finished response: the service
# generates a request's tokens in one batch, so the chunks follow each other as soon as the batch is done.


def _pieces(text: str, tokens: list[str] | None) -> list[str]:
    """The text cut at token boundaries when the token texts add up to it, else in one piece."""
    if tokens and "".join(tokens) == text:
        return tokens
    return [text] if text else []


def chat_stream_chunks(response: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    head = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"],
            "model": response["model"]}
    chunks = []
    for choice in response["choices"]:
        index = choice["index"]
        chunks.append({**head, "choices": [{"index": index, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None}]})
        content = (choice.get("logprobs") or {}).get("content")
        text = choice["message"]["content"]
        pieces = _pieces(text, [c["token"] for c in content] if content else None)
        for n, piece in enumerate(pieces):
            lp = {"content": [content[n]]} if content and len(pieces) == len(content) else (
                {"content": content} if content and n == 0 else None)
            chunks.append({**head, "choices": [{"index": index, "delta": {"content": piece}, "logprobs": lp,
                                                "finish_reason": None}]})
        chunks.append({**head, "choices": [{"index": index, "delta": {}, "logprobs": None,
                                            "finish_reason": choice["finish_reason"]}]})
    if include_usage:
        chunks.append({**head, "choices": [], "usage": response["usage"]})
    return chunks


def completion_stream_chunks(response: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    head = {"id": response["id"], "object": "text_completion", "created": response["created"],
            "model": response["model"]}
    chunks = []
    for choice in response["choices"]:
        lp = choice.get("logprobs")
        pieces = _pieces(choice["text"], lp["tokens"] if lp else None)
        for n, piece in enumerate(pieces):
            piece_lp = None
            if lp and len(pieces) == len(lp["tokens"]):
                piece_lp = {"tokens": [lp["tokens"][n]], "token_logprobs": [lp["token_logprobs"][n]],
                            "top_logprobs": [lp["top_logprobs"][n]] if lp.get("top_logprobs") else None,
                            "text_offset": [lp["text_offset"][n]]}
            elif lp and n == 0:
                piece_lp = lp
            chunks.append({**head, "choices": [{"index": choice["index"], "text": piece, "logprobs": piece_lp,
                                                "finish_reason": None}]})
        chunks.append({**head, "choices": [{"index": choice["index"], "text": "", "logprobs": None,
                                            "finish_reason": choice["finish_reason"]}]})
    if include_usage:
        chunks.append({**head, "choices": [], "usage": response["usage"]})
    return chunks


def sse_lines(chunks: list[dict[str, Any]]):
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"

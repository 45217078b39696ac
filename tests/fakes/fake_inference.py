"""A fake SGLang-style inference server on loopback: POST /generate with input_ids, answering token ids and
`meta_info.output_token_logprobs` ([logprob, token_id, text]) like SGLang, a list when sampling_params.n > 1, and
SGLang's batched form: a list of input_ids with one sampling_params object (or a list of them), answered by a list
in the same order.

`policy(prompt_text, index) -> completion text` decides what completion `index` of a request says (in the batched
form: how many rows of that request asked the same prompt before it); the default answers "a+b" questions right
for even indexes and wrong (by one) for odd ones, so GRPO groups have a spread.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fakes.loopback import JsonHandler, LoopbackServer

LOGPROB = -0.25


def alternate_policy(prompt: str, index: int) -> str:
    pairs = re.findall(r"(\d+)\s*\+\s*(\d+)", prompt)
    total = sum(map(int, pairs[-1])) if pairs else 0
    return f"{pairs[-1][0]} + {pairs[-1][1]} = {total}\n#### {total + index % 2}" if pairs else "#### 0"


@dataclass
class FakeInference(LoopbackServer):
    tokenizer_dir: Path
    api_key: str = "internal-inference-key-123"
    policy: Callable[[str, int], str] = alternate_policy
    requests: list[dict] = field(default_factory=list)
    refuse_list_form: bool = False  # 422 for a batched request with a list of sampling_params, as SGLang's router

    def handler(self) -> type[JsonHandler]:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(self.tokenizer_dir))
        fake = self

        class Handler(JsonHandler):
            def do_GET(self):
                if self.path == "/health":
                    return self.send_json(200, {"status": "ok"})
                return self.send_json(404, {"error": f"no route {self.path}"})

            def do_POST(self):
                body = self.read_json()
                fake.requests.append({"path": self.path, "body": body})
                if fake.api_key and self.headers.get("authorization") != f"Bearer {fake.api_key}":
                    return self.send_json(401, {"error": "bad key"})
                if self.path != "/generate":
                    return self.send_json(404, {"error": f"no route {self.path}"})
                if fake.refuse_list_form and isinstance(body.get("sampling_params"), list):
                    return self.send_json(422, {"error": "Failed to deserialize the JSON body"})
                if body["input_ids"] and isinstance(body["input_ids"][0], list):  # the batched form
                    rows, params = body["input_ids"], body.get("sampling_params") or {}
                    params = params if isinstance(params, list) else [params] * len(rows)  # one object for all
                    seen: dict[tuple, int] = {}
                    results = []
                    for row, row_params in zip(rows, params):
                        index = seen[tuple(row)] = seen.get(tuple(row), -1) + 1
                        results += answer(row, row_params, [index])
                    return self.send_json(200, results)
                params = body.get("sampling_params") or {}
                n = int(params.get("n", 1))
                results = answer(body["input_ids"], params, range(n))
                return self.send_json(200, results if n > 1 else results[0])

        def answer(input_ids: list[int], params: dict, indexes) -> list[dict]:
            limit = int(params.get("max_new_tokens", 64))
            prompt = tokenizer.decode(input_ids, skip_special_tokens=True)
            results = []
            for i in indexes:
                ids = tokenizer.encode(fake.policy(prompt, i), add_special_tokens=False)
                ids = (ids + [tokenizer.eos_token_id])[:limit]
                results.append({
                    "text": tokenizer.decode(ids, skip_special_tokens=True),
                    "meta_info": {
                        "prompt_tokens": len(input_ids),
                        "completion_tokens": len(ids),
                        "output_token_logprobs": [[LOGPROB, t, None] for t in ids],
                        "finish_reason": {"type": "stop" if len(ids) < limit else "length"},
                    },
                })
            return results

        return Handler

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

"""atroposlib's HTTP calls of the environment over one kept-alive connection pool instead of a new TCP connection
each.

atroposlib opens a fresh `aiohttp.ClientSession` (so a fresh TCP connection, closed after one request) for every
`/generate` (atroposlib/envs/server_handling/sglang_server.py, SGLangServer._tokens_and_logprobs_completion_wrapper),
every group posted to Atropos (atroposlib/envs/base.py, BaseEnv._send_scored_data_to_api) and every `/status-env`
poll (BaseEnv.get_status, ten a second). In the CPU stack that connection set-up and tear-down was about a quarter
of the environment's busy time (docs/benchmarks.md, issue 22). The classes here say the same requests and read the
same answers as those functions, through one session per event loop:

- PooledSGLangServer: SGLangServer with `/generate` on a pooled session (no cap on connections: atroposlib's
  per-request sessions had none either), plus `generate_many`, several prompts in batched `/generate`s (the
  environment's rollout chunks: env.py), and `stream_many`, the same request streamed: each prompt's answer as
  soon as it is sampled;
- PooledAtroposCalls: a BaseEnv mixin with `/scored_data(_list)` and `/status-env` on a pooled session, the
  retries (tenacity, 3 attempts) and the status bookkeeping as upstream.

Kept-alive connections are closed by the client after KEEPALIVE_S idle, below uvicorn's 5 s default (the inference
service, SGLang and run-api all serve with uvicorn), so the client does not reuse one the server is closing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import orjson
from atroposlib.envs.server_handling.sglang_server import SGLangServer
from atroposlib.utils.io import parse_http_response
from tenacity import retry, stop_after_attempt, wait_random_exponential

from hermes_stack.service_json import json_bytes

upstream_log = logging.getLogger("atroposlib.envs.base")  # the lines upstream logs, under its name
log = logging.getLogger("hermes_stack.environment")

KEEPALIVE_S = 4.0


class AtroposServerError(Exception):
    """A 5xx from Atropos: retried (upstream raises a bare Exception there; its callers catch Exception)."""


class SessionPool:
    """One aiohttp session for the running event loop, made on first use (a session belongs to the loop it was
    made in: a new loop, as in tests that call asyncio.run twice, gets a new one)."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
            self._session, self._loop = aiohttp.ClientSession(connector=connector), loop
        return self._session

    async def aclose(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a coroutine finalised at interpreter exit (SIGTERM): the process takes the sockets
            loop = None
        if self._session is not None and not self._session.closed and loop is not None and self._loop is loop:
            await self._session.close()
        self._session = None


def sglang_request(server: SGLangServer, kwargs: dict, bos_token_id: int | None = None) -> dict:
    """The body SGLangServer._tokens_and_logprobs_completion_wrapper posts to /generate (same steps, same order):
    input_ids from ManagedServer or the tokenised prompt, one doubled BOS removed, max_tokens renamed to
    max_new_tokens, the model name left out of the sampling parameters. `kwargs` is consumed as upstream does.
    `bos_token_id`: the tokenizer's, read once by a caller that builds a chunk's bodies (transformers' attribute
    lookup was ~5 us a row, ~1.3 ms of a 256-row chunk, issue 22)."""
    assert kwargs.get("model", None) is not None, "Model is required for completion!"
    assert kwargs.get("prompt", None) is not None or kwargs.get("input_ids", None) is not None, \
        "Prompt or input_ids is required for completion!"
    if "input_ids" in kwargs:
        prompt_tokens = kwargs.pop("input_ids")
        kwargs.pop("prompt", None)
    else:
        prompt_tokens = server.tokenizer.encode(kwargs.pop("prompt"))
    bos = server.tokenizer.bos_token_id if bos_token_id is None else bos_token_id
    if len(prompt_tokens) >= 2 and prompt_tokens[0] == bos == prompt_tokens[1]:
        prompt_tokens = prompt_tokens[1:]
    if "max_tokens" in kwargs:
        kwargs["max_new_tokens"] = kwargs.pop("max_tokens")
    kwargs.pop("model", None)
    return {"input_ids": prompt_tokens, "sampling_params": kwargs, "return_logprob": True,
            "return_text_in_logprobs": False}


def sglang_results(prompt_tokens: list, results) -> tuple[list, list, list, list]:
    """(prompt tokens, output ids, output logprobs, finish reasons) from /generate's answer, as upstream reads it:
    one result or a list of them; meta_info.output_token_logprobs is (logprob, token id, text) per token."""
    if not isinstance(results, list):
        results = [results]
    tokens, logprobs, reasons = [], [], []
    for result in results:
        row_tokens, row_logprobs, reason = answer_fields(result)
        tokens.append(row_tokens)
        logprobs.append(row_logprobs)
        reasons.append(reason)
    return prompt_tokens, tokens, logprobs, reasons


def answer_fields(result: dict) -> tuple[list, list, Any]:
    """(output ids, output logprobs, finish reason) of one /generate answer. Read per row where a chunk's rows are
    read one by one: sglang_results' lists of one for each row were ~1 ms of a 256-row chunk (issue 22)."""
    meta = result.get("meta_info", {})
    triples = meta.get("output_token_logprobs", [])
    return [item[1] for item in triples], [item[0] for item in triples], meta.get("finish_reason", None)


class StreamFailed(Exception):
    """A streamed /generate that ended without every answer: an error event, or [DONE] or the end of the body
    before the last row."""


def stream_events(buffer: bytes, final: bool = False) -> tuple[list[bytes], bytes]:
    """(the payloads of the whole events in `buffer`, the incomplete rest), read as the server-sent-events format
    says: lines end with CRLF, LF or CR; an event ends with a blank line; its `data:` lines (one space after the
    colon dropped) are joined with LF; other fields and `:` comments are skipped. SGLang's /generate sends one
    `data: <json>` line per event, but a proxy in between may re-frame them. `final`: the body ended, so a last CR
    is a line end, not half of a CRLF."""
    # maybe half of a CRLF split across chunks: wait for the next (unless none comes)
    held = b"\r" if buffer.endswith(b"\r") and not final else b""
    text = buffer[:-1] if held else buffer
    if b"\r" in text:  # (SGLang's and the built-in server's events end in LF: no copies of the body for them)
        text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    *whole, rest = text.split(b"\n\n")
    payloads = []
    for event in whole:
        if event.startswith(b"data:") and b"\n" not in event:  # one data line, as the servers send it
            payloads.append(event[len(b"data:"):].removeprefix(b" "))
            continue
        data = [line[len(b"data:"):].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            payloads.append(b"\n".join(data))
    return payloads, rest + held


def finished_answers(payloads: list[bytes], bodies: list[dict]) -> tuple[list[tuple[int, tuple]], bool]:
    """(the (index, answer) of each finished row among these events, [DONE] seen?). An answer is read as
    `generate_many` reads it. SGLang sends a row's progress too (finish_reason null until its last event, which
    holds the whole answer: its default, non-incremental stream): those events are skipped."""
    answers, done = [], False
    for payload in payloads:
        # (an answer is a JSON object: no stripped copy of each ~0.5 kB row to tell it from [DONE])
        if not payload.startswith(b"{") and payload.strip() == b"[DONE]":
            done = True
            continue
        event = orjson.loads(payload)
        if "error" in event:
            message = event["error"].get("message") if isinstance(event["error"], dict) else event["error"]
            raise StreamFailed(f"/generate's stream failed: {message}")
        if event.get("meta_info", {}).get("finish_reason") is None:
            continue
        index = event["index"]
        answers.append((index, (bodies[index]["input_ids"], *answer_fields(event))))
    return answers, done


class ListFormRefused(Exception):
    """The inference URL answered 422 to sampling_params as a list (SGLang's router)."""


class PooledSGLangServer(SGLangServer):
    """atroposlib's SGLangServer; `/generate` goes over one kept-alive session per event loop."""

    def __init__(self, config, reasoning_config=None):
        super().__init__(config, reasoning_config=reasoning_config)
        self.pool = SessionPool()
        self.list_form = True  # generate_many: SGLang's list of sampling_params until the URL refuses it

    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs) -> tuple[list, list, list, list]:
        request = sglang_request(self, kwargs)
        return sglang_results(request["input_ids"], await self._post_generate(request))

    async def _post_generate(self, request: dict):
        """POST /generate on the pooled session; its JSON answer. Retries and the semaphore are the caller's."""
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        async with self.pool.session().post(
            f"{self.config.base_url.replace('/v1', '')}/generate", data=json_bytes(request), headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.config.timeout),
        ) as response:
            response.raise_for_status()
            # orjson: a PPO chunk's answer (256 rows with their logprobs, ~330 kB) parsed in 1.9 ms, not 7.3 ms,
            # inside the chunk's time in flight (issue 22)
            return await response.json(loads=orjson.loads)

    def _bodies(self, requests: list[dict]) -> list[dict]:
        """sglang_request's body for each of a chunk's requests (ManagedServer's kwargs, the model name added)."""
        bos = self.tokenizer.bos_token_id
        return [sglang_request(self, {**kwargs, "model": self.config.model_name}, bos) for kwargs in requests]

    async def generate_many(self, requests: list[dict]) -> list[tuple[list, list, list, object]]:
        """Several one-completion prompts in one `/generate`: SGLang's batched form, a list of input_ids with one
        sampling_params each, answered by a list in the same order. SGLang's router (sgl-router, `make up
        REPLICAS=N`) reads sampling_params as ONE object and refuses the list (422): from the first refusal on, the
        prompts whose sampling parameters agree go in one request with one object, the requests at once (prompts of
        other lengths have other new-token budgets, so these are more requests). Each entry of `requests` holds what
        ManagedServer would pass for its prompt (input_ids, max_tokens, temperature, top_p; n 1); each answer is
        (prompt tokens, output ids, output logprobs, finish reason), read as upstream reads a single answer."""
        bodies = self._bodies(requests)
        if any(body["sampling_params"].get("n", 1) != 1 for body in bodies):
            raise ValueError("generate_many takes one completion per prompt (n 1): the order of a batched "
                             "answer with n > 1 is not one SGLang documents")
        answers: list = [None] * len(bodies)
        if self.list_form:
            try:
                results = await self._post_list_form(bodies)
            except ListFormRefused:
                self.list_form = False
                log.info("the inference URL refused sampling_params as a list (422, as SGLang's router does): "
                         "batched prompts now share one sampling_params object per request")
            else:
                self._read_batch(bodies, list(range(len(bodies))), results, answers)
                return answers
        shared: dict[str, list[int]] = {}  # sampling parameters (as JSON) -> the positions of their prompts
        for i, body in enumerate(bodies):
            shared.setdefault(json.dumps(body["sampling_params"], sort_keys=True), []).append(i)
        batches = list(shared.values())
        answered = await asyncio.gather(*[self._post_generate_held({
            "input_ids": [bodies[i]["input_ids"] for i in rows], "sampling_params": bodies[rows[0]]["sampling_params"],
            "return_logprob": True, "return_text_in_logprobs": False}) for rows in batches])
        for rows, results in zip(batches, answered):
            self._read_batch(bodies, rows, results, answers)
        return answers

    async def stream_many(self, requests: list[dict]):
        """`generate_many`'s batched /generate streamed (`stream: true`, SGLang's server-sent events): yields, as
        they arrive, lists of (position in `requests`, answer), each position once. Raises StreamFailed (or the
        connection's error) when the stream ends short; no retry here: the caller falls back to generate_many, which
        retries. Only where the inference service streams each row whole (the built-in server, runtime.py)."""
        bodies = self._bodies(requests)
        request = {"input_ids": [b["input_ids"] for b in bodies], "sampling_params": [b["sampling_params"] for b in
                   bodies], "return_logprob": True, "return_text_in_logprobs": False, "stream": True}
        headers = {"Content-Type": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        left, buffer, done = len(bodies), b"", False
        async with self.sem, self.pool.session().post(
            f"{self.config.base_url.replace('/v1', '')}/generate", data=json_bytes(request), headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.config.timeout),
        ) as response:
            response.raise_for_status()

            async def reads():  # the body's pieces, then its end: what stream_events held back (a last CR) is read
                async for piece in response.content.iter_any():
                    yield piece, False
                yield b"", True

            async for chunk, final in reads():
                payloads, buffer = stream_events(buffer + chunk, final)
                answers, done = finished_answers(payloads, bodies)
                if answers:
                    left -= len(answers)
                    yield answers
                if done:
                    break
        if left or not done:
            raise StreamFailed(f"/generate's stream ended with {left} of {len(bodies)} answers missing")

    async def _post_list_form(self, bodies: list[dict]):
        """The batched /generate with one sampling_params per prompt. A 422 is the list form refused
        (ListFormRefused); any other failure is retried as every request is (_post_generate_held)."""
        request = {"input_ids": [b["input_ids"] for b in bodies], "sampling_params": [b["sampling_params"] for b in
                   bodies], "return_logprob": True, "return_text_in_logprobs": False}
        try:
            async with self.sem:
                return await self._post_generate(request)
        except aiohttp.ClientResponseError as exc:
            if exc.status == 422:
                raise ListFormRefused from exc
        except aiohttp.ClientError:
            pass
        return await self._post_generate_held(request)

    @staticmethod
    def _read_batch(bodies: list[dict], rows: list[int], results, answers: list) -> None:
        """A batched answer (one result per prompt of `rows`, in order) read into answers[row]."""
        if not isinstance(results, list) or len(results) != len(rows):
            raise ValueError(f"/generate answered {len(results) if isinstance(results, list) else 1} result(s) "
                             f"for {len(rows)} prompts")
        for i, result in zip(rows, results):
            answers[i] = (bodies[i]["input_ids"], *answer_fields(result))

    @retry(stop=stop_after_attempt(3), wait=wait_random_exponential(multiplier=1, max=10))
    async def _post_generate_held(self, request: dict):
        """_post_generate under the server's semaphore, retried as upstream's one-prompt call (server_baseline.py
        _tokens_and_logprobs_comp does both around the wrapper above)."""
        async with self.sem:
            return await self._post_generate(request)


def uses_upstream_sglang(server_configs) -> bool:
    """True when atroposlib would pick SGLangServer for these configs (ServerManager: server_type of the first
    config; a ServerBaseline is left to atroposlib)."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    return (isinstance(server_configs, list) and bool(server_configs)
            and all(isinstance(c, APIServerConfig) and c.server_type == "sglang" for c in server_configs))


class PooledAtroposCalls:
    """BaseEnv mixin: posting groups and polling /status-env over one kept-alive session. Same URLs, JSON bodies,
    status handling and retries as BaseEnv._send_scored_data_to_api and BaseEnv.get_status; the bodies go
    uncompressed (_post_json_with_compression)."""

    _atropos_pool: SessionPool | None = None

    def _post_json_with_compression(self, session: aiohttp.ClientSession, url: str, payload, **_):
        """Plain JSON, as upstream posts a payload under 1 KiB. Upstream gzips larger ones at level 9: for a PPO chunk
        of 256 groups that was ~8 ms of the environment's CPU (py-spy in the CPU stack, issue 22), and run-api then
        spends more to inflate it, to save bytes on a loopback or compose network. run-api reads both."""
        return session.post(url, data=json.dumps(payload).encode("utf-8"), headers={"Content-Type": "application/json"})

    def _atropos_session(self) -> aiohttp.ClientSession:
        if self._atropos_pool is None:
            self._atropos_pool = SessionPool()
        return self._atropos_pool.session()

    @retry(stop=stop_after_attempt(3), wait=wait_random_exponential(multiplier=1, max=10))
    async def _send_scored_data_to_api(self, scored_data):
        for item in scored_data if isinstance(scored_data, list) else [scored_data]:
            item["env_id"] = getattr(self, "env_id", None)
        url = (f"{self.config.rollout_server_url}/scored_data_list" if isinstance(scored_data, list)
               else f"{self.config.rollout_server_url}/scored_data")
        async with self._post_json_with_compression(self._atropos_session(), url, scored_data) as resp:
            if resp.status >= 500:
                raise AtroposServerError(f"Server error: {resp.status}")  # retried, as upstream
            if resp.status >= 400:
                upstream_log.error(f"Client error: {resp.status}, not retrying")
                return
            await resp.read()

    @retry(stop=stop_after_attempt(3), wait=wait_random_exponential(multiplier=1, max=10))
    async def get_status(self):
        async with self._atropos_session().get(f"{self.config.rollout_server_url}/status-env",
                                               json={"env_id": self.env_id}) as resp:
            self.status_dict = await parse_http_response(resp, upstream_log)
            new_weight = self.status_dict["env_weight"]
            max_num_workers = self.config.max_num_workers
            if max_num_workers == -1:
                max_num_workers = self.config.max_num_workers_per_node * len(self.server.servers)
            self.max_num_workers = max_num_workers
            await self.server.update_weight(new_weight)

    async def close_pools(self) -> None:
        """Close the sessions (the environment's and its servers') before the event loop ends."""
        if self._atropos_pool is not None:
            await self._atropos_pool.aclose()
        for server in getattr(self.server, "servers", []):
            if isinstance(getattr(server, "pool", None), SessionPool):
                await server.pool.aclose()

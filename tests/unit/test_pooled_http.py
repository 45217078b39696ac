"""pooled_http: the environment's /generate, /scored_data and /status-env requests over kept-alive connections say
exactly what atroposlib's own functions say (compared side by side against one real loopback HTTP server that
records every request and counts the TCP connections it accepted), and reuse one connection where atroposlib opens
one per request. Also the rollout clock's arithmetic (reference values)."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("atroposlib")

from fakes.tiny_tokenizer import build_tiny_tokenizer

GENERATE_ANSWER = [
    {"text": "ab", "meta_info": {"output_token_logprobs": [[-0.5, 40, None], [-1.25, 41, None]],
                                 "finish_reason": {"type": "stop"}}},
    {"text": "c", "meta_info": {"output_token_logprobs": [[-0.75, 42, None]],
                                "finish_reason": {"type": "length", "length": 1}}},
]
STATUS = {"current_step": 3, "queue_size": 2, "unallocated_fraction": 1.0, "self_queue_size": 2,
          "max_group_size": 4, "env_weight": 0.5}


class Recorder(ThreadingHTTPServer):
    """HTTP/1.1 loopback server: keeps each request (path, headers, body) and counts accepted connections."""

    daemon_threads = True

    def __init__(self):
        self.requests: list[dict] = []
        self.connections = 0
        self.short_by = 0  # results a batched /generate answers short of its prompts
        self.refuse_list = False  # answer 422 to sampling_params as a list, as SGLang's router does
        self.stream_ends = "done"  # a streamed /generate: "done" whole, "error" an error event midway, "short" a row short
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def process_request(self, request, client_address):
        self.connections += 1
        super().process_request(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn serves

    def log_message(self, *args):
        pass

    def _answer(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.requests.append({"method": self.command, "path": self.path, "body": json.loads(body or b"null"),
                                     "authorization": self.headers.get("authorization"),
                                     "encoding": self.headers.get("content-encoding")})
        answer = {"/generate": GENERATE_ANSWER, "/status-env": STATUS}.get(self.path, {"status": "received"})
        status = 200
        body = self.server.requests[-1]["body"] or {}
        rows = body.get("input_ids") if self.path == "/generate" else None
        if rows and isinstance(rows[0], list):  # the batched form: one result per prompt (fewer when told to)
            answer = [GENERATE_ANSWER[i % 2] for i in range(len(rows) - self.server.short_by)]
            if self.server.refuse_list and isinstance(body.get("sampling_params"), list):  # as SGLang's router
                answer, status = {"error": "Failed to deserialize the JSON body"}, 422
        if self.path == "/generate" and body.get("stream") is True and status == 200:
            return self._stream(answer)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, answer: list) -> None:
        """SGLang's batched stream (non-incremental, its default): each row's progress (finish_reason null, its output
        so far), then each row's last event with the whole answer, rows out of order, each with its index; [DONE]."""
        events = [{**row, "index": i, "meta_info": {**row["meta_info"], "finish_reason": None,
                                                    "output_token_logprobs": row["meta_info"]["output_token_logprobs"][:1]}}
                  for i, row in enumerate(answer)]
        finals = [{**row, "index": i} for i, row in reversed(list(enumerate(answer)))]
        if self.server.stream_ends == "error":
            finals[1:] = [{"error": {"message": "the scheduler died"}}]
        elif self.server.stream_ends == "short":
            finals = finals[1:]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for n, event in enumerate([*events, *finals, "[DONE]"]):
            if n == len(events) + 1:  # a pause after the first row's answer: the rest comes in a later read, even
                time.sleep(0.05)      # on a loaded machine whose client would otherwise read the body at once
            data = b"data: " + (event.encode() if isinstance(event, str) else json.dumps(event).encode()) + b"\n\n"
            for piece in (data[:7], data[7:]):  # an event split across reads
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = _answer


@pytest.fixture
def recorder():
    server = Recorder()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return str(build_tiny_tokenizer(tmp_path_factory.mktemp("tok")))


def server_config(url: str, tokenizer_dir: str):
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    return APIServerConfig(server_type="sglang", base_url=url + "/v1", api_key="loopback-key", model_name="m",
                           tokenizer_name=tokenizer_dir, health_check=False, timeout=30)


CALLS = [
    {"prompt": "3+4=", "n": 2, "max_tokens": 5, "temperature": 1.0, "top_p": 1.0},
    {"input_ids": [1, 1, 20, 21], "n": 2, "max_tokens": 7, "temperature": 0.5},  # a doubled BOS (<s> = 1)
    {"input_ids": [1, 22], "n": 2, "max_tokens": 3, "temperature": 0.0, "stop": ["\n"]},
]


async def generate_all(server) -> list:
    out = []
    for call in CALLS:
        out.append(await server.tokens_and_logprobs_completion(**dict(call)))
    return out


def test_pooled_generate_says_and_reads_what_atroposlib_does_over_one_connection(recorder, tokenizer_dir):
    from atroposlib.envs.server_handling.sglang_server import SGLangServer

    from hermes_stack.environment.pooled_http import PooledSGLangServer

    config = server_config(recorder.url, tokenizer_dir)
    upstream_results = asyncio.run(generate_all(SGLangServer(config)))
    upstream_requests, upstream_connections = list(recorder.requests), recorder.connections
    recorder.requests.clear()
    recorder.connections = 0

    async def pooled_run():
        server = PooledSGLangServer(config)
        try:
            return await generate_all(server)
        finally:
            await server.pool.aclose()

    pooled_results = asyncio.run(pooled_run())
    assert recorder.requests == upstream_requests  # paths, bodies, the bearer key: the same wire protocol
    assert pooled_results == upstream_results
    assert upstream_requests[1]["body"]["input_ids"] == [1, 20, 21]  # the doubled BOS went, as upstream
    assert upstream_requests[0]["body"]["sampling_params"] == {"n": 2, "max_new_tokens": 5, "temperature": 1.0,
                                                               "top_p": 1.0}
    assert pooled_results[0][1:] == ([[40, 41], [42]], [[-0.5, -1.25], [-0.75]],
                                     [{"type": "stop"}, {"type": "length", "length": 1}])
    assert upstream_connections == len(CALLS)  # atroposlib: one TCP connection per request
    assert recorder.connections == 1  # ours: one kept-alive connection for all of them


def test_a_new_event_loop_gets_a_new_session(recorder, tokenizer_dir):
    from hermes_stack.environment.pooled_http import PooledSGLangServer

    server = PooledSGLangServer(server_config(recorder.url, tokenizer_dir))
    asyncio.run(server.tokens_and_logprobs_completion(**dict(CALLS[1])))
    asyncio.run(server.tokens_and_logprobs_completion(**dict(CALLS[1])))  # the first loop's session is unusable
    assert len(recorder.requests) == 2


BATCHED = [{"input_ids": [1, 1, 20, 21], "n": 1, "max_tokens": 7, "temperature": 0.5, "top_p": 0.9},
           {"input_ids": [1, 22], "n": 1, "max_tokens": 3, "temperature": 0.5, "top_p": 0.9},
           {"input_ids": [1, 23, 24], "n": 1, "max_tokens": 7, "temperature": 0.5, "top_p": 0.9}]


def test_generate_many_is_the_single_requests_batched_in_one_and_read_the_same(recorder, tokenizer_dir):
    """SGLang's batched /generate: the single requests' input_ids and sampling_params as lists, in order; each answer
    read as atroposlib reads a one-prompt answer."""
    from atroposlib.envs.server_handling.sglang_server import SGLangServer


    config = server_config(recorder.url, tokenizer_dir)

    async def upstream_singles():
        server = SGLangServer(config)
        return [await server.tokens_and_logprobs_completion(**dict(call)) for call in BATCHED]

    asyncio.run(upstream_singles())
    singles = [r["body"] for r in recorder.requests]
    recorder.requests.clear()
    answers = asyncio.run(batched(config, [BATCHED]))[0]
    assert len(recorder.requests) == 1 and recorder.requests[0]["path"] == "/generate"
    body = recorder.requests[0]["body"]
    assert body["input_ids"] == [s["input_ids"] for s in singles] == [[1, 20, 21], [1, 22], [1, 23, 24]]
    assert body["sampling_params"] == [s["sampling_params"] for s in singles]  # the doubled BOS went, as upstream
    assert body["sampling_params"][0] == {"n": 1, "max_new_tokens": 7, "temperature": 0.5, "top_p": 0.9}
    assert recorder.requests[0]["authorization"] == "Bearer loopback-key"
    assert answers == [([1, 20, 21], [40, 41], [-0.5, -1.25], {"type": "stop"}),
                       ([1, 22], [42], [-0.75], {"type": "length", "length": 1}),
                       ([1, 23, 24], [40, 41], [-0.5, -1.25], {"type": "stop"})]


async def streamed(config, calls: list[dict]) -> list:
    """stream_many's answers in the order of `calls`, and how many yields brought them."""
    from hermes_stack.environment.pooled_http import PooledSGLangServer

    server = PooledSGLangServer(config)
    answers: list = [None] * len(calls)
    yields = 0
    try:
        async for pairs in server.stream_many([dict(call) for call in calls]):
            yields += 1
            for index, answer in pairs:
                assert answers[index] is None
                answers[index] = answer
    finally:
        await server.pool.aclose()
    return answers, yields


def test_stream_many_says_what_generate_many_says_streamed_and_reads_each_rows_last_event(recorder, tokenizer_dir):
    """SGLang's batched stream read: progress events (finish_reason null) skipped, each row's last event read as
    generate_many reads its answer, by its index, whatever the order and however the bytes are split."""
    config = server_config(recorder.url, tokenizer_dir)
    plain = asyncio.run(batched(config, [BATCHED]))[0]
    answers, yields = asyncio.run(streamed(config, BATCHED))
    assert answers == plain and yields >= 2
    plain_body, stream_body = recorder.requests[0]["body"], recorder.requests[1]["body"]
    assert stream_body == {**plain_body, "stream": True}
    assert recorder.requests[1]["authorization"] == "Bearer loopback-key"


@pytest.mark.parametrize("ends, message", [("error", "stream failed: the scheduler died"),
                                           ("short", "ended with 1 of 3 answers missing")])
def test_a_stream_that_ends_short_or_with_an_error_event_raises_stream_failed(recorder, tokenizer_dir, ends, message):
    from hermes_stack.environment.pooled_http import StreamFailed

    recorder.stream_ends = ends
    with pytest.raises(StreamFailed, match=message):
        asyncio.run(streamed(server_config(recorder.url, tokenizer_dir), BATCHED))


async def batched(config, calls: list[list[dict]]) -> list:
    """generate_many once per entry of `calls`, on one server (what it learnt of the URL is kept between calls)."""
    from hermes_stack.environment.pooled_http import PooledSGLangServer

    server = PooledSGLangServer(config)
    try:
        return [await server.generate_many([dict(call) for call in batch]) for batch in calls]
    finally:
        await server.pool.aclose()


def test_behind_a_router_that_refuses_the_list_form_prompts_sharing_their_parameters_share_one_object(
        recorder, tokenizer_dir):
    """SGLang's router reads sampling_params as one object (422 for a list): after its first refusal, prompts 1 and
    3 (the same budget) go in one request with their one object, prompt 2 in another, at once; the answers come back
    in the callers' order, and the next call does not try the list again."""
    recorder.refuse_list = True
    first, again = asyncio.run(batched(server_config(recorder.url, tokenizer_dir), [BATCHED, BATCHED[1:2]]))
    lists = [r for r in recorder.requests if isinstance(r["body"]["sampling_params"], list)]
    assert len(lists) == 1  # refused once, never asked again
    objects = [r["body"] for r in recorder.requests if isinstance(r["body"]["sampling_params"], dict)]
    assert sorted(b["input_ids"] for b in objects) == [[[1, 20, 21], [1, 23, 24]], [[1, 22]], [[1, 22]]]
    shared = next(b for b in objects if len(b["input_ids"]) == 2)
    assert shared["sampling_params"] == {"n": 1, "max_new_tokens": 7, "temperature": 0.5, "top_p": 0.9}
    assert first == [([1, 20, 21], [40, 41], [-0.5, -1.25], {"type": "stop"}),
                     ([1, 22], [40, 41], [-0.5, -1.25], {"type": "stop"}),
                     ([1, 23, 24], [42], [-0.75], {"type": "length", "length": 1})]
    assert again == [([1, 22], [40, 41], [-0.5, -1.25], {"type": "stop"})]


def test_generate_many_refuses_several_completions_per_prompt_and_a_short_answer(recorder, tokenizer_dir):
    from hermes_stack.environment.pooled_http import PooledSGLangServer

    server = PooledSGLangServer(server_config(recorder.url, tokenizer_dir))
    with pytest.raises(ValueError, match="one completion per prompt"):
        asyncio.run(server.generate_many([{**BATCHED[0], "n": 2}]))
    assert recorder.requests == []  # refused before anything was sent
    recorder.short_by = 1
    with pytest.raises(ValueError, match="2 result"):
        asyncio.run(server.generate_many([dict(call) for call in BATCHED]))


class Env:
    """What the Atropos calls read from a BaseEnv: config, env_id, the server manager's weight update."""

    def __init__(self, url: str):
        from types import SimpleNamespace

        self.config = SimpleNamespace(rollout_server_url=url, max_num_workers=32, max_num_workers_per_node=8)
        self.env_id = 7
        self.weights: list[float] = []

        async def update_weight(weight):
            self.weights.append(weight)

        self.server = SimpleNamespace(servers=[object()], update_weight=update_weight)


def make_env(url: str, pooled: bool):
    from atroposlib.envs.base import BaseEnv

    from hermes_stack.environment.pooled_http import PooledAtroposCalls

    upstream = {"_post_json_with_compression": BaseEnv._post_json_with_compression,
                "_send_scored_data_to_api": BaseEnv._send_scored_data_to_api, "get_status": BaseEnv.get_status}
    cls = type("Pooled", (PooledAtroposCalls, Env), {}) if pooled else type("Upstream", (Env,), upstream)
    return cls(url)


def group(n: int) -> dict:
    return {"tokens": [[1, 2, 3 + n]] * 2, "masks": [[-100, 2, 3 + n]] * 2, "scores": [1.0, 0.0],
            "padding": "x" * (2000 if n == 2 else 0)}  # group 2 is big enough to be gzipped


async def atropos_calls(env) -> None:
    await env.get_status()
    await env._send_scored_data_to_api(group(1))
    await env._send_scored_data_to_api([group(2), group(3)])
    await env.get_status()
    if hasattr(env, "close_pools"):
        await env.close_pools()


def test_pooled_atropos_calls_say_what_atroposlib_does_over_one_connection(recorder):
    upstream = make_env(recorder.url, pooled=False)
    asyncio.run(atropos_calls(upstream))
    upstream_requests, upstream_connections = list(recorder.requests), recorder.connections
    recorder.requests.clear()
    recorder.connections = 0

    pooled = make_env(recorder.url, pooled=True)
    asyncio.run(atropos_calls(pooled))
    unzipped = lambda requests: [{k: v for k, v in r.items() if k != "encoding"} for r in requests]
    assert unzipped(recorder.requests) == unzipped(upstream_requests)  # the same requests, bodies included
    assert [r["encoding"] for r in recorder.requests] == [None] * 4  # plain JSON: no gzip on a local network
    assert [r["path"] for r in upstream_requests] == ["/status-env", "/scored_data", "/scored_data_list",
                                                      "/status-env"]
    assert upstream_requests[0]["body"] == {"env_id": 7} and upstream_requests[1]["body"]["env_id"] == 7
    assert upstream_requests[2]["encoding"] == "gzip"
    assert (pooled.status_dict, pooled.max_num_workers, pooled.weights) == (STATUS, 32, [0.5, 0.5])
    assert (upstream.status_dict, upstream.weights) == (STATUS, [0.5, 0.5])
    assert upstream_connections == 4 and recorder.connections == 1


def test_only_an_sglang_config_list_gets_the_pooled_server():
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline

    from hermes_stack.environment.pooled_http import uses_upstream_sglang

    sglang = APIServerConfig(server_type="sglang", base_url="http://x/v1", api_key="k", model_name="m")
    openai = sglang.model_copy(update={"server_type": "openai"})
    assert uses_upstream_sglang([sglang]) and uses_upstream_sglang([sglang, sglang])
    assert not uses_upstream_sglang([openai]) and not uses_upstream_sglang([sglang, openai])
    assert not uses_upstream_sglang([]) and not uses_upstream_sglang(ServerBaseline())


def test_the_built_in_environment_uses_the_pooled_classes():
    from atroposlib.envs.base import BaseEnv

    from hermes_stack.environment.env import HermesMathEnv
    from hermes_stack.environment.pooled_http import PooledAtroposCalls, PooledSGLangServer

    assert HermesMathEnv.server_cls is PooledSGLangServer
    mro = HermesMathEnv.__mro__
    assert mro.index(PooledAtroposCalls) < mro.index(BaseEnv)


def test_stream_events_reads_crlf_framing_multi_line_data_and_comments_however_the_bytes_are_split():
    """The server-sent-events format, not only SGLang's own framing: CRLF (a proxy may re-frame), several `data:`
    lines joined with LF, `:` comments and other fields skipped; a CRLF split across two chunks is not read as two
    line ends."""
    from hermes_stack.environment.pooled_http import stream_events

    body = b': keep-alive\r\n\r\ndata: {"a":\r\ndata:1}\r\nid: 7\r\n\r\ndata: [DONE]\r\n\r\n'
    for cut in range(len(body) + 1):
        payloads, rest = stream_events(body[:cut])
        more, rest = stream_events(rest + body[cut:])
        assert payloads + more == [b'{"a":\n1}', b"[DONE]"] and rest == b"", cut
    assert stream_events(b"data: x\n\ndata: y") == ([b"x"], b"data: y")
    # LF framing, as SGLang and the built-in server send it: a one-line event is read without splitting it (issue
    # 22), and reads as the general rule reads it; other one-line fields and comments are still skipped
    lf = b'data: {"i":0}\n\ndata:{"i":1}\n\nid: 3\n\n: ping\n\ndata:  two spaces\n\nevent: x\ndata: y\n\ndata: [DONE]\n\n'
    assert stream_events(lf) == ([b'{"i":0}', b'{"i":1}', b" two spaces", b"y", b"[DONE]"], b"")
    assert stream_events(lf.replace(b"\n", b"\r\n")) == stream_events(lf)
    # CR-only framing: the body's last CR is held as maybe half a CRLF, and read as a line end once the body ends
    payloads, rest = stream_events(b"data: x\r\rdata: [DONE]\r\r")
    assert payloads == [b"x"] and stream_events(rest, final=True) == ([b"[DONE]"], b"")

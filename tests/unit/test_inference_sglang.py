"""The sglang backend without SGLang: argv/env/key file, proxying (httpx.MockTransport), supervision (a stub child)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from fakes.loopback import free_port

from hermes_stack.errors import StackError
from hermes_stack.inference.backend import BackendReply
from hermes_stack.inference.service_config import load_service_config
from hermes_stack.inference.sglang import SGLangBackend, SGLangLaunch, child_env, launch_argv, write_key_config

KEY = "sk-internal-secret"


def test_argv_never_holds_the_key_and_binds_loopback(tmp_path):
    spec = SGLangLaunch(model_path="/models/qwen", served_model="Qwen/Qwen3-8B", port=30123, tp=2,
                        mem_fraction_static=0.8, max_lora_rank=32)
    config = write_key_config(tmp_path / "secret", KEY)
    argv = launch_argv(spec, config)
    assert KEY not in " ".join(argv)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "30123"
    assert argv[argv.index("--config") + 1] == str(config)
    assert argv[argv.index("--max-lora-rank") + 1] == "32" and "--enable-lora" in argv
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.8"
    assert json.loads(config.read_text().split(":", 1)[1]) == KEY
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700


def test_no_lora_flags_without_lora_and_env_drops_secrets():
    argv = launch_argv(SGLangLaunch(model_path="m", served_model="m"), Path("/tmp/c.yaml"))
    assert "--enable-lora" not in argv
    env = child_env({"PATH": "/bin", "HERMES_INFERENCE_KEY": KEY, "TINKER_API_KEY": "tml-x", "CUDA_VISIBLE_DEVICES": "0"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"}


def test_sglang_child_keeps_its_default_temperature_scaled_logprobs():
    """The trainer's ratio compares log-probs of softmax(logits / T) (trainer/algorithms.py). SGLang returns those by
    default; these variables (current and pre-PR-11686 names) would switch it to raw log-probs, so the child never
    inherits them, whatever the container's environment holds."""
    env = child_env({"PATH": "/bin", "SGLANG_RETURN_ORIGINAL_LOGPROB": "1", "RETURN_ORIGINAL_LOGPROB": "true"})
    assert env == {"PATH": "/bin"}


def test_service_config_gpu_profile_selects_sglang_with_lora(tmp_path):
    configs = Path(__file__).resolve().parents[2] / "configs"
    # temperature 1: the only one the tinker engine accepts (config/rules.py tinker_temperature)
    (tmp_path / "config_grpo.toml").write_text((configs / "config_grpo.toml").read_text()
                                               .replace("temperature = 0.8", "temperature = 1.0"))
    settings = json.loads((configs / "settings_grpo.json").read_text())
    settings["inference"]["server"] = "sglang"
    settings["trainer"]["engine"] = "tinker"
    (tmp_path / "settings_grpo.json").write_text(json.dumps(settings))
    cfg = load_service_config({"HERMES_CONFIG_DIR": str(tmp_path), "HERMES_ALGO": "grpo", "HERMES_PROFILE": "gpu",
                               "HERMES_INFERENCE_KEY": KEY})
    assert (cfg.server, cfg.lora_rank, cfg.api_key) == ("sglang", 32, KEY)
    assert KEY not in cfg.describe()


class FakeUpstream:
    """An SGLang stand-in behind httpx.MockTransport: records requests, checks the key."""

    def __init__(self):
        self.requests: list[tuple[str, dict]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return httpx.Response(401, json={"error": "bad key"})
        body = json.loads(request.content) if request.content else {}
        self.requests.append((request.url.path, body))
        if request.url.path == "/health_generate":
            return httpx.Response(200, text="")
        if request.url.path == "/generate":
            return httpx.Response(200, json=[{"text": "x", "output_ids": [5],
                                              "meta_info": {"output_token_logprobs": [[-0.1, 5, None]]}}] * 2)
        if request.url.path == "/update_weights_from_disk":
            ok = body.get("model_path") == "/data/weights/step-1"
            return httpx.Response(200 if ok else 400, json={"success": ok, "message": "m"})
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(200, json={"object": "chat.completion", "choices": []})
        if request.url.path in ("/load_lora_adapter", "/unload_lora_adapter"):
            return httpx.Response(200, json={"success": True, "message": "ok"})
        return httpx.Response(404, json={"detail": "Not Found"})


def proxy(upstream: FakeUpstream) -> SGLangBackend:
    spec = SGLangLaunch(model_path="/m", served_model="served", port=1)
    return SGLangBackend(spec, KEY, transport=httpx.MockTransport(upstream), spawn=False)


def test_proxy_forwards_with_key_and_injects_newest_adapter():
    upstream = FakeUpstream()
    backend = proxy(upstream)

    async def run():
        await backend.start()
        assert backend.is_ready()
        first = await backend.generate({"input_ids": [1, 2], "sampling_params": {"n": 2}, "return_logprob": True})
        for step in (1, 2):
            assert (await backend.load_lora_adapter({"lora_name": f"step-{step}", "lora_path": "/w"}))["success"]
        await backend.generate({"input_ids": [1, 2]})
        await backend.chat_completions({"model": "served", "messages": []})
        moved = await backend.update_weights_from_disk({"model_path": "/data/weights/step-1"})
        refused = await backend.update_weights_from_disk({"model_path": "/nope"})
        await backend.stop()
        return first, moved, refused

    first, moved, refused = asyncio.run(run())
    assert len(first) == 2
    paths = [p for p, _ in upstream.requests]
    generate_bodies = [b for p, b in upstream.requests if p == "/generate"]
    assert "lora_path" not in generate_bodies[0]
    assert generate_bodies[1]["lora_path"] == "step-2"
    assert next(b for p, b in upstream.requests if p == "/v1/chat/completions")["lora_path"] == "step-2"
    assert ("/unload_lora_adapter", {"lora_name": "step-1"}) in upstream.requests
    assert backend.models() == ["served", "step-2"]
    assert moved["success"] is True and refused["success"] is False
    assert paths[0] == "/health_generate"


def test_proxy_passes_upstream_errors_and_reports_unreachable():
    def down(request):
        raise httpx.ConnectError("refused")

    async def run(backend):
        with pytest.raises(BackendReply) as reply:
            await backend.completions({"prompt": "x"})
        return reply.value

    spec = SGLangLaunch(model_path="/m", served_model="s", port=1)
    reply = asyncio.run(run(SGLangBackend(spec, KEY, transport=httpx.MockTransport(down), spawn=False)))
    assert reply.status == 503
    upstream = FakeUpstream()
    upstream_404 = SGLangBackend(spec, KEY, transport=httpx.MockTransport(lambda r: httpx.Response(
        422, json={"detail": "bad"})), spawn=False)
    assert asyncio.run(run(upstream_404)).status == 422
    assert upstream.requests == []


STUB = textwrap.dedent("""
    # Stands in for `python -m sglang.launch_server`: reads the key from --config, serves /health_generate with it.
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    args = sys.argv[1:]
    key = json.loads(open(args[args.index("--config") + 1]).read().split(":", 1)[1])
    port = int(args[args.index("--port") + 1])
    mode = args[args.index("--served-model-name") + 1]
    if mode == "crash":
        print("CUDA error: no kernel image", flush=True)
        sys.exit(3)
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.headers.get("Authorization") == "Bearer " + key
            self.send_response(200 if ok else 401)
            self.end_headers()
        def log_message(self, *a):
            pass
    HTTPServer((args[args.index("--host") + 1], port), H).serve_forever()
""")




def test_supervisor_waits_for_readiness_with_the_key_from_the_config_file(tmp_path, monkeypatch):
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    monkeypatch.setenv("HERMES_INFERENCE_KEY", KEY)  # must not leak to the child: the stub reads the file
    spec = SGLangLaunch(model_path="/m", served_model="ok", port=free_port(), launcher=(sys.executable, str(stub)),
                        start_timeout_s=30)
    backend = SGLangBackend(spec, KEY)

    async def run():
        await backend.start()
        ready = backend.is_ready()
        secret_dir_gone = backend._secret_dir is None
        pid = backend._child.process.pid
        await backend.stop()
        return ready, secret_dir_gone, pid

    ready, secret_dir_gone, pid = asyncio.run(run())
    assert ready and secret_dir_gone
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_child_that_dies_before_ready_is_a_clear_error(tmp_path):
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    spec = SGLangLaunch(model_path="/m", served_model="crash", port=free_port(), launcher=(sys.executable, str(stub)),
                        start_timeout_s=30)
    backend = SGLangBackend(spec, KEY)

    async def run():
        try:
            await backend.start()
        finally:
            await backend.stop()

    with pytest.raises(StackError, match=r"exited with code 3 .*CUDA error"):
        asyncio.run(run())


def test_front_answers_health_while_sglang_loads_and_marks_ready_after(tmp_path):
    from fastapi.testclient import TestClient

    from hermes_stack.inference.server import create_app

    gate = asyncio.Event()

    backend = proxy(FakeUpstream())
    original_start = backend.start

    async def slow_start():
        await gate.wait()
        await original_start()

    backend.start = slow_start
    with TestClient(create_app(backend, KEY, data_dir=tmp_path)) as client:
        assert client.get("/health").json()["ready"] is False
        assert not (tmp_path / "ready" / "inference").exists()
        client.portal.call(gate.set)
        for _ in range(100):
            if client.get("/health").json()["ready"]:
                break
            client.portal.call(asyncio.sleep, 0.02)
        assert client.get("/health").json()["ready"] is True
        assert (tmp_path / "ready" / "inference").exists()
    assert not (tmp_path / "ready" / "inference").exists()

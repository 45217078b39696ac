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
    # the tensor-parallel balance check off (a restart beside the trainer on GPU 0 would fail it), nothing secret
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0", "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK": "true",
                   "SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK": "true", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "false"}
    # A user's setting, in any of the names, is the only one: SGLang forwards an old name's value onto the new name
    # (srt/environ.py `_DeprecatedEnv.apply`), so a default of ours under an old name would override it.
    for name in ("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK"):
        assert child_env({name: "true", "PATH": "/bin"}) == {name: "true", "PATH": "/bin"}


def test_sglang_child_keeps_its_default_temperature_scaled_logprobs():
    """The trainer's ratio compares log-probs of softmax(logits / T) (trainer/algorithms.py). SGLang returns those by
    default; these variables (current and pre-PR-11686 names) would switch it to raw log-probs, so the child never
    inherits them, whatever the container's environment holds."""
    env = child_env({"PATH": "/bin", "SGLANG_RETURN_ORIGINAL_LOGPROB": "1", "RETURN_ORIGINAL_LOGPROB": "true"})
    assert not {"SGLANG_RETURN_ORIGINAL_LOGPROB", "RETURN_ORIGINAL_LOGPROB"} & set(env) and env["PATH"] == "/bin"


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
        await asyncio.gather(*backend._tasks)  # older adapters are unloaded in the background
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


class StrictLoraUpstream(FakeUpstream):
    """SGLang's LoRA rules (lora_manager.py validate_new_adapter, tokenizer_control_mixin.py
    _unload_lora_adapter_locked): a loaded name is refused; an unload is answered only once released."""

    def __init__(self):
        super().__init__()
        self.loaded: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        if request.url.path == "/load_lora_adapter":
            self.requests.append((request.url.path, body))
            if body["lora_name"] in self.loaded:
                return httpx.Response(400, json={"success": False, "error_message": f"Failed to load LoRA adapter "
                                                 f"{body['lora_name']} because it is already loaded"})
            self.loaded.add(body["lora_name"])
            return httpx.Response(200, json={"success": True, "error_message": ""})
        if request.url.path == "/unload_lora_adapter":
            self.requests.append((request.url.path, body))
            self.loaded.discard(body["lora_name"])
            return httpx.Response(200, json={"success": True, "error_message": ""})
        return super().__call__(request)


def _export(folder: Path, content: bytes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(content)
    return str(folder)


def test_a_push_of_a_name_the_front_already_serves_from_that_export_succeeds_and_another_export_replaces_it(tmp_path):
    """After a restart the front loads the newest step-<N> itself; the trainer's retry of step-<N> must not get
    SGLang's 400 "already loaded" until its deadline. A re-trained step-<N> (another export) replaces the old one."""
    upstream = StrictLoraUpstream()
    backend = proxy(upstream)
    path = _export(tmp_path / "step-4", b"a")

    async def run():
        await backend.start()
        front = await backend.load_lora_adapter({"lora_name": "step-4", "lora_path": path})
        retry = await backend.load_lora_adapter({"lora_name": "step-4", "lora_path": path})
        loads_after_retry = sum(p == "/load_lora_adapter" for p, _ in upstream.requests)
        _export(tmp_path / "step-4", b"retrained")  # new file content and mtime: another export, same path
        replaced = await backend.load_lora_adapter({"lora_name": "step-4", "lora_path": path})
        await backend.stop()
        return front, retry, loads_after_retry, replaced

    front, retry, loads_after_retry, replaced = asyncio.run(run())
    assert front["success"] and retry["success"] and replaced["success"], (front, retry, replaced)
    assert loads_after_retry == 1  # the retry was answered by the front, SGLang was not asked again
    lora_calls = [(p, b["lora_name"]) for p, b in upstream.requests if "lora" in p]
    assert lora_calls == [("/load_lora_adapter", "step-4"), ("/unload_lora_adapter", "step-4"),
                          ("/load_lora_adapter", "step-4")]
    assert backend.models() == ["served", "step-4"]


def test_two_loads_of_one_name_at_once_load_it_once_and_both_succeed(tmp_path):
    """After a restart the front's own load of the newest step and the trainer's retry of it arrive together (seen in
    the GPU rehearsal): the second must not reach SGLang, which refuses a loaded name (lora_manager.py
    validate_new_adapter); loads are one at a time, as SGLang's lora lock makes them."""
    upstream = StrictLoraUpstream()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/load_lora_adapter":
            await asyncio.sleep(0.05)  # a load takes time: the other request comes in meanwhile
        return upstream(request)

    backend = proxy(handler)
    path = _export(tmp_path / "step-2", b"a")

    async def run():
        await backend.start()
        answers = await asyncio.gather(*(backend.load_lora_adapter({"lora_name": "step-2", "lora_path": path})
                                         for _ in range(2)))
        await backend.stop()
        return answers

    answers = asyncio.run(run())
    assert all(a["success"] for a in answers), answers
    assert sum(p == "/load_lora_adapter" for p, _ in upstream.requests) == 1


def test_an_old_adapter_is_unloaded_only_once_its_requests_are_answered_and_never_blocks_a_push(tmp_path):
    """SGLang's unload waits for every request holding the adapter, with the lock every load takes held: the front
    unloads in the background, after its own count of requests forwarded with that adapter reaches zero."""
    release = asyncio.Event()
    upstream = StrictLoraUpstream()

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            await release.wait()  # a long rollout on the old adapter
        return upstream(request)

    spec = SGLangLaunch(model_path="/m", served_model="served", port=1)
    backend = SGLangBackend(spec, KEY, transport=httpx.MockTransport(handler), spawn=False)

    async def run():
        await backend.start()
        await backend.load_lora_adapter({"lora_name": "step-1", "lora_path": _export(tmp_path / "s1", b"1")})
        rollout = asyncio.create_task(backend.generate({"input_ids": [1]}))  # holds step-1 (the default)
        await asyncio.sleep(0.05)
        pushed = await asyncio.wait_for(backend.load_lora_adapter(
            {"lora_name": "step-2", "lora_path": _export(tmp_path / "s2", b"2")}), 5)
        unload = await asyncio.wait_for(backend.unload_lora_adapter({"lora_name": "step-1"}), 5)  # the trainer's
        await asyncio.sleep(0.2)
        before = [b["lora_name"] for p, b in upstream.requests if p == "/unload_lora_adapter"]
        release.set()
        await rollout
        await asyncio.wait_for(asyncio.gather(*backend._tasks), 5)
        after = [b["lora_name"] for p, b in upstream.requests if p == "/unload_lora_adapter"]
        await backend.stop()
        return pushed, unload, before, after

    pushed, unload, before, after = asyncio.run(run())
    assert pushed["success"] and unload["success"]
    assert before == [] and after == ["step-1"]  # sent once, after the rollout; the trainer's own unload folded in
    assert backend.models() == ["served", "step-2"]


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
    if "--mem-fraction-static" in args:
        print("mem-fraction-static", args[args.index("--mem-fraction-static") + 1], flush=True)
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


def test_a_crashed_child_is_restarted_and_loads_the_newest_weights_before_it_counts_as_ready(tmp_path, monkeypatch):
    """As after a restart of the whole service: the restarted SGLang serves the newest synced step, and a trainer
    waiting for READY does not push while the front loads it (SGLang would refuse the second load of the name)."""
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    spec = SGLangLaunch(model_path="/m", served_model="ok", port=free_port(), launcher=(sys.executable, str(stub)),
                        start_timeout_s=30)
    backend = SGLangBackend(spec, KEY, on_fatal=lambda reason: None)
    seen: list[bool] = []

    async def run():
        await backend.start()
        backend.adapters, backend.default_adapter = ["step-1"], "step-1"
        loaded = asyncio.Event()

        async def after_restart():
            seen.append(backend.is_ready())  # not ready while the newest weights load
            backend.adapters, backend.default_adapter = ["step-2"], "step-2"
            loaded.set()

        backend.after_restart = after_restart
        first = backend._child.process
        first.kill()
        await asyncio.wait_for(loaded.wait(), 30)
        for _ in range(100):
            if backend.is_ready():
                break
            await asyncio.sleep(0.02)
        ready, child = backend.is_ready(), backend._child.process
        await backend.stop()
        return ready, child is not first

    ready, relaunched = asyncio.run(run())
    assert relaunched and ready and seen == [False]
    assert backend.models() == ["ok", "step-2"]  # step-1 of the crashed child is not named to the new one


def test_launch_fraction_keeps_sglangs_static_share_whatever_is_free_at_its_start():
    """SGLang's static share (weights and KV pool) is `free at its start x fraction` (model_runner passes the free
    memory it read before loading to init_memory_pool as total_gpu_memory)."""
    from hermes_stack.inference.sglang import launch_fraction

    gib = 2**30
    assert launch_fraction(0.55, 80 * gib - gib // 2, 80 * gib) == 0.55  # an empty card: its context and reserve
    # a trainer holding 30 GiB: free 50 GiB at SGLang's start
    raised = launch_fraction(0.55, 50 * gib, 80 * gib)
    assert raised == 0.862  # 0.55 x 80 / 51, rounded down
    planned_static, restart_static = 0.55 * 80 * gib, 50 * gib * raised
    # within the allowance's share and the rounding of the plan, never above it; the planned 0.55 would give 27.5 GiB
    assert planned_static - gib <= restart_static <= planned_static
    assert 50 * gib * 0.55 == pytest.approx(planned_static - 16.5 * gib)
    assert launch_fraction(0.55, 10 * gib, 80 * gib) == 0.99  # more than the card: at most MAX_FRACTION
    assert launch_fraction(0.55, 0, 0) == 0.55


def test_a_restart_beside_a_running_trainer_raises_the_fraction_by_what_it_holds(tmp_path):
    """SGLang applies --mem-fraction-static to the memory free at its start: relaunched with the planned fraction
    beside the trainer, its KV pool would lose the trainer's whole share (or SGLang would not start)."""
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    gib = 2**30
    readings = iter([(80 * gib - gib // 2, 80 * gib), (50 * gib, 80 * gib)])  # first start, then the restart

    async def probe(spec):
        return next(readings)

    spec = SGLangLaunch(model_path="/m", served_model="ok", port=free_port(), launcher=(sys.executable, str(stub)),
                        start_timeout_s=30, mem_fraction_static=0.55)
    backend = SGLangBackend(spec, KEY, on_fatal=lambda reason: None, memory_probe=probe)

    async def run():
        await backend.start()
        first = backend._child
        restarted = asyncio.Event()

        async def after_restart():
            restarted.set()

        backend.after_restart = after_restart
        first.process.kill()
        await asyncio.wait_for(restarted.wait(), 30)
        second = backend._child
        await backend.stop()
        return list(first.tail), list(second.tail)

    first_out, second_out = asyncio.run(run())
    assert "mem-fraction-static 0.55" in first_out
    assert "mem-fraction-static 0.862" in second_out
    assert backend.spec.mem_fraction_static == 0.55  # the plan itself is kept for the next launch


def test_an_unreadable_card_keeps_the_planned_fraction():
    from hermes_stack.inference.sglang import probe_gpu_memory

    spec = SGLangLaunch(model_path="/m", served_model="ok", mem_fraction_static=0.55)
    # This machine has no GPU: torch answers no device (or the import fails), and the plan stands.
    assert asyncio.run(probe_gpu_memory(spec)) is None

    async def unreadable(spec):
        return None

    backend = SGLangBackend(spec, KEY, memory_probe=unreadable, spawn=False)
    assert asyncio.run(backend._spec_for_free_memory()).mem_fraction_static == 0.55


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


def test_front_is_ready_only_after_its_own_load_of_the_newest_weights_and_reports_its_start(tmp_path):
    """The backend is up before the front has loaded step-<N> from the data volume; a trainer that pushed then would
    race that load. /health says ready only after it, with the measured start and the backend's start limit."""
    from fastapi.testclient import TestClient

    from hermes_stack.inference.server import create_app

    _export(tmp_path / "weights" / "step-2", b"w")
    loading = asyncio.Event()
    upstream = StrictLoraUpstream()
    backend = proxy(upstream)
    original = backend.load_lora_adapter

    async def slow_load(body):
        await loading.wait()
        return await original(body)

    backend.load_lora_adapter = slow_load
    with TestClient(create_app(backend, KEY, data_dir=tmp_path)) as client:
        for _ in range(100):
            if backend.is_ready():
                break
            client.portal.call(asyncio.sleep, 0.02)
        health = client.get("/health").json()
        assert backend.is_ready() and health["ready"] is False and health["start_s"] is None
        client.portal.call(loading.set)
        for _ in range(100):
            if client.get("/health").json()["ready"]:
                break
            client.portal.call(asyncio.sleep, 0.02)
        health = client.get("/health").json()
    assert health["ready"] is True and health["start_s"] >= 0 and health["start_timeout_s"] == 1800.0
    assert ("/load_lora_adapter", {"lora_name": "step-2", "lora_path": str(tmp_path / "weights" / "step-2")}) \
        in upstream.requests


def test_a_name_sglang_already_serves_counts_as_loaded_and_becomes_the_default(tmp_path):
    """A name loaded in SGLang past this front (at its launch, or by another client) is refused as "already loaded"
    (lora_manager.py validate_new_adapter): the front counts it as served, so its newest-weights load after a restart
    does not fall back to the base model (seen in the GPU rehearsal)."""
    upstream = StrictLoraUpstream()
    upstream.loaded.add("step-3")
    backend = proxy(upstream)
    path = _export(tmp_path / "step-3", b"a")

    async def run():
        await backend.start()
        answer = await backend.load_lora_adapter({"lora_name": "step-3", "lora_path": path})
        await backend.stop()
        return answer

    answer = asyncio.run(run())
    assert answer["success"], answer
    assert backend.default_adapter == "step-3" and backend.models() == ["served", "step-3"]


def test_an_app_that_does_not_own_the_data_volume_loads_nothing_at_start_and_writes_no_marker(tmp_path):
    """The SGLang stand-in runs this app behind the front, on the same volume: like SGLang it must neither load the
    newest step itself (the front's own load then met "already loaded" in the rehearsal) nor write or delete the
    front's ready marker. Its load paths are still checked against the volume."""
    from fastapi.testclient import TestClient

    from hermes_stack.inference.server import create_app

    _export(tmp_path / "weights" / "step-2", b"w")
    upstream = StrictLoraUpstream()
    (tmp_path / "ready").mkdir()
    (tmp_path / "ready" / "inference").write_text("{}")  # the front's marker
    with TestClient(create_app(proxy(upstream), KEY, data_dir=tmp_path, owns_data_volume=False)) as client:
        outside = client.post("/load_lora_adapter", json={"lora_name": "x", "lora_path": "/etc"},
                              headers={"Authorization": f"Bearer {KEY}"})
    assert outside.status_code == 403 and "outside the data volume" in outside.text
    assert not any(path == "/load_lora_adapter" for path, _ in upstream.requests), upstream.requests
    assert (tmp_path / "ready" / "inference").read_text() == "{}"  # neither rewritten nor removed

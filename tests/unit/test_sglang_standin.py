"""The GPU rehearsal's SGLang stand-in (tests/docker/fixtures/sglang_standin) is as strict as SGLang 0.5.18 where the
built-in backend it wraps is forgiving: each rule it mirrors (named in its docstring, file and function) is checked
here against a scripted inner backend, so a front that only works against a forgiving server fails in CI."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
from pathlib import Path

import pytest

from hermes_stack.inference.backend import BackendReply

STANDIN = Path(__file__).resolve().parents[1] / "docker" / "fixtures" / "sglang_standin" / "sglang" / "launch_server.py"


def standin():
    spec = importlib.util.spec_from_file_location("sglang_standin_launch_server", STANDIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Inner:
    """The built-in backend's forgiving behaviour: replaces a same-name adapter, unloads at once, serves whatever it
    is asked (its newest adapter for an unknown or missing name). Generations can be held open."""

    def __init__(self):
        self.adapters: dict[str, str] = {}
        self.calls: list[tuple[str, object]] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def load_lora_adapter(self, body):
        self.calls.append(("load", body["lora_name"]))
        self.adapters[body["lora_name"]] = body["lora_path"]
        return {"success": True, "message": "ok", "loaded_adapters": dict(self.adapters)}

    async def unload_lora_adapter(self, body):
        self.calls.append(("unload", body["lora_name"]))
        self.adapters.pop(body["lora_name"], None)
        return {"success": True, "message": "ok"}

    async def generate(self, body):
        self.calls.append(("generate", body.get("lora_path")))
        await self.hold.wait()
        return {"text": "x"}

    async def completions(self, body):
        self.calls.append(("completions", body.get("model")))
        return {"choices": []}

    async def chat_completions(self, body):
        self.calls.append(("chat", body.get("model")))
        return {"choices": []}


def gate(module, inner=None):
    args = argparse.Namespace(enable_lora=True, max_lora_rank=32)
    return module.LoraGate(inner or Inner(), args)


def adapter_dir(tmp_path: Path, name: str, rank: int = 8) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"r": rank}))
    return str(folder)


def test_a_second_load_of_a_loaded_name_is_refused_not_replaced(tmp_path):
    module = standin()
    g = gate(module)

    async def run():
        first = await g.load_lora_adapter({"lora_name": "step-3", "lora_path": adapter_dir(tmp_path, "a")})
        again = await g.load_lora_adapter({"lora_name": "step-3", "lora_path": adapter_dir(tmp_path, "b")})
        return first, again

    first, again = asyncio.run(run())
    assert first["success"] is True
    assert again == {"success": False, "error_message": "Failed to load LoRA adapter step-3 because it is already "
                                                        "loaded"}
    assert g.registry == {"step-3": str(tmp_path / "a")}
    assert [c for c in g.inner.calls if c[0] == "load"] == [("load", "step-3")]  # the inner one was never asked


def test_an_unload_waits_for_the_requests_holding_the_adapter_and_loads_wait_behind_it(tmp_path):
    module = standin()
    inner = Inner()
    g = gate(module, inner)

    async def run():
        await g.load_lora_adapter({"lora_name": "step-1", "lora_path": adapter_dir(tmp_path, "a")})
        inner.hold.clear()
        rollout = asyncio.create_task(g.generate({"input_ids": [1], "lora_path": "step-1"}))
        await asyncio.sleep(0.05)
        unload = asyncio.create_task(g.unload_lora_adapter({"lora_name": "step-1"}))
        await asyncio.sleep(0.05)
        load = asyncio.create_task(g.load_lora_adapter({"lora_name": "step-2",
                                                        "lora_path": adapter_dir(tmp_path, "b")}))
        await asyncio.sleep(0.05)
        pending = (unload.done(), load.done(), "step-1" in g.registry)
        inner.hold.set()  # the rollout finishes: the unload goes through, then the load
        await rollout
        return pending, await unload, await load

    pending, unloaded, loaded = asyncio.run(run())
    assert pending == (False, False, False)  # unregistered at once, unloaded only after the request, load queued
    assert unloaded["success"] is True and loaded["success"] is True
    order = [c for c in inner.calls if c[0] in ("unload", "load")]
    assert order == [("load", "step-1"), ("unload", "step-1"), ("load", "step-2")]


def test_an_unknown_sampling_parameter_fails_the_request():
    module = standin()
    g = gate(module)
    assert module.unknown_sampling_params({"temperature": 0.8, "top_p": 1.0, "max_new_tokens": 4}) == []
    assert module.unknown_sampling_params([{"n": 2}, {"logprobs": True, "seed": 1}]) == ["logprobs", "seed"]
    with pytest.raises(BackendReply) as reply:
        asyncio.run(g.generate({"input_ids": [1], "sampling_params": {"temperature": 0.8, "seed": 3}}))
    assert reply.value.status == 500  # SGLang: TypeError from SamplingParams(**kw), uncaught by generate_request
    assert not any(c[0] == "generate" for c in g.inner.calls)


def test_an_adapter_never_loaded_is_an_error_an_unloaded_one_is_reloaded_and_none_means_the_base_model(tmp_path):
    module = standin()
    inner = Inner()
    g = gate(module, inner)

    async def run():
        with pytest.raises(BackendReply) as unknown:
            await g.generate({"input_ids": [1], "lora_path": "step-9"})
        with pytest.raises(BackendReply) as unknown_openai:
            await g.chat_completions({"model": "served:step-9", "messages": []})
        await g.load_lora_adapter({"lora_name": "step-1", "lora_path": adapter_dir(tmp_path, "a")})
        await g.generate({"input_ids": [1]})
        await g.unload_lora_adapter({"lora_name": "step-1"})
        await g.generate({"input_ids": [1], "lora_path": "step-1"})
        await g.completions({"model": "served", "lora_path": "step-1"})
        return unknown.value, unknown_openai.value

    unknown, unknown_openai = asyncio.run(run())
    assert unknown.status == 400 and "never been loaded: step-9" in unknown.body["error"]["message"]
    assert unknown_openai.status == 400
    assert ("generate", "base") in inner.calls  # no adapter named: the base model, not the newest adapter
    assert inner.calls[-3:] == [("load", "step-1"), ("generate", "step-1"), ("completions", "step-1")]
    assert g.in_flight == {}


def test_its_start_can_be_made_slower_than_a_ride_out_bound(monkeypatch, tmp_path, capsys):
    module = standin()
    slept: list[float] = []
    monkeypatch.setattr(module.time, "sleep", slept.append)
    monkeypatch.setenv("HERMES_STANDIN_START_DELAY_S", "150")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # A hub id while offline: main() returns 1 right after the load delay, before any port would open.
    assert module.main(["--model-path", "org/absent", "--port", "1"]) == 1
    assert slept == [150.0]
    out = capsys.readouterr().out
    assert out.index("loading for 150 s") < out.index("HF_HUB_OFFLINE=1: cannot download it")


@pytest.mark.parametrize(("launched", "adapter", "loads"), [
    (["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
     ["model.layers.0.self_attn.q_proj", "v_proj", "o_proj", "down_proj"], True),
    (["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], ["q_proj", "lm_head"], False),
    (["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "all-linear", True),
    (["all"], ["q_proj", "lm_head", "embed_tokens"], True),
])
def test_an_adapter_loads_only_when_its_modules_are_among_the_launch_target_modules(tmp_path, launched, adapter, loads):
    """lora/mem_pool.py `can_support`: an adapter with lm_head is refused by a server launched without it."""
    module = standin()
    args = module.parse_args(["--model-path", "/m", "--enable-lora", "--max-lora-rank", "32",
                              "--lora-target-modules", *launched])
    g = module.LoraGate(Inner(), args)
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "target_modules": adapter}))
    answer = asyncio.run(g.load_lora_adapter({"lora_name": "a", "lora_path": str(folder)}))
    assert answer["success"] is loads
    if not loads:
        assert "--lora-target-modules" in answer["error_message"]


def test_the_launch_refuses_a_target_module_sglang_does_not_know():
    module = standin()
    with pytest.raises(SystemExit):
        module.parse_args(["--model-path", "/m", "--lora-target-modules", "all-linear"])

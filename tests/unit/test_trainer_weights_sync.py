"""Weight sync: atomic export dirs, pruning, and SGLang-shaped update calls (full weights vs LoRA adapter)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from hermes_stack.modelcore.weights_layout import export_step_weights, prune_weight_dirs
from hermes_stack.trainer.weights_sync import InferenceClient, InferenceError, inference_root


def test_root_strips_the_v1_suffix_not_characters() -> None:
    assert inference_root("http://inference:8001/v1") == "http://inference:8001"
    assert inference_root("http://inference:8001/v1/") == "http://inference:8001"
    assert inference_root("http://h:8001") == "http://h:8001"  # rstrip("/v1") would give http://h:800


class Exporter:
    def __init__(self, fail: bool = False):
        self.fail = fail

    def export_weights(self, directory: Path) -> Path:
        (directory / "model.safetensors").write_bytes(b"w")
        if self.fail:
            raise RuntimeError("disk full")
        return directory


def test_export_is_renamed_into_place_and_a_failed_one_leaves_no_step_dir(tmp_path: Path) -> None:
    assert export_step_weights(Exporter(), tmp_path, 3) == tmp_path / "step-3"
    assert (tmp_path / "step-3" / "model.safetensors").read_bytes() == b"w"
    with pytest.raises(RuntimeError):
        export_step_weights(Exporter(fail=True), tmp_path, 4)
    assert not (tmp_path / "step-4").exists()
    removed = prune_weight_dirs(tmp_path, keep=3)
    assert [p.name.startswith(".tmp-step-4") for p in removed] == [True]


def test_prune_keeps_the_newest_numerically(tmp_path: Path) -> None:
    for n in (1, 2, 9, 10):
        (tmp_path / f"step-{n}").mkdir()
    prune_weight_dirs(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-10", "step-9"]


def _client(handler) -> tuple[InferenceClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    return InferenceClient("http://inference:8001/v1", "k3y", transport=httpx.MockTransport(record)), seen


def test_full_weights_use_update_weights_from_disk_with_the_bearer_key(tmp_path: Path) -> None:
    client, seen = _client(lambda r: httpx.Response(200, json={"success": True, "message": "ok"}))
    client.push_weights(tmp_path, 7)
    assert str(seen[0].url) == "http://inference:8001/update_weights_from_disk"
    assert seen[0].headers["Authorization"] == "Bearer k3y"
    assert json.loads(seen[0].content) == {"model_path": str(tmp_path)}


def test_a_lora_adapter_dir_uses_load_lora_adapter(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text("{}")
    client, seen = _client(lambda r: httpx.Response(200, json={"success": True}))
    client.push_weights(tmp_path, 7)
    assert str(seen[0].url) == "http://inference:8001/load_lora_adapter"
    assert json.loads(seen[0].content) == {"lora_name": "step-7", "lora_path": str(tmp_path)}


def test_each_new_adapter_unloads_the_one_loaded_before_it(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text("{}")
    client, seen = _client(lambda r: httpx.Response(200, json={"success": True}))
    for step in (1, 2, 3):
        client.push_weights(tmp_path, step)
        client.settle()  # unloads run in the background
    calls = [(r.url.path, json.loads(r.content)["lora_name"]) for r in seen]
    assert calls == [("/load_lora_adapter", "step-1"),
                     ("/load_lora_adapter", "step-2"), ("/unload_lora_adapter", "step-1"),
                     ("/load_lora_adapter", "step-3"), ("/unload_lora_adapter", "step-2")]


def test_a_push_of_an_adapter_name_already_loaded_counts_as_done(tmp_path: Path) -> None:
    """SGLang refuses a loaded name with 400 (lora_manager.py validate_new_adapter). After an inference restart the
    front loads step-<N> itself; the trainer's retry of step-<N> then gets that answer, and the name is served."""
    (tmp_path / "adapter_config.json").write_text("{}")
    message = "Failed to load LoRA adapter step-5 because it is already loaded"
    client, _ = _client(lambda r: httpx.Response(400, json={"success": False, "message": message}))
    assert client.push_weights(tmp_path, 5)["success"] is True
    client, _ = _client(lambda r: httpx.Response(400, json={"success": False, "error_message": message}))
    assert client.push_weights(tmp_path, 5)["success"] is True
    client, _ = _client(lambda r: httpx.Response(400, json={"success": False, "message": "rank 64 too large"}))
    with pytest.raises(InferenceError, match="rank 64"):
        client.push_weights(tmp_path, 5)


def test_an_unload_that_waits_for_long_rollouts_does_not_block_the_push(tmp_path: Path) -> None:
    """SGLang's unload waits for every request holding the old adapter; this client's timeout is 60 s. The push
    returns as soon as the new adapter is loaded; the unload of the old one completes on its own."""
    import threading

    (tmp_path / "adapter_config.json").write_text("{}")
    rollout_done = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/unload_lora_adapter":
            assert rollout_done.wait(10)  # held until the rollout on the old adapter ends
        return httpx.Response(200, json={"success": True})

    client, seen = _client(handler)
    client.push_weights(tmp_path, 1)
    finished = threading.Event()
    pusher = threading.Thread(target=lambda: (client.push_weights(tmp_path, 2), finished.set()), daemon=True)
    pusher.start()
    assert finished.wait(5), "the push waited for the old adapter's unload"
    rollout_done.set()
    client.settle()
    assert [(r.url.path, json.loads(r.content)["lora_name"]) for r in seen][-1] == ("/unload_lora_adapter", "step-1")


def test_readiness_is_the_ready_field_not_the_status_and_the_restart_bound_follows_the_start_time() -> None:
    answers = iter([{"status": "ok", "ready": False, "start_s": None, "start_timeout_s": 1800.0},
                    {"status": "ok", "ready": True, "start_s": 150.0, "start_timeout_s": 1800.0}])
    client, _ = _client(lambda r: httpx.Response(200, json=next(answers)))
    assert client.health() is True and client.restart_bound_s(120) == 120  # alive; nothing learnt yet
    assert client.ready() is True and client.start_s == 150.0
    assert client.restart_bound_s(120) == 2 * 150 + 60  # the model's own start time, not the fixed 120 s
    client.start_s = 5000.0
    assert client.restart_bound_s(120) == 1800 + 60  # never past the front's own start limit
    plain, _ = _client(lambda r: httpx.Response(200, text="OK"))  # a server without the field
    assert plain.ready() is True and plain.restart_bound_s(120) == 120
    loading, _ = _client(lambda r: httpx.Response(200, json={"status": "ok", "ready": False}))
    assert loading.health() is True and loading.ready() is False


def test_rejected_update_names_the_message(tmp_path: Path) -> None:
    client, _ = _client(lambda r: httpx.Response(400, json={"success": False, "message": "vocab size differs"}))
    with pytest.raises(InferenceError, match="vocab size differs"):
        client.push_weights(tmp_path, 1)
    client, _ = _client(lambda r: httpx.Response(200, json={"success": False, "message": "shape mismatch"}))
    with pytest.raises(InferenceError, match="shape mismatch"):
        client.push_weights(tmp_path, 1)


def test_generate_falls_back_to_token_ids_when_text_is_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if "text" in body:
            return httpx.Response(422, json={"error": "give input_ids"})
        return httpx.Response(200, json={"text": "x", "meta_info": {}})

    client, seen = _client(handler)
    assert client.generate_one_token()["text"] == "x"
    assert [("text" in json.loads(r.content)) for r in seen] == [True, False]

"""The builtin inference service through its HTTP front (FastAPI TestClient), on a tiny random fixture model."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

fastapi = pytest.importorskip("fastapi")
torch = pytest.importorskip("torch")

from fastapi.testclient import TestClient

from hermes_stack.inference.builtin import BuiltinBackend
from hermes_stack.inference.server import create_app
from tests.fakes.fixture_model import build_fixture_model

KEY = "test-internal-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def fixture_model(factory, name: str = "fixture-model", seed: int = 0) -> Path:
    directory = factory.getbasetemp() / name
    if not (directory / "config.json").exists():
        build_fixture_model(directory, seed=seed)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return fixture_model(tmp_path_factory)


@pytest.fixture(scope="module")
def client(model_dir, tmp_path_factory):
    backend = BuiltinBackend(str(model_dir), served_model="tiny", seed=0)
    data_dir = tmp_path_factory.mktemp("data")
    with TestClient(create_app(backend, KEY, data_dir=data_dir)) as c:
        c.backend = backend
        c.data_dir = data_dir
        yield c


def full_logprobs(model_dir: Path, prompt: list[int], output: list[int]) -> list[float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    return [lp[len(prompt) - 1 + i, t].item() for i, t in enumerate(output)]


def test_health_is_open_and_everything_else_needs_the_key(client):
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/v1/models").status_code == 401
    assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.post("/generate", json={"text": "1+1=", "sampling_params": {"max_new_tokens": 2}}).status_code == 401
    assert client.post("/update_weights_from_disk", json={"model_path": "/x"}).status_code == 401


def test_ready_marker_written_while_serving(client):
    marker = client.data_dir / "ready" / "inference"
    assert marker.exists()
    assert str(os.getpid()) in marker.read_text()


def test_models_lists_the_served_name(client):
    body = client.get("/v1/models", headers=AUTH).json()
    assert [m["id"] for m in body["data"]] == ["tiny"]


def test_generate_with_n_returns_a_list_with_logprobs_matching_the_model(client, model_dir):
    tokenizer = client.backend.tokenizer
    prompt = tokenizer.encode("3+4=")
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 6, "n": 3, "temperature": 1.0},
            "return_logprob": True}
    answer = client.post("/generate", json=body, headers=AUTH).json()
    assert isinstance(answer, list) and len(answer) == 3
    for item in answer:
        entries = item["meta_info"]["output_token_logprobs"]
        assert [e[1] for e in entries] == item["output_ids"]
        assert item["meta_info"]["completion_tokens"] == len(item["output_ids"]) <= 6
        assert item["meta_info"]["prompt_tokens"] == len(prompt)
        assert item["meta_info"]["finish_reason"]["type"] in {"stop", "length"}
        reference = full_logprobs(model_dir, prompt, item["output_ids"])
        assert all(math.isclose(e[0], r, abs_tol=1e-4) for e, r in zip(entries, reference))


def test_generate_single_text_returns_one_object(client):
    answer = client.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 3,
                                                                              "temperature": 0}}, headers=AUTH).json()
    assert isinstance(answer, dict)
    assert "output_token_logprobs" not in answer["meta_info"]
    assert len(answer["output_ids"]) <= 3


def test_generate_batch_of_inputs_with_n_is_prompt_major(client):
    tokenizer = client.backend.tokenizer
    prompts = [tokenizer.encode("12"), tokenizer.encode("abc")]
    answer = client.post("/generate", json={"input_ids": prompts, "sampling_params": {"max_new_tokens": 2, "n": 2},
                                            "return_logprob": True}, headers=AUTH).json()
    assert [a["meta_info"]["prompt_tokens"] for a in answer] == [3, 3, 4, 4]


def test_generate_rejects_bad_sampling_params(client):
    bad = client.post("/generate", json={"text": "x", "sampling_params": {"temperature": -1}}, headers=AUTH)
    assert bad.status_code == 400
    assert "temperature" in bad.json()["error"]["message"]


def test_greedy_length_and_stop_finish_reasons(client):
    answer = client.post("/generate", json={"text": "5", "sampling_params": {"max_new_tokens": 4, "temperature": 0,
                                                                             "ignore_eos": True}},
                         headers=AUTH).json()
    assert answer["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    first = client.backend.tokenizer.decode(answer["output_ids"][:1])
    stopped = client.post("/generate", json={"text": "5", "sampling_params": {
        "max_new_tokens": 4, "temperature": 0, "stop": [first], "ignore_eos": True}}, headers=AUTH).json()
    assert stopped["meta_info"]["finish_reason"]["type"] == "stop"
    assert stopped["text"] == "" and len(stopped["output_ids"]) == 1


def test_completions_shape_with_logprobs_and_n(client):
    body = {"model": "tiny", "prompt": "7+1=", "max_tokens": 5, "n": 2, "logprobs": 1, "temperature": 0.7}
    answer = client.post("/v1/completions", json=body, headers=AUTH).json()
    assert answer["object"] == "text_completion"
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    for choice in answer["choices"]:
        assert len(choice["logprobs"]["token_logprobs"]) == len(choice["logprobs"]["tokens"]) <= 5
        assert all(lp <= 0 for lp in choice["logprobs"]["token_logprobs"])
        assert choice["finish_reason"] in {"stop", "length"}
    assert answer["usage"]["total_tokens"] == answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]


def test_chat_completions_shape(client):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 4, "logprobs": True}
    answer = client.post("/v1/chat/completions", json=body, headers=AUTH).json()
    choice = answer["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert len(choice["logprobs"]["content"]) == answer["usage"]["completion_tokens"] <= 4


def test_weight_reload_changes_outputs_and_bad_path_fails(client, tmp_path_factory):
    request = {"text": "9+9=", "sampling_params": {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True},
               "return_logprob": True}
    before = client.post("/generate", json=request, headers=AUTH).json()
    other = client.data_dir / "weights" / "step-1"  # where the trainer writes: inside the data volume
    build_fixture_model(other, seed=1)
    answer = client.post("/update_weights_from_disk", json={"model_path": str(other)}, headers=AUTH).json()
    assert answer["success"] is True
    after = client.post("/generate", json=request, headers=AUTH).json()
    lp_before = [e[0] for e in before["meta_info"]["output_token_logprobs"]]
    lp_after = [e[0] for e in after["meta_info"]["output_token_logprobs"]]
    assert lp_before != lp_after
    assert after["meta_info"]["weight_version"] != before["meta_info"]["weight_version"]
    missing = client.data_dir / "weights" / "step-99"
    failed = client.post("/update_weights_from_disk", json={"model_path": str(missing)}, headers=AUTH)
    assert failed.status_code == 400 and failed.json()["success"] is False


def test_weight_and_adapter_paths_outside_the_data_volume_are_refused_and_nothing_loads(client, model_dir):
    data = client.data_dir
    (data / "weights").mkdir(exist_ok=True)
    link = data / "weights" / "link-out"
    if not link.is_symlink():
        link.symlink_to(model_dir)  # inside by name, outside in fact
    version, weights = client.backend.weight_version, client.backend.weights_path
    outside = [str(model_dir), "/etc", f"{data}/../{model_dir.name}", str(link), "relative/dir"]
    for path in outside:
        answer = client.post("/update_weights_from_disk", json={"model_path": path}, headers=AUTH)
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json() == {"success": False, "message": f"model_path {path!r} is outside the data volume "
                                                             f"{data}; weights and adapters load only from there"}
        adapter = client.post("/load_lora_adapter", json={"lora_name": "x", "lora_path": path}, headers=AUTH)
        assert adapter.status_code == 403 and "lora_path" in adapter.json()["message"], (path, adapter.text)
    assert (client.backend.weight_version, client.backend.weights_path) == (version, weights)


def test_without_a_data_volume_no_path_is_loadable(model_dir, tmp_path):
    from hermes_stack.inference.server import outside_data_volume

    assert outside_data_volume("model_path", str(model_dir), None) == (
        f"model_path {str(model_dir)!r} refused: no data volume (HERMES_DATA_DIR) is configured to load from")
    assert outside_data_volume("model_path", str(tmp_path / "a" / "b"), tmp_path) is None
    assert outside_data_volume("model_path", str(tmp_path), tmp_path) is None
    assert outside_data_volume("model_path", str(tmp_path) + "-sibling", tmp_path) is not None  # not a prefix test


@pytest.mark.parametrize("key", [None, ""])
def test_the_service_refuses_to_start_without_a_key(model_dir, key):
    from hermes_stack.errors import InputError

    backend = BuiltinBackend(str(model_dir), served_model="tiny", seed=0)
    with pytest.raises(InputError) as caught:
        create_app(backend, key)
    assert caught.value.exit_code == 2
    assert caught.value.lines() == [(
        "(environment): HERMES_INFERENCE_KEY: found no value, expected the key that protects the inference service. "
        "Hint: start the stack with `make up`, which generates one; by hand, set the Compose secret "
        "hermes_inference_key (variable HERMES_INFERENCE_KEY)")]


def test_lora_adapter_load_serves_requests(client, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(client.backend.weights_path)
    peft_model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    adapter = client.data_dir / "weights" / "adapter-1"
    peft_model.save_pretrained(adapter)
    request = {"text": "1+2=", "sampling_params": {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True},
               "return_logprob": True}
    before = client.post("/generate", json=request, headers=AUTH).json()
    answer = client.post("/load_lora_adapter", json={"lora_name": "step-1", "lora_path": str(adapter)},
                         headers=AUTH).json()
    assert answer["success"] is True
    after = client.post("/generate", json=request, headers=AUTH).json()
    assert [e[0] for e in after["meta_info"]["output_token_logprobs"]] != \
        [e[0] for e in before["meta_info"]["output_token_logprobs"]]
    assert "step-1" in [m["id"] for m in client.get("/v1/models", headers=AUTH).json()["data"]]


def test_a_restarted_service_serves_the_newest_synced_weights_not_the_base_model(tmp_path_factory):
    """The trainer synced step-1 and step-2 (other weights than the base model); a new service on the same data
    volume generates as step-2 does, and a half-written export (a temp dir) is ignored."""
    import shutil

    base = fixture_model(tmp_path_factory)
    other = fixture_model(tmp_path_factory, "fixture-model-seed-7", seed=7)
    data_dir = tmp_path_factory.mktemp("restart-data")
    shutil.copytree(base, data_dir / "weights" / "step-1")
    shutil.copytree(other, data_dir / "weights" / "step-2")
    (data_dir / "weights" / ".tmp-step-3-99").mkdir()
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "temperature": 0.0},
            "return_logprob": True}

    def greedy(model_dir: Path, data: Path) -> tuple[list, str]:
        backend = BuiltinBackend(str(model_dir), served_model="tiny", seed=0)
        with TestClient(create_app(backend, KEY, data_dir=data)) as c:
            out = c.post("/generate", json=body, headers=AUTH).json()
            return out["meta_info"]["output_token_logprobs"], str(backend.weights_path)

    from_other, _ = greedy(other, tmp_path_factory.mktemp("empty"))
    from_base, _ = greedy(base, tmp_path_factory.mktemp("empty2"))
    restarted, served = greedy(base, data_dir)
    assert served == str(data_dir / "weights" / "step-2")
    assert restarted == from_other and restarted != from_base


def test_health_generate_counts_a_sampling_server_as_healthy_and_a_stuck_one_as_not(model_dir, monkeypatch):
    """While the worker samples a long batch, /health_generate answers at once (a 1-token check queued behind a real
    model's rollout on a busy CPU timed out the healthcheck); a batch past BUSY_HEALTHY_S is stuck, not busy."""
    import asyncio
    import threading

    from hermes_stack.inference import builtin
    from hermes_stack.inference.sampling import SamplingParams
    from hermes_stack.inference.torch_sampler import Row

    backend = BuiltinBackend(str(model_dir), served_model="tiny", seed=0)
    release, sampling = threading.Event(), threading.Event()
    real_sample = backend.host._sample

    def slow_sample(rows, adapter, on_done=None):
        if len(rows) == 2:  # the rollout below; the health check's own batch has one row
            sampling.set()
            release.wait(30)
        return real_sample(rows, adapter, on_done)

    monkeypatch.setattr(backend.host, "_sample", slow_sample)

    async def scenario():
        await backend.start()
        rows = [Row((1, 2, 3), SamplingParams(max_new_tokens=2))] * 2
        rollout = asyncio.ensure_future(backend._submit(rows, None))
        assert await asyncio.to_thread(sampling.wait, 10)
        assert backend.busy_for() is not None
        healthy_while_busy = await asyncio.wait_for(backend.health_generate(), 2)
        monkeypatch.setattr(builtin, "BUSY_HEALTHY_S", 0.0)
        stuck = asyncio.ensure_future(backend.health_generate())
        await asyncio.sleep(0.5)
        waited_behind_the_batch = not stuck.done()
        release.set()
        assert len(await rollout) == 2
        healthy_after = await asyncio.wait_for(stuck, 10)
        await backend.stop()
        return healthy_while_busy, waited_behind_the_batch, healthy_after

    assert asyncio.run(scenario()) == (True, True, True)
    assert backend.busy_for() is None


def test_server_info_counts_requests_under_each_weights_version(model_dir, tmp_path):
    """What the router's discovery asks (/get_server_info, /server_info, /model_info) answers, and the replica's
    own counters follow a weight update: requests after it count under the new version, failures not at all."""
    backend = BuiltinBackend(str(model_dir), served_model="tiny", seed=0)
    request = {"text": "1+1=", "sampling_params": {"max_new_tokens": 2}}
    with TestClient(create_app(backend, KEY, data_dir=tmp_path)) as c:
        for path in ("/get_server_info", "/server_info", "/model_info"):
            assert c.get(path).status_code == 401
            assert c.get(path, headers=AUTH).status_code == 200
        info = c.get("/get_server_info", headers=AUTH).json()
        assert info["dp_size"] == 1 and info["hermes"] == {"weights_version": "base", "requests_served": 0,
                                                          "served_by_version": {}}
        assert c.post("/generate", json=request, headers=AUTH).status_code == 200
        assert c.post("/generate", json={"text": "1", "sampling_params": {"temperature": -1}},
                      headers=AUTH).status_code == 400
        step = tmp_path / "weights" / "step-3"
        build_fixture_model(step, seed=3)
        assert c.post("/update_weights_from_disk", json={"model_path": str(step)}, headers=AUTH).json()["success"]
        for _ in range(2):
            assert c.post("/v1/completions", json={"model": "tiny", "prompt": "2+2=", "max_tokens": 2},
                          headers=AUTH).status_code == 200
        hermes = c.get("/get_server_info", headers=AUTH).json()["hermes"]
        assert hermes == {"weights_version": "step-3", "requests_served": 3,
                          "served_by_version": {"base": 1, "step-3": 2}}
        assert c.get("/health").json()["weights_version"] == "step-3"


def test_a_restarted_replica_starts_on_the_newest_synced_weights(model_dir, tmp_path):
    """A replica back from a crash loads `weights/step-<N>` before it is ready (and before /health_generate, the
    router's health check, passes), so its version is the trainer's newest, not the base model."""
    build_fixture_model(tmp_path / "weights" / "step-7", seed=7)
    backend = BuiltinBackend(str(model_dir), served_model="tiny", seed=0)
    with TestClient(create_app(backend, KEY, data_dir=tmp_path)) as c:
        assert c.get("/health_generate", headers=AUTH).status_code == 200
        assert c.get("/get_server_info", headers=AUTH).json()["hermes"]["weights_version"] == "step-7"


def sse_events(raw: bytes) -> list:
    """The `data:` events of a server-sent-events body, JSON-decoded ([DONE] as the string)."""
    events = []
    for block in raw.decode().split("\n\n"):
        if block:
            assert block.startswith("data: "), block
            payload = block[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_streamed_generate_sends_each_row_once_with_its_index_as_the_unstreamed_answer(client):
    """SGLang's batched stream: one event per row (its last, whole answer) carrying the row's index, then [DONE]."""
    tokenizer = client.backend.tokenizer
    prompts = [tokenizer.encode(t) for t in ("12", "abc", "7+1=")]
    body = {"input_ids": prompts, "return_logprob": True,
            "sampling_params": [{"max_new_tokens": b, "temperature": 0, "ignore_eos": True} for b in (5, 1, 3)]}
    plain = client.post("/generate", json=body, headers=AUTH).json()
    streamed = client.post("/generate", json={**body, "stream": True}, headers=AUTH)
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = sse_events(streamed.content)
    assert events[-1] == "[DONE]"
    rows = events[:-1]
    assert sorted(e["index"] for e in rows) == [0, 1, 2]
    for event in rows:
        expected = plain[event.pop("index")]
        event["meta_info"].pop("id"), expected["meta_info"].pop("id")
        assert event == expected


def test_one_streamed_prompt_with_n_rows_gives_each_row_its_index_as_sglang_does(client):
    """One prompt with n > 1 is a batch of n rows (SGLang expands it; its plain answer is a list), so each streamed
    row carries its index: without it a client could not tell the rows' events apart."""
    body = {"text": "5", "sampling_params": {"n": 3, "max_new_tokens": 2, "temperature": 0, "ignore_eos": True}}
    plain = client.post("/generate", json=body, headers=AUTH).json()
    events = sse_events(client.post("/generate", json={**body, "stream": True}, headers=AUTH).content)
    assert isinstance(plain, list) and len(plain) == 3
    assert events[-1] == "[DONE]" and sorted(e["index"] for e in events[:-1]) == [0, 1, 2]


def test_streamed_rows_go_out_as_they_end_while_longer_rows_still_sample(client):
    """The point of streaming (issue 22): a row with a budget of 1 is sent at the first step, apart from the row
    that samples 6 tokens; the bytes of each step are one chunk of the stream."""
    tokenizer = client.backend.tokenizer
    body = {"input_ids": [tokenizer.encode("5")] * 3, "return_logprob": True,
            "sampling_params": [{"max_new_tokens": b, "temperature": 0, "ignore_eos": True} for b in (1, 6, 1)]}

    async def chunks() -> list[bytes]:
        return [chunk async for chunk in client.backend.generate_stream(body)]

    got = client.portal.call(chunks)
    assert [[e["index"] for e in sse_events(c) if e != "[DONE]"] for c in got] == [[0, 2], [1], []]
    assert sse_events(got[-1]) == ["[DONE]"]


def test_streamed_generate_refuses_a_bad_request_before_the_stream_and_a_non_boolean_stream(client):
    bad = client.post("/generate", json={"text": "x", "stream": True, "sampling_params": {"temperature": -1}},
                      headers=AUTH)
    assert bad.status_code == 400 and "temperature" in bad.json()["error"]["message"]
    odd = client.post("/generate", json={"text": "x", "stream": "yes"}, headers=AUTH)
    assert odd.status_code == 400 and "stream: found 'yes', expected true or false" in odd.json()["error"]["message"]


def test_a_sampling_failure_after_the_stream_began_is_an_error_event(model_dir, monkeypatch):
    backend = BuiltinBackend(str(model_dir), served_model="tiny", seed=0)

    def broken(rows, adapter, on_done=None):
        raise RuntimeError("the model fell over")

    monkeypatch.setattr(backend.host, "_sample", broken)
    with TestClient(create_app(backend, KEY, data_dir=None)) as c:
        answer = c.post("/generate", json={"input_ids": [[5, 6]], "stream": True,
                                           "sampling_params": {"max_new_tokens": 2}}, headers=AUTH)
    events = sse_events(answer.content)
    assert events[-1] == "[DONE]" and "the model fell over" in events[0]["error"]["message"]


@pytest.mark.parametrize("tied", [False, True])
def test_a_reload_of_the_same_model_copies_into_the_replaced_one_and_serves_what_a_fresh_load_serves(
        tmp_path, tied):
    """Every step's push is the same architecture: the second reload copies the weights into the model the first
    one replaced (no batch uses it) instead of building a model again, and serves exactly what a fresh load of
    that folder serves; tied embeddings (left out of the saved file) come along. Another architecture at the same
    folder shape is built afresh."""
    from transformers import AutoModelForCausalLM

    def saved(name: str, seed: int, layers: int = 2) -> Path:
        directory = build_fixture_model(tmp_path / "weights" / name, seed=seed, layers=layers)
        if tied:  # the same weights saved as a tied model: lm_head is the embedding, left out of the file
            model = AutoModelForCausalLM.from_pretrained(directory, tie_word_embeddings=True)
            model.save_pretrained(directory)
        return directory

    base = saved("base", 0)
    backend = BuiltinBackend(str(base), served_model="tiny", seed=0)
    request = {"text": "9+9=", "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True},
               "return_logprob": True}

    def served(c) -> tuple[list, list]:
        meta = c.post("/generate", json=request, headers=AUTH).json()["meta_info"]
        return [e[1] for e in meta["output_token_logprobs"]], [e[0] for e in meta["output_token_logprobs"]]

    with TestClient(create_app(backend, KEY, data_dir=tmp_path)) as c:
        first = backend.host.model
        for name, seed, layers in (("step-1", 1, 2), ("step-2", 2, 2), ("step-3", 3, 3)):
            path = saved(name, seed, layers)
            assert c.post("/update_weights_from_disk", json={"model_path": str(path)}, headers=AUTH).json()["success"]
            tokens, logprobs = served(c)
            prompt = backend.tokenizer.encode("9+9=")
            assert logprobs == pytest.approx(full_logprobs(path, prompt, tokens), abs=1e-5)
            if name == "step-2":
                assert backend.host.model is first  # copied into the model step-1 replaced
            if name == "step-3":
                assert backend.host.model is not first and len(backend.host.model.model.layers) == 3


def test_the_copy_takes_only_the_same_model_and_then_holds_what_a_fresh_load_holds(tmp_path):
    """_load_weights_into copies a folder's weights only when it is the same model: a missing tensor that is not a
    tied one, an extra tensor, another config.json (a rope_theta alone) or another generation_config.json (the stop
    tokens) each say False, so the caller builds the model afresh."""
    import shutil

    from safetensors.torch import load_file, save_file

    from hermes_stack.inference.model_host import _load_model, _load_weights_into

    base, same = build_fixture_model(tmp_path / "base", seed=0), build_fixture_model(tmp_path / "same", seed=1)
    model = _load_model(str(base), "cpu")
    assert _load_weights_into(model, str(same))
    fresh = _load_model(str(same), "cpu").state_dict()
    assert all(torch.equal(value, fresh[name]) for name, value in model.state_dict().items())

    def variant(name: str, edit) -> str:
        directory = tmp_path / name
        shutil.copytree(same, directory)
        edit(directory)
        return str(directory)

    def tensors(change):
        def edit(directory):
            state = load_file(directory / "model.safetensors")
            change(state)
            save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
        return edit

    def json_key(file: str, key: str, value):
        def edit(directory):
            data = json.loads((directory / file).read_text())
            data[key] = value
            (directory / file).write_text(json.dumps(data, indent=2))
        return edit

    refused = {
        "missing": tensors(lambda state: state.pop("model.layers.0.mlp.up_proj.weight")),
        "extra": tensors(lambda state: state.update({"model.extra.weight": torch.zeros(2)})),
        "rope": json_key("config.json", "rope_theta", 1234.0),
        "stops": json_key("generation_config.json", "eos_token_id", 5),
    }
    for name, edit in refused.items():
        model = _load_model(str(base), "cpu")
        assert not _load_weights_into(model, variant(name, edit)), name

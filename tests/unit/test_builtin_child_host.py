"""The built-in server's sampler in a child process (inference/child_host.py), as the inference service runs it: it
answers what the in-process sampler answers, streams, reloads and reports through the pipe, says why a start or a
reload failed, and a child that dies fails the waiting requests and ends the service instead of leaving it up with
no model behind it."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from hermes_stack.inference.backend import BackendReply
from hermes_stack.inference.builtin import BuiltinBackend
from hermes_stack.inference.sampling import SamplingParams
from hermes_stack.inference.torch_sampler import Row
from hermes_stack.modelcore import embedded


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("child-host")
    base, other = root / "base", root / "other"
    embedded.build(base, seed=0, steps=30)
    embedded.build(other, seed=1, steps=30)
    return base, other


def body(tokenizer, temperature: float) -> dict:
    prompts = [tokenizer.encode(q) for q in ("12+3=", "7+8=", "40+2=")]
    return {"input_ids": prompts, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 6, "temperature": temperature, "n": 4}}


async def answers_of(backend: BuiltinBackend, tokenizer) -> dict:
    """A plain and a streamed /generate (sampled and greedy), a reload to other weights, a greedy answer on them."""
    plain = await backend.generate(body(tokenizer, 1.0))
    streamed = [chunk async for chunk in backend.generate_stream(body(tokenizer, 0.0))]
    return {"plain": [(a["output_ids"], a["meta_info"]["output_token_logprobs"]) for a in plain],
            "streamed": b"".join(streamed).count(b"data: {"), "done": streamed[-1]}


def test_the_child_answers_what_the_in_process_sampler_answers(model_dirs):
    base, other = model_dirs

    async def run(sampler: str) -> dict:
        backend = BuiltinBackend(str(base), served_model="tiny", seed=0, sampler=sampler)
        await backend.start()
        try:
            seen = await answers_of(backend, backend.tokenizer)
            seen["version_before"] = backend.weight_version
            seen["reload"] = (await backend.update_weights_from_disk({"model_path": str(other)}))["success"]
            seen["version_after"], seen["weights"] = backend.weight_version, backend.weights_path
            seen["after"] = [a["output_ids"] for a in await backend.generate(body(backend.tokenizer, 0.0))]
            seen["info"] = backend.model_info()["context_length"]
            seen["healthy"] = await backend.health_generate()
            return seen
        finally:
            await backend.stop()

    in_process, child = asyncio.run(run("thread")), asyncio.run(run("process"))
    assert child == in_process
    assert child["streamed"] == 12 and child["done"] == b"data: [DONE]\n\n"
    assert (child["version_before"], child["version_after"], child["weights"]) == (0, 1, str(other))
    assert child["reload"] is True and child["healthy"] is True


@pytest.mark.parametrize("sampler", ["process", "thread"])
def test_a_failed_reload_or_an_abandoned_request_leaves_the_sampler_serving(model_dirs, tmp_path, sampler):
    base, _ = model_dirs
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")

    async def run():
        backend = BuiltinBackend(str(base), served_model="tiny", seed=0, sampler=sampler)
        await backend.start()
        try:
            # A caller that gave up (its future cancelled before the answer came): the answer is dropped, the pipe
            # every other request shares reads on.
            rows = [Row(tuple(backend.tokenizer.encode("1+1=")), SamplingParams(max_new_tokens=4))] * 8
            assert backend.host.submit(rows, None).cancel()
            answer = await asyncio.wait_for(backend.update_weights_from_disk({"model_path": str(broken)}), 60)
            after = await asyncio.wait_for(backend.generate(body(backend.tokenizer, 0.0)), 60)
            return answer, backend.weight_version, len(after), backend.is_ready()
        finally:
            await backend.stop()

    answer, version, rows, ready = asyncio.run(run())
    assert answer["success"] is False and answer["message"].startswith(f"failed to load {broken}: ")
    assert (version, rows, ready) == (0, 12, True)


def test_a_child_that_cannot_load_its_model_fails_the_start_with_why(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    backend_dir = tmp_path
    from hermes_stack.inference.child_host import ChildHost

    host = ChildHost(str(backend_dir), seed=0)
    with pytest.raises(RuntimeError, match=r"^the sampler process could not start: \w+"):
        host.start()
    assert not host.is_alive()


def test_a_child_that_dies_fails_the_waiting_request_and_ends_the_service(model_dirs):
    base, _ = model_dirs
    fatal: list[str] = []

    async def run():
        backend = BuiltinBackend(str(base), served_model="tiny", seed=0, sampler="process")
        backend.host.on_fatal = fatal.append
        await backend.start()
        try:
            # A batch long enough to be sampling when the child is killed.
            rows = [Row(tuple(backend.tokenizer.encode("1+1=")), SamplingParams(max_new_tokens=40, ignore_eos=True))]
            waiting = asyncio.ensure_future(backend._submit(rows * 512, None))
            deadline = time.monotonic() + 30
            while backend.busy_for() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert backend.busy_for() is not None  # the shared busy cell: the child is sampling
            os.kill(backend.host._process.pid, signal.SIGKILL)
            with pytest.raises(BackendReply) as failed:
                await asyncio.wait_for(waiting, 30)
            deadline = time.monotonic() + 10
            while backend.is_ready() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return failed.value, backend.is_ready()
        finally:
            await backend.stop()

    reply, ready = asyncio.run(run())
    assert reply.status == 503 and reply.body["error"]["message"] == "the sampler process exited (exit code -9)"
    assert ready is False
    assert fatal == ["the sampler process exited (exit code -9)"]

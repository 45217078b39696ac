"""REPLICAS=N (issue 23): the weight push past the router to every replica, the compose override `up` writes, the
router's command line, `status`'s replica lines, and validate's refusals (replicas < 1, more replicas than GPUs)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from test_validate_bad_inputs import GPU200, Case, run_case

from hermes_stack.controller import device
from hermes_stack.controller.replicas import override_text, serving_services, write_override
from hermes_stack.controller.status import replica_line
from hermes_stack.router.args import router_argv
from hermes_stack.service_env import ServiceEnv, replica_urls
from hermes_stack.trainer.weights_sync import InferenceClient, InferenceError, InferenceKeyRefused

URLS = ("http://inference:8001", "http://inference-2:8001")


def replica_client(answers: dict[str, object]) -> tuple[InferenceClient, list[str]]:
    """A router client with two replicas; `answers`: host -> HTTP status, or "down" (no answer at all)."""
    pushed: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        answer = answers[request.url.host]
        if answer == "down":
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        pushed.append(f"{request.url.host}{request.url.path}")
        return httpx.Response(answer, json={"success": answer == 200, "message": "ok" if answer == 200 else "bad"})

    client = InferenceClient("http://router:8001/v1", "k3y", transport=httpx.MockTransport(handle),
                             replica_urls=URLS)
    return client, pushed


def weights(tmp_path: Path) -> Path:
    (tmp_path / "step-4").mkdir(exist_ok=True)
    (tmp_path / "step-4" / "model.safetensors").write_bytes(b"w")
    return tmp_path / "step-4"


def test_a_push_goes_to_every_replica_directly_never_to_the_router(tmp_path):
    client, pushed = replica_client({"inference": 200, "inference-2": 200, "router": 404})
    answer = client.push_weights(weights(tmp_path), 4)
    assert pushed == ["inference/update_weights_from_disk", "inference-2/update_weights_from_disk"]
    assert answer["loaded"] == list(URLS) and client.last_sync == dict.fromkeys(URLS, "loaded")


def test_a_replica_that_does_not_answer_is_skipped_and_named(tmp_path):
    client, _ = replica_client({"inference": 200, "inference-2": "down"})
    answer = client.push_weights(weights(tmp_path), 4)
    assert answer["loaded"] == [URLS[0]] and answer["skipped"] == [URLS[1]]
    assert client.last_sync[URLS[1]].startswith("unreachable")


def test_a_replica_that_answers_and_refuses_fails_the_step(tmp_path):
    client, _ = replica_client({"inference": 200, "inference-2": 400})
    with pytest.raises(InferenceError, match="inference-2:8001/update_weights_from_disk|answered HTTP 400"):
        client.push_weights(weights(tmp_path), 4)
    refused, _ = replica_client({"inference": 401, "inference-2": 200})
    with pytest.raises(InferenceKeyRefused):
        refused.push_weights(weights(tmp_path), 4)


def test_no_replica_answering_is_an_error_the_loop_rides_out(tmp_path):
    client, _ = replica_client({"inference": "down", "inference-2": "down"})
    with pytest.raises(InferenceError, match="no replica answered the push of step-4"):
        client.push_weights(weights(tmp_path), 4)


def test_up_hands_the_replica_urls_to_the_services_only_for_more_than_one():
    assert replica_urls(1, 8001) == []
    assert replica_urls(3, 8001) == ["http://inference:8001", "http://inference-2:8001", "http://inference-3:8001"]
    env = ServiceEnv.from_environ({"HERMES_INFERENCE_REPLICA_URLS": ",".join(URLS)})
    assert env.replica_urls == URLS and ServiceEnv.from_environ({}).replica_urls == ()


def test_the_override_pins_replica_i_to_gpu_i_and_gives_the_router_the_port():
    data = yaml.safe_load(override_text("grpo", "gpu", 3, "compose.grpo.yml").replace("!reset", "")
                          .replace("!override", ""))
    services = data["services"]
    assert set(services) == {"inference", "inference-2", "inference-3", "router", "trainer", "environment"}
    pins = [services[s]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
            for s in ("inference", "inference-2", "inference-3")]
    assert pins == [["0"], ["1"], ["2"]]
    assert services["inference-2"]["extends"] == {"file": "compose.grpo.yml", "service": "inference"}
    assert services["router"]["command"] == ["python", "-m", "hermes_stack.router"]
    assert services["router"]["ports"] == ["127.0.0.1:${HERMES_INFERENCE_PORT:-8001}:${HERMES_INFERENCE_PORT:-8001}"]
    assert services["trainer"]["environment"]["HERMES_INFERENCE_URL"] == "http://router:${HERMES_INFERENCE_PORT:-8001}/v1"
    assert serving_services(1) == ["inference"] and serving_services(2) == ["inference", "inference-2", "router"]


def test_the_cpu_override_makes_each_extra_replica_a_builtin_cpu_server():
    services = yaml.safe_load(override_text("ppo", "cpu", 2, "compose.ppo.yml").replace("!reset", "")
                              .replace("!override", ""))["services"]
    assert services["inference-2"]["environment"] == {"HERMES_PROFILE": "embedded"}
    assert services["inference-2"]["image"].endswith("/trainer:cpu")
    assert "deploy" not in services["inference"]


def test_one_replica_writes_nothing_and_removes_a_stale_override(tmp_path):
    assert write_override(tmp_path, "grpo", "cpu", 2) == ".hermes/replicas-grpo.yml"
    assert (tmp_path / ".hermes" / "replicas-grpo.yml").is_file()
    assert write_override(tmp_path, "grpo", "cpu", 1) is None
    assert not (tmp_path / ".hermes" / "replicas-grpo.yml").exists()


def test_the_router_gets_static_worker_urls_and_the_weights_aware_health_check():
    argv = router_argv(URLS, 8001, "WARNING")
    assert argv[argv.index("--worker-urls") + 1:argv.index("--policy")] == list(URLS)
    assert argv[argv.index("--health-check-endpoint") + 1] == "/health_generate"
    assert argv[argv.index("--log-level") + 1] == "warn" and "--api-key" not in argv
    # its INFO is a line per request and per probe: the stack's INFO runs it at warn, DEBUG shows them
    assert router_argv(URLS, 8001, "INFO")[-1] == "warn" and router_argv(URLS, 8001, "DEBUG")[-1] == "debug"


def test_status_prints_each_replica_with_its_weights_version():
    line = replica_line("inference-2", {"weights_version": "step-12", "requests_served": 40,
                                        "served_by_version": {"step-11": 30, "step-12": 10}})
    assert line == "  replica inference-2  weights step-12, 40 requests served (10 on these weights)"
    assert "not answering" in replica_line("inference", None)
    # before the trainer's first push: the dry-run's folder name is not a run's state (a review read "weights policy")
    assert replica_line("inference", {"weights_version": "policy", "requests_served": 3}) == (
        "  replica inference    weights policy (no training step pushed yet), 3 requests served (0 on these weights)")
    assert "(no training step" not in replica_line("inference", {"requests_served": 3})  # a version nobody reported


CASES = [
    Case("replicas-zero", [("{json}: inference.replicas: found 0, expected an integer >= 1. Hint: the number of "
                           "inference servers behind the router; 1 is one server, no router")],
         json={"inference.replicas": 0}),
    Case("replicas-cli-zero", [("command line: --replicas (REPLICAS): found 0, expected an integer from 1 to 64. "
                               "Hint: the number of inference servers behind the router; 1 is one server, no "
                               "router")],
         args=["--device", "cpu", "--replicas", "0"]),
    Case("replicas-more-than-gpus", [("{json}: inference.replicas: found 2 replicas on 1 GPU, expected at most 1: one "
                                     "GPU per replica. Hint: each replica is pinned to its own GPU; lower "
                                     "inference.replicas (or REPLICAS=N), or run on a machine with more GPUs "
                                     "(docs/scaling.md)")],
         json={"inference.replicas": 2}, args=GPU200),
    Case("replicas-cli-more-than-gpus", [("command line: --replicas (REPLICAS): found 9 replicas on 8 GPUs, expected "
                                         "at most 8: one GPU per replica. Hint: each replica is pinned to its own GPU; "
                                         "lower inference.replicas (or REPLICAS=N), or run on a machine with more "
                                         "GPUs (docs/scaling.md)")],
         args=[*GPU200, "--replicas", "9"]),
]


@pytest.mark.usefixtures("isolated_secrets")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_validate_refuses_bad_replica_counts_in_one_line(case, tmp_path, monkeypatch, capsys, compose_calls):
    gpus = 8 if "9" in case.args else 1
    monkeypatch.setattr(device, "detect_gpu_count", lambda gpu_memory_gib=None: gpus)
    run_case(case, tmp_path, monkeypatch, capsys, compose_calls)


@pytest.mark.usefixtures("isolated_secrets")
def test_as_many_replicas_as_gpus_is_valid(tmp_path, monkeypatch, capsys):
    from test_validate_bad_inputs import build

    from hermes_stack.controller.cli import main

    monkeypatch.setattr(device, "detect_gpu_count", lambda gpu_memory_gib=None: 2)
    argv, _ = build(Case("ok", [], args=[*GPU200, "--replicas", "2"]), tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0, capsys.readouterr().err

"""`hermes-stack test-inference` against a loopback fake gateway and a fake local inference service."""

import json
import os
import re

import pytest
from fakes.fake_gateway import FakeGateway
from fakes.fake_inference import FakeInference
from fakes.loopback import free_port
from fakes.stack_files import write_stack
from fakes.tiny_tokenizer import build_tiny_tokenizer

from hermes_stack.controller.cli import main


def solver(prompt: str, body: dict) -> str:
    a, b = map(int, re.search(r"(\d+)\+(\d+)", prompt).groups())
    return f"{a} plus {b} is {a + b}.\n#### {a + b}"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return build_tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture
def project(tmp_path, tokenizer_dir, monkeypatch):
    rows = [{"question": f"What is {a}+{b}?", "answer": f"#### {a + b}"} for a in range(10) for b in range(6)]
    (tmp_path / "sums.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    write_stack(tmp_path / "configs", dataset=str(tmp_path / "sums.jsonl"), model_path=str(tokenizer_dir),
                group_size=2, max_token_length=200)
    for name in ("TAOTOKEN_API_KEY", "TAOTOKEN_BASE_URL", "TAOTOKEN_MODEL", "HERMES_INFERENCE_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, os.environ.get(name, "0"))
    # The default key file, ./.env.taotoken in the project: absent = offline mode (a named path must exist).
    monkeypatch.delenv("HERMES_KEYFILE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def keyfile(project, root, key, model="fake-gpt"):
    path = project / ".env.taotoken"
    path.write_text(f"TAOTOKEN_API_KEY={key}\nTAOTOKEN_BASE_URL={root}\nTAOTOKEN_MODEL={model}\n")
    path.chmod(0o600)


def cli(*args):
    return main(["test-inference", "--algo", "grpo", "--config-dir", "configs", "--device", "gpu", *args])


@pytest.mark.parametrize("model", ["fake-gpt", "claude-fake"])
def test_gateway_model_scores_groups(project, capsys, model):
    with FakeGateway(reply=solver) as gateway:
        keyfile(project, gateway.root, gateway.api_key, model)
        assert cli("--steps", "3", "--out", "out.jsonl") == 0
        paths = {r["path"] for r in gateway.requests}
    assert paths == ({"/v1/messages"} if model.startswith("claude") else {"/v1/chat/completions"})
    out = capsys.readouterr().out
    assert "accuracy 1.000" in out and "format rate 1.000" in out and "mean reward 1.100" in out
    groups = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert len(groups) == 3 and all(len(g["tokens"]) == 2 and g["scores"] == [1.1, 1.1] for g in groups)
    assert all(m[0]["role"] == "user" and "####" in m[1]["content"] for g in groups for m in g["messages"])


def test_wrong_key_names_the_key(project, capsys):
    with FakeGateway(reply=solver) as gateway:
        keyfile(project, gateway.root, "sk-this-key-is-wrong-0000")
        assert cli("--steps", "1") == 1
    err = capsys.readouterr().err
    assert "401" in err and "TAOTOKEN_API_KEY" in err and ".env.taotoken" in err
    assert "sk-this-key-is-wrong-0000" not in err


def test_v1_from_the_environment_is_refused_before_any_call(project, capsys, monkeypatch):
    # Issue 19: one road for the gateway URL. The environment's value gets the key file's check: exit 2, no call
    # (it used to reach the gateway and exit 1 on its 404).
    with FakeGateway(reply=solver) as gateway:
        monkeypatch.setenv("TAOTOKEN_API_KEY", gateway.api_key)
        monkeypatch.setenv("TAOTOKEN_BASE_URL", gateway.root + "/v1")
        monkeypatch.setenv("TAOTOKEN_MODEL", "fake-gpt")
        assert cli("--steps", "1") == 2
        assert gateway.requests == []
    err = capsys.readouterr().err
    assert (f"(environment): TAOTOKEN_BASE_URL: found {gateway.root}/v1, expected the gateway root without /v1. "
            f"Hint: set TAOTOKEN_BASE_URL={gateway.root}") in err


def test_v1_in_the_key_file_is_refused_before_any_call(project, capsys):
    with FakeGateway(reply=solver) as gateway:
        keyfile(project, gateway.root + "/v1", gateway.api_key)
        assert cli("--steps", "1") == 2
        assert gateway.requests == []
    assert "TAOTOKEN_BASE_URL" in capsys.readouterr().err


def test_local_inference_service(project, tokenizer_dir, capsys):
    with FakeInference(tokenizer_dir, api_key="") as fake:
        assert cli("--steps", "2", "--local", fake.base_url, "--out", "local.jsonl") == 0
    out = capsys.readouterr().out
    assert fake.base_url in out
    assert "accuracy 0.500" in out and "format rate 1.000" in out and "mean reward 0.600" in out
    groups = [json.loads(line) for line in (project / "local.jsonl").read_text().splitlines()]
    assert len(groups) == 2 and all(len(g["inference_logprobs"]) == 2 for g in groups)


def test_group_size_asked_for_is_the_number_of_completions_per_prompt(project, tokenizer_dir, capsys):
    """--group-size (rl_test_inference's group_size) overrides the config's group size for this probe only."""
    config = (project / "configs" / "config_grpo.toml").read_text()
    with FakeInference(tokenizer_dir, api_key="") as fake:
        assert cli("--steps", "1", "--group-size", "3", "--local", fake.base_url, "--out", "three.jsonl") == 0
    assert "1 groups of 3 from the local inference service" in capsys.readouterr().out
    groups = [json.loads(line) for line in (project / "three.jsonl").read_text().splitlines()]
    assert len(groups) == 1 and len(groups[0]["tokens"]) == 3
    assert (project / "configs" / "config_grpo.toml").read_text() == config  # the run's group size is untouched


def test_offline_unreachable_inference_names_the_url(project, capsys):
    port = free_port()  # nothing listens there
    assert cli("--steps", "1", "--local", f"http://127.0.0.1:{port}/v1") == 1
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}/v1" in err and "not reachable" in err


def test_by_default_the_groups_go_to_the_state_folder_and_every_session_is_closed(project, tokenizer_dir, capfd):
    """Without --out the groups went to a data/ folder of the user's checkout, which git showed as untracked; and the
    child left its aiohttp sessions open, which aiohttp reported at exit ("Unclosed client session", three lines)."""
    with FakeInference(tokenizer_dir, api_key="") as fake:
        assert cli("--steps", "1", "--local", fake.base_url) == 0
    out, err = capfd.readouterr()
    assert (project / ".hermes" / "test-inference-grpo.jsonl").is_file()
    assert not (project / "data").exists()
    assert "Unclosed" not in out + err and "client_session" not in out + err, (out + err)[-2000:]


def test_with_a_users_environment_selected_it_says_it_probes_the_built_in_one(project, capsys):
    """With [environment] name = the user's file, the probe ran the built-in environment's prompts and reward and
    said nothing; its figures read as the file's."""
    import shutil
    from pathlib import Path

    (project / "environments").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "fixtures" / "user_environments" / "upstream_sums.py",
                project / "environments")
    config = project / "configs" / "config_grpo.toml"
    text = config.read_text()
    config.write_text(re.sub(r'(?m)^name = ".*"$', 'name = "upstream-sums"', text, count=1))
    with FakeGateway(reply=solver) as gateway:
        keyfile(project, gateway.root, gateway.api_key)
        assert cli("--steps", "1", "--out", "out.jsonl") == 0
    err = capsys.readouterr().err
    assert ("notice: [environment] name is upstream-sums (environments/upstream_sums.py), your own environment: "
            "test-inference probes the model with the built-in environment's prompts and reward, not your file's; "
            "`make dry-run ALGO=grpo` imports your file and runs its config_init() and setup()") in err, err

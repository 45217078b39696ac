"""hermes_stack.hub: hub ids vs local paths, online/offline flags, and one download shared by the services
(issue 16 breaks 1 and 3), against a local stand-in of the hub's file API through HF_ENDPOINT, with the real
huggingface_hub in a subprocess (it reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE when imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from hermes_stack.hub import OFFLINE_FLAGS, is_hub_id, needs_hub, set_hub_access
from tests.fakes.hub_standin import Repo, serve

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, expected", [
    ("Qwen/Qwen3-8B", True), ("meta-llama/Llama-3.1-8B-Instruct", True), ("org/model.v2", True),
    ("/models/qwen", False), ("./models/qwen", False), ("../qwen/x", False), ("~/m/x", False),
    ("embedded", False), ("qwen", False), ("a/b/c", False), ("org/", False),
])
def test_hub_ids_are_told_from_local_paths(name, expected):
    assert is_hub_id(name) is expected


def test_an_existing_relative_folder_is_a_local_path_not_a_hub_id(tmp_path):
    (tmp_path / "models" / "mine").mkdir(parents=True)
    assert is_hub_id("models/mine") is True  # nothing there relative to the cwd
    assert is_hub_id("models/mine", base_dir=tmp_path) is False


def test_the_gpu_profile_with_a_hub_id_is_online_everything_else_offline():
    assert needs_hub("gpu", "Qwen/Qwen3-8B", "offline-arith")
    assert needs_hub("gpu", "/opt/model", "openai/gsm8k")
    assert not needs_hub("embedded", "Qwen/Qwen3-8B")
    assert not needs_hub("gpu", "/opt/model", "offline-arith", None)
    env = {name: "1" for name in OFFLINE_FLAGS}
    set_hub_access(True, env)
    assert env == {}
    set_hub_access(False, env)
    assert env == {name: "1" for name in OFFLINE_FLAGS}


@pytest.fixture()
def hub(tmp_path):
    model = tmp_path / "repo"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    (model / "tokenizer.json").write_text("{}")
    (model / ".hermes-embedded").write_text("marker")
    (model / "sub").mkdir()
    (model / "sub" / "weights.bin").write_bytes(os.urandom(4096))
    server, state = serve({"hermes-test/tiny": Repo(model, exclude=(".hermes-embedded",))})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state, model
    server.shutdown()


def resolve(endpoint: str, home: Path, download: bool, offline: bool = False) -> subprocess.CompletedProcess:
    code = ("import sys; from hermes_stack.hub import resolve_model\n"
            f"try: print('PATH', resolve_model('hermes-test/tiny', who='svc', download={download}))\n"
            "except LookupError as e: print('LOOKUP', e); sys.exit(3)")
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_FLAGS}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), PYTHONPATH=str(ROOT))
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_hub_id_is_downloaded_once_with_progress_then_found_in_the_shared_cache(hub, tmp_path):
    endpoint, state, source = hub
    home = tmp_path / "hf"
    first = resolve(endpoint, home, download=True)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "svc: downloading hermes-test/tiny from " + endpoint in first.stdout
    path = Path(first.stdout.split("PATH ", 1)[1].strip())
    assert (path / "config.json").read_text() == (source / "config.json").read_text()
    assert (path / "sub" / "weights.bin").read_bytes() == (source / "sub" / "weights.bin").read_bytes()
    assert not (path / ".hermes-embedded").exists()
    assert "%" in first.stderr  # the progress bar (tqdm) was shown
    assert state.downloads == {f"hermes-test/tiny/{f}": 1 for f in ("config.json", "tokenizer.json",
                                                                       "sub/weights.bin")}

    # The second service (trainer: download=False; and offline) finds the same folder without downloading again.
    for second in (resolve(endpoint, home, download=False), resolve(endpoint, home, download=False, offline=True)):
        assert second.returncode == 0, second.stderr[-2000:]
        assert "svc: model hermes-test/tiny from the shared cache" in second.stdout
        assert Path(second.stdout.split("PATH ", 1)[1].strip()) == path
    assert set(state.downloads.values()) == {1}


def test_a_service_that_does_not_download_says_so_in_one_line(hub, tmp_path):
    endpoint, state, _ = hub
    done = resolve(endpoint, tmp_path / "empty", download=False)
    assert done.returncode == 3
    assert "LOOKUP hermes-test/tiny is not in the shared cache" in done.stdout
    assert state.downloads == {}


def test_an_unknown_repo_answers_404_like_the_hub(hub):
    endpoint = hub[0]
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{endpoint}/api/models/nobody/nothing/revision/main")
    assert err.value.code == 404 and err.value.headers["X-Error-Code"] == "RepositoryNotFound"

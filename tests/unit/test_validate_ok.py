"""`hermes-stack validate` on good inputs: exit 0, the resolved configuration printed, secrets redacted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_stack import keyfile as kf
from hermes_stack.controller.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
KEY = "sk-test-0123456789abcdef"
pytestmark = pytest.mark.usefixtures("isolated_secrets")


@pytest.fixture(autouse=True)
def no_default_keyfile(tmp_path, monkeypatch):
    # Offline cases name no key file: the working directory holds no .env.taotoken.
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def keys(tmp_path):
    path = tmp_path / "keys.env"
    path.write_text(f"TAOTOKEN_API_KEY={KEY}\nTAOTOKEN_BASE_URL=https://taotoken.net/api\nTAOTOKEN_MODEL=m1\n"
                    "WANDB_API_KEY=wandb-secret-000111222\n")
    os.chmod(path, 0o600)
    return path


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
@pytest.mark.parametrize("device", [["--device", "cpu"], ["--device", "gpu", "--gpu-memory", "141"]])
def test_shipped_configs_are_valid(algo, device, keys, capsys):
    rc = main(["validate", "--algo", algo, "--config-dir", str(CONFIGS), "--keyfile", str(keys), *device])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "error:" not in err
    assert f"valid: {algo}" in out
    assert f"[algorithm] name={algo}" in out


def test_printed_configuration_is_redacted(keys, capsys):
    assert main(["validate", "--algo", "grpo", "--config-dir", str(CONFIGS), "--keyfile", str(keys),
                 "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert KEY not in out + err and "wandb-secret-000111222" not in out + err
    assert "TAOTOKEN_API_KEY=sk-…cdef" in out
    assert "TAOTOKEN_BASE_URL=https://taotoken.net/api" in out


def test_embedded_profile_marks_overrides(capsys, tmp_path):
    assert main(["validate", "--algo", "ppo", "--config-dir", str(CONFIGS),
                 "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert "profile embedded" in out and "dataset=offline-arith*" in out and "engine=torch*" in out
    assert "offline mode, gateway checks are skipped" in err


def test_gpu_without_memory_figure_says_budget_unchecked(capsys, tmp_path, monkeypatch):
    from hermes_stack.controller import device

    monkeypatch.setattr(device.shutil, "which", lambda name: None)
    assert main(["validate", "--algo", "grpo", "--config-dir", str(CONFIGS),
                 "--device", "gpu"]) == 0
    assert "the memory budget was not checked" in capsys.readouterr().err


def _copy(tmp_path):
    cdir = tmp_path / "configs"
    shutil.copytree(CONFIGS, cdir)
    return cdir


def test_warnings_print_but_exit_0(tmp_path, capsys):
    cdir = _copy(tmp_path)
    toml = cdir / "config_grpo.toml"
    toml.write_text(toml.read_text().replace("group_size = 8", "group_size = 2"))
    settings = cdir / "settings_grpo.json"
    settings.write_text(settings.read_text().replace('"group_size": 8', '"group_size": 2'))
    rc = main(["validate", "--algo", "grpo", "--config-dir", str(cdir),
               "--device", "cpu"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "warning: " in err and "rollout.group_size: found 2, expected 4 or more for GRPO" in err
    assert "valid: grpo (1 warning)" in out


def test_unlock_allows_locked_change_with_warning(tmp_path, capsys):
    cdir = _copy(tmp_path)
    settings = cdir / "settings_grpo.json"
    data = json.loads(settings.read_text())
    data["tinker"]["lora_rank"] = 64
    settings.write_text(json.dumps(data))
    args = ["validate", "--algo", "grpo", "--config-dir", str(cdir),
            "--device", "cpu"]
    assert main(args) == 2
    capsys.readouterr()
    assert main(args + ["--unlock"]) == 0
    assert "warning: " in capsys.readouterr().err


def test_validate_imports_nothing_heavy(tmp_path):
    """`validate` must not import the heavy dependencies: the model, serving, HTTP and plotting stacks (it must stay
    fast)."""
    code = (
        "import sys, json\n"
        "from hermes_stack.controller.cli import main\n"
        f"rc = main(['validate', '--algo', 'grpo', '--config-dir', {str(CONFIGS)!r}, '--device', 'cpu'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'peft', 'tinker', "
        "'atroposlib', 'httpx', 'fastapi', 'uvicorn', 'gguf', 'numpy', 'matplotlib'))\n"
        "print(json.dumps({'rc': rc, 'heavy': heavy}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(kf.PATH_ENV, None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60, check=False)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "heavy": []}, done.stderr

"""Bring your own environment (issue 21) on the real CPU stack: an upstream-style atroposlib file (a hub tokenizer,
localhost URLs, its own group size and batch size, use_wandb on, its own +1/-1 scoring, None for equal groups) put
in the environments/ folder of a project copy and selected by its name runs unchanged for 3 training steps. The
trainer's metrics show it trained on that file's groups: reward_min -1, a score the built-in environment never
gives; the environment's log names the values the stack replaced. Images are the repository's (built first), the
copy has its own compose project name (tests/docker/test_stack_cpu.py's helpers)."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.docker.test_stack_cpu import HERE, PROJECT, ROOT, Where, compose, containers, hs, metrics

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ALGO = "grpo"
FILE = ROOT / "tests" / "fixtures" / "user_environments" / "upstream_sums.py"


def project_copy(tmp) -> Where:
    for name in ("compose.base.yml", "compose.grpo.yml", "compose.ppo.yml", "compose.cpu.yml"):
        shutil.copy(ROOT / name, tmp / name)
    shutil.copytree(ROOT / "configs", tmp / "configs")
    shutil.copytree(ROOT / "environments", tmp / "environments")
    shutil.copy(FILE, tmp / "environments" / "upstream_sums.py")
    config = tmp / "configs" / f"config_{ALGO}.toml"
    config.write_text(config.read_text().replace('name = "gsm8k"', 'name = "upstream-sums"', 1))
    assert 'name = "upstream-sums"' in config.read_text()
    return Where(tmp)


def test_an_upstream_style_environment_file_trains_three_steps_unchanged(tmp_path):
    project = PROJECT.format(algo=ALGO)
    hs("down", "--algo", ALGO, "--volumes")
    built = hs("build", "--algo", ALGO, "--device", "cpu")
    assert built.returncode == 0, built.stderr[-3000:]
    HERE[ALGO] = project_copy(tmp_path)
    try:
        up = hs("up", "--algo", ALGO, "--device", "cpu", "--wait-timeout", "600", "--no-build")
        assert up.returncode == 0, (f"up failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}\n"
                                    + compose(ALGO, "logs", "--tail", "60", "environment").stdout)

        deadline = time.monotonic() + 600  # bounded: three GRPO steps of the tiny model on 2 CPU cores
        while time.monotonic() < deadline and len(metrics(ALGO)) < 3:
            time.sleep(5)
        records = metrics(ALGO)
        logs = compose(ALGO, "logs", "--no-log-prefix", "environment").stdout
        assert len(records) >= 3, logs[-3000:] + compose(ALGO, "logs", "--tail", "40", "trainer").stdout
        # The file's scores (+1 right, -1 wrong) reached the trainer; the built-in environment scores 0..1.1.
        assert all(r.get("reward_min") == -1.0 and r.get("reward_max") == 1.0 for r in records[:3]), records[:3]

        assert "environment upstream-sums (UpstreamSumsEnv, environments/upstream_sums.py)" in logs, logs[-3000:]
        for line in ("replaced tokenizer_name: found 'NousResearch/DeepHermes-3-Llama-3-3B-Preview', used ",
                     "replaced rollout_server_url: found 'http://localhost:8000', used 'http://atropos:8000'",
                     "replaced use_wandb: found True, used False", "replaced group_size: found 16, used 8",
                     ("replaced server_configs[0].base_url: found 'http://localhost:9001/v1', used "
                     "'http://inference:8001/v1'"),
                     "replaced server_configs[0].api_key: found (hidden), used (the stack's internal key)"):
            assert line in logs, (line, logs[-3000:])
        assert (tmp_path / "environments" / "upstream_sums.py").read_bytes() == FILE.read_bytes()  # unchanged
    finally:
        down = hs("down", "--algo", ALGO, "--volumes")
        HERE.pop(ALGO, None)
    assert down.returncode == 0, down.stderr
    assert containers(project) == []

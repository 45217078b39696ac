"""Issue 16 breaks 2 and 4 as facts of the Dockerfiles and compose files (the Docker tier checks them live in
tests/docker/test_stack_gpu_rehearsal.py: the cache volume is written by uid 10001, the model comes from the hub).

2: a named volume mounted on a folder the image never created is created root-owned, so the uid-10001 services
   cannot write downloads or flashinfer's JIT cache: every image whose service mounts hermes-models creates the
   cache folders owned by 10001.
4: the environment image must not bake HF_*_OFFLINE: it could never load gsm8k or a hub tokenizer on a connected
   GPU VM. The environment decides at start (hermes_stack.hub).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hermes_stack.hub import HF_CACHE, OFFLINE_FLAGS

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "compose.base.yml").read_text().replace("!reset", ""))["services"]


def stages(dockerfile: str) -> dict[str, str]:
    """Stage name -> its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", (ROOT / "docker" / dockerfile).read_text())
    out: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            current = match.group(1) or f"stage{len(out)}"
            out[current] = ""
        elif current and not line.lstrip().startswith("#"):
            out[current] += line + "\n"
    return out


def test_the_services_sharing_the_model_cache_mount_it_at_one_path():
    for service in ("inference", "trainer", "environment"):
        assert f"hermes-models:{HF_CACHE}" in [v.split("  ")[0] for v in BASE[service]["volumes"]], service


@pytest.mark.parametrize("dockerfile, stage", [("trainer.Dockerfile", "gpu"), ("trainer.Dockerfile", "cpu"),
                                               ("environment.Dockerfile", "runtime")])
def test_images_create_the_cache_folders_owned_by_the_service_user_before_user_switch(dockerfile, stage):
    body = stages(dockerfile)[stage]
    before_user = body.split("USER 10001")[0]
    mkdir = re.search(r"mkdir -p ([^&]+)", before_user)
    assert mkdir and HF_CACHE in mkdir.group(1).split(), (stage, before_user)
    assert re.search(r"chown -R 10001:10001 [^&]*/home/hermes\b", before_user), before_user
    if stage == "gpu":  # flashinfer's JIT cache under $HOME/.cache (SGLang's kernels)
        assert "/home/hermes/.cache/flashinfer" in mkdir.group(1).split()


def test_the_environment_image_is_not_baked_offline():
    env_lines = " ".join(line for line in stages("environment.Dockerfile")["runtime"].splitlines()
                         if line.startswith("ENV"))
    assert not any(flag in env_lines for flag in OFFLINE_FLAGS), env_lines
    assert "WANDB_MODE=offline" in env_lines  # what stays baked

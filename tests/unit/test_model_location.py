"""Issue 19: where the model is and whether the policy is LoRA are decided once (hermes_stack.modelcore.location),
for the trainer, the inference service and the environment alike."""

from pathlib import Path

import pytest

from hermes_stack.modelcore import catalog
from hermes_stack.modelcore.embedded import MARKER_FILE
from hermes_stack.modelcore.location import EMBEDDED_MODEL, model_location, trains_lora


def test_model_location():
    assert model_location(EMBEDDED_MODEL, "/opt/tiny", "/opt/models") == "/opt/tiny"
    name = catalog.names()[0]
    assert model_location(name, "/opt/tiny", "/opt/models") == catalog.local_dir(name, "/opt/models")
    assert model_location(name, "/opt/tiny", "/opt/models").startswith("/opt/models/")
    assert model_location("Qwen/Qwen3-8B", "/opt/tiny", "/opt/models") == "Qwen/Qwen3-8B"


@pytest.mark.parametrize("engine, embedded, rank, lora", [
    ("tinker", True, 32, True), ("auto", False, 32, True),
    ("torch", False, 32, True), ("torch", True, 32, False), ("torch", False, None, False),
])
def test_trains_lora(tmp_path: Path, engine, embedded, rank, lora):
    if embedded:
        (tmp_path / MARKER_FILE).write_text("{}")
    assert trains_lora(engine, tmp_path, rank) is lora

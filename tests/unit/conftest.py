"""Fixtures several unit test modules share. For the trainer tests (test_atropos_client, test_trainer_*): one real
run-api per test module and a fresh fake inference service per test; for the key file and validate tests: isolated
secrets. Imports are lazy so other unit tests do not pay for torch."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def api():
    """atroposlib's real run-api on a loopback port, shared by the tests of one module (they reset it as needed)."""
    from trainer_helpers import AtroposProcess

    proc = AtroposProcess()
    yield proc
    proc.stop()


@pytest.fixture
def inference():
    """The fake inference surface the trainer talks to (models, generate, update_weights_from_disk)."""
    from trainer_helpers import FakeInferenceForTrainer

    server = FakeInferenceForTrainer()
    yield server
    server.stop()


@pytest.fixture
def isolated_secrets(monkeypatch):
    """No key file path from the caller's environment, and an empty redaction registry before and after the test."""
    from hermes_stack import keyfile as kf
    from hermes_stack import redaction

    monkeypatch.delenv(kf.PATH_ENV, raising=False)
    redaction.forget_secrets()
    yield
    redaction.forget_secrets()


@pytest.fixture
def compose_calls(monkeypatch):
    """Every call that reached the compose choke point (hermes_stack.controller.compose.Compose); bad-input tests assert it stays
    empty: nothing was started."""
    from hermes_stack.controller import compose

    calls: list[tuple] = []
    monkeypatch.setattr(compose.Compose, "run", lambda self, argv, capture=True: calls.append(("run", argv)) or "")
    monkeypatch.setattr(compose.Compose, "stream", lambda self, argv: calls.append(("stream", argv)) or iter(()))
    return calls

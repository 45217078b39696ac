"""Fixtures several unit test modules share. For the trainer tests (test_atropos_client, test_trainer_*): one real
run-api per test module and a fresh fake inference service per test; for the key file and validate tests: isolated
secrets. Imports are lazy so other unit tests do not pay for torch."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def root_logging_restored():
    """No root handler a test added outlives it, and the root level is restored. A service's main() calls
    setup_logging, whose handler writes to the sys.stdout of that moment: pytest's capture of that test, closed once
    it ends. A background thread that logs later (the Tinker SDK's, after its client closed mid-request) then printed
    "--- Logging error ---" with a traceback into whichever test was capturing, and a bad-input test that asserts
    no traceback failed on a clean clone."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    # Only plain StreamHandlers (basicConfig's): pytest's own capture handlers are subclasses it adds and removes
    # around each phase itself.
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler and handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


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

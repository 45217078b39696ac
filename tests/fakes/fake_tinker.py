"""The Tinker test double lives in tests.fakes.tinker_service (it also runs as a container for the Docker
tier); this name keeps the tests' imports short. FakeTinker() without a model directory speaks the protocol with fixed
log-probs; with `model_dir` it trains the model in torch."""

from tests.fakes.tinker_service import API, STUB_ADAPTER, LocalTinker, decode_forward_backward

FakeTinker = LocalTinker
ADAPTER_FILES = STUB_ADAPTER

__all__ = ["ADAPTER_FILES", "API", "FakeTinker", "LocalTinker", "decode_forward_backward"]

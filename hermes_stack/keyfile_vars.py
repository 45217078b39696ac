"""The one table of key-file variables: name, secret or not, and which services receive it.

Everything else is derived from it: the names the key file is checked against (keyfile.KNOWN_NAMES, "did you mean"),
the values shown in clear (keyfile.NON_SECRET_NAMES), the plain environment entries and the Compose secrets
(service_env.PLAIN, service_env.RECEIVERS, secret_files.SECRETS). compose.base.yml must agree
(tests/static/test_compose_files.py). Stdlib only: the healthcheck imports it through secret_files on every probe.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyFileVar:
    name: str
    secret: bool  # secret: never printed, a Compose secret file; else a plain environment entry, shown in clear
    receivers: tuple[str, ...]  # the compose services that get it; () = read by a library, not by hermes-stack
    meaning: str


# The gateway key goes only to gateway-check (the layer-1 check) and the environment (the LLM judge); test-inference
# runs on the host and reads the key file itself. Atropos never calls the gateway nor the inference service.
VARIABLES: tuple[KeyFileVar, ...] = (
    KeyFileVar("HERMES_INFERENCE_KEY", True, ("inference", "trainer", "environment"),
               "the internal key of the inference service (absent: generated once by `up`)"),
    KeyFileVar("TAOTOKEN_API_KEY", True, ("gateway-check", "environment"), "the gateway key"),
    KeyFileVar("TAOTOKEN_BASE_URL", False, ("gateway-check", "environment"), "the gateway root, without /v1"),
    KeyFileVar("TAOTOKEN_MODEL", False, ("gateway-check", "environment"), "the gateway model"),
    KeyFileVar("TINKER_API_KEY", True, ("trainer",), "Tinker's key, on its own line (validation checks TAOTOKEN_API_KEY's value in its place, but that value never reaches the trainer)"),
    KeyFileVar("TINKER_BASE_URL", False, ("trainer",), "Tinker's service URL (absent: the SDK's default)"),
    KeyFileVar("WANDB_API_KEY", True, ("trainer", "environment"), "Weights & Biases key (optional)"),
    KeyFileVar("WANDB_BASE_URL", False, (), "wandb's own variable: not read by hermes-stack, shown in clear"),
)

READ = tuple(v for v in VARIABLES if v.receivers)
PATH_ENV = "HERMES_KEYFILE"  # the key file's own path (so does --keyfile); a path, not a secret

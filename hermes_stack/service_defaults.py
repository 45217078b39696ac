"""Defaults the services share with their healthcheck: one place, read by hermes_stack.service_env.ServiceEnv (the
typed environment) and by hermes_stack.health (stdlib only: it runs on every probe and cannot import pydantic)."""

HEALTH_TIMEOUT_S = 8.0  # HERMES_HEALTH_TIMEOUT: seconds one probe request may take
# HERMES_LOGPROB_TOLERANCE: the dry-run's policy checks (trainer/policy_checks.py), mean |log ratio| a token. Measured
# (docs/benchmarks.md, GPU): a bf16 trainer on an H200 against a float32 server 0.021-0.029 (0.02 refused every GPU
# run), float32 on both 6e-6 there and 1e-7 on CPU; a changed policy moves the probe by 0.26-0.43. Below
# policy_checks.MIN_MOVE / 2 (0.1), so a push that reached is still told from one that did not.
LOGPROB_TOLERANCE = 0.05
DATA_DIR = "/data"  # HERMES_DATA_DIR: the shared data volume inside the containers
# Where a probe looks when compose did not say (a service's own container: loopback).
ATROPOS_URL = "http://127.0.0.1:8000"
INFERENCE_URL = "http://127.0.0.1:8001/v1"

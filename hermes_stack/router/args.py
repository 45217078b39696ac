"""The router's command line (pure): SGLang's router (sglang-router 0.3.2, `sglang_router.launch_router`) in front
of the replicas named in HERMES_INFERENCE_REPLICA_URLS, on the inference port.

- Static `--worker-urls` from the compose service names: workers registered at run time (`POST /workers`) are lost
  when the router's container restarts; these come back with it.
- `--health-check-endpoint /health_generate`: our front answers it only once the newest synced weights are loaded
  (hermes_stack/inference/server.py), so a replica back from a crash gets traffic only when it serves the current
  policy. `/health` would pass while SGLang still loads (it answers 200 with "ready": false).
- `--policy round_robin`: spreads a step's rollouts evenly and predictably over the replicas. cache_aware (SGLang's
  default, prefix-affine) is the choice once prompts share long prefixes on GPU (docs/scaling.md).
- `--cb-timeout-duration-secs 10`: the router's circuit breaker opens on a replica whose requests failed (a crash)
  and, by default, tries it again only after 60 s: a replica back from a crash, healthy and on the newest weights,
  served nothing for a minute while `make status` called it healthy. Two health-check intervals instead.
The worker key goes to the router in-process (`--api-key`, hermes_stack/router/__main__.py), never on an argv that
`docker inspect` or `ps` would show.
"""

from __future__ import annotations

HEALTH_ENDPOINT = "/health_generate"
POLICY = "round_robin"
HEALTH_INTERVAL_S = 5
CIRCUIT_RETRY_S = 2 * HEALTH_INTERVAL_S


def router_argv(worker_urls: tuple[str, ...], port: int, log_level: str = "INFO") -> list[str]:
    # The router's INFO is two lines per request and one per health probe (600 lines in 90 s of a CPU run, which
    # buried the rest of `docker compose logs`): the stack's INFO is its warn; HERMES_LOG_LEVEL=DEBUG shows them.
    level = {"INFO": "warn", "WARNING": "warn", "CRITICAL": "error"}.get(log_level.upper(), log_level.lower())
    return ["--host", "0.0.0.0", "--port", str(port), "--worker-urls", *worker_urls, "--policy", POLICY,
            "--health-check-endpoint", HEALTH_ENDPOINT, "--health-check-interval-secs", str(HEALTH_INTERVAL_S),
            "--cb-timeout-duration-secs", str(CIRCUIT_RETRY_S), "--log-level", level]

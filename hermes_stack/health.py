"""Readiness checks for the compose healthchecks:
`python -m hermes_stack.health <service> [--url URL] [--wait S] [--hold S]`.

Stdlib only (it also runs in the atropos image, which carries this module alone), so it reads its few variables
itself; they are hermes_stack.service_env.ServiceEnv's (tests/static checks the names). Exit 0 = ready, 1 = not ready with
one stderr line saying why. Readiness, not liveness:
- atropos:     GET /status answers with the step counter.
- inference:   /v1/models lists a model (HERMES_SERVED_MODEL_NAME when set) AND GET /health_generate answers 200 — a
               server that says "ok" before it can generate is not ready. /health_generate (SGLang's, and the built-in
               server's) generates one token when idle and counts a server that is generating as healthy, so a
               probe does not time out behind a long rollout of a real model on a busy CPU.
- environment: its marker $HERMES_DATA_DIR/ready/environment exists, written by the live process (after Atropos
               accepted /register-env).
- trainer:     its marker exists (after /register) AND its inference backend answers /v1/models (behind the router,
               REPLICAS=N: the router's /readiness).
`python -m hermes_stack.health weights` (inside an inference replica): its weights version and requests served, one
JSON line, for `status`.
- router:      SGLang's router's /readiness: at least one replica healthy (by its /health_generate checks).

--wait S retries a failing check every 0.2 s for up to S seconds inside one probe. Engine 20.10 has no
healthcheck.start_interval: without this a service that got ready just after a probe stays "starting" for a whole
interval (that was most of the stack's start-up overhead).

--hold S: once this container has passed a probe (a note in $TMPDIR, keyed by its PID 1's start, so a restarted
container starts afresh), a passing probe stays and checks again every HOLD_POLL_S until S seconds after it started,
and fails at once with the first check that fails. A failure removes the note: the next pass returns at once again.
The first pass of a container's life still returns at once (`up --wait` and depends_on see it healthy as soon as it
is), and a failure is still seen within a poll; but Docker execs a probe about once per S seconds instead of once
per interval. Each exec costs the Docker daemons and runc ~0.1 s of CPU: with four services probed every 2 s that was ~0.2
of a core of a 2-core machine (issue 22, docs/benchmarks.md). A single failed check inside a hold does not make a
service unhealthy: it fails one probe, and compose's `retries` ask for three in a row. A probe ends within
max(--wait, --hold) plus its requests' timeouts (tests/static checks this against compose's timeout).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from hermes_stack import service_defaults as defaults

TIMEOUT_S = float(os.environ.get("HERMES_HEALTH_TIMEOUT") or defaults.HEALTH_TIMEOUT_S)
POLL_S = 0.2
INF = float("inf")
HOLD_POLL_S = 2.0  # a held probe checks as often as Docker probed before (compose's interval)
SERVICES = ("atropos", "inference", "environment", "trainer", "router")

# (method, url, json body or None, headers) -> (status, parsed json or None). Injected in tests.
Fetch = Callable[[str, str, object, dict[str, str]], tuple[int, object]]


class NotReady(Exception):
    """One line saying what is not ready yet."""


class Refused(NotReady):
    """Not ready, and waiting will not help (a wrong key): wait_for gives up at once."""


def http_fetch(method: str, url: str, body: object, headers: dict[str, str]) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # URLs come from our own compose env
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise NotReady(f"{method} {url} failed: {reason}") from None
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def loopback(url: str) -> str:
    """The same URL on 127.0.0.1: a service checks itself, not whatever the compose DNS name resolves to."""
    parts = urllib.parse.urlsplit(url)
    netloc = f"127.0.0.1:{parts.port}" if parts.port else "127.0.0.1"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def server_root(openai_url: str) -> str:
    """`http://h:8001/v1` -> `http://h:8001`. Strips the suffix, not characters (`rstrip("/v1")` gave :800)."""
    url = openai_url.rstrip("/")
    return url.removesuffix("/v1")


def check_atropos(base_url: str, fetch: Fetch) -> str:
    status, body = fetch("GET", f"{base_url.rstrip('/')}/status", None, {})
    if status != 200 or not isinstance(body, dict) or "current_step" not in body:
        raise NotReady(f"GET {base_url}/status answered {status} {str(body)[:80]}, expected 200 with current_step")
    return f"atropos ready (step {body['current_step']}, queue {body.get('queue_size')})"


def check_models(openai_url: str, key: str, model: str | None, fetch: Fetch) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = f"{openai_url.rstrip('/')}/models"
    status, body = fetch("GET", url, None, headers)
    if status in (401, 403):
        raise Refused(f"GET {url} answered {status}: HERMES_INFERENCE_KEY does not match the inference service's key")
    if status != 200 or not isinstance(body, dict):
        raise NotReady(f"GET {url} answered {status}, expected 200 with a model list")
    ids = [m.get("id") for m in body.get("data") or [] if isinstance(m, dict)]
    if not ids:
        raise NotReady(f"GET {url} lists no model yet (still loading)")
    if model and model not in ids:
        raise NotReady(f"GET {url} lists {ids}, not the configured model {model!r}")
    return ids[0]


def check_inference(openai_url: str, key: str, model: str | None, fetch: Fetch) -> str:
    served = check_models(openai_url, key, model, fetch)
    url = f"{server_root(openai_url)}/health_generate"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    status, answer = fetch("GET", url, None, headers)
    if status != 200:
        raise NotReady(f"GET {url} answered {status} {str(answer)[:80]}, expected 200 (it generates one token)")
    return f"inference ready: {served} generates"


def check_router(openai_url: str, fetch: Fetch) -> str:
    """SGLang's router is ready when at least one worker is healthy: its /readiness answers 200 then, 503 before."""
    url = f"{server_root(openai_url)}/readiness"
    status, body = fetch("GET", url, None, {})
    if status != 200 or not isinstance(body, dict):
        raise NotReady(f"GET {url} answered {status} {str(body)[:80]}, expected 200: no healthy replica yet")
    return f"router ready: {body.get('healthy_workers')} of {body.get('total_workers')} replicas healthy"


def process_start_ticks(pid: int, proc: Path = Path("/proc")) -> int | None:
    """When the process started, in clock ticks after boot (field 22 of /proc/<pid>/stat), or None."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])  # counted after the comm field, which may hold spaces
    except (OSError, IndexError, ValueError):
        return None


def process_start_epoch(pid: int, proc: Path = Path("/proc")) -> float | None:
    ticks = process_start_ticks(pid, proc)
    try:
        btime = next(int(line.split()[1]) for line in (proc / "stat").read_text().splitlines()
                     if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    return None if ticks is None else btime + ticks / os.sysconf("SC_CLK_TCK")


def marker_path(data_dir: Path, service: str) -> Path:
    """$HERMES_DATA_DIR/ready/<service>: the readiness marker of a service that has no port to ask."""
    return data_dir / "ready" / service


def write_marker(data_dir: Path, service: str, **info) -> Path:
    """The service's marker, JSON with this process's pid (what check_marker reads) and `info`, written atomically
    (a probe never reads half a file). The one writer for the trainer, the environment and inference."""
    path = marker_path(data_dir, service)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{service}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), **info}))
    os.replace(tmp, path)
    return path


def remove_marker(path: Path | None) -> None:
    """Remove `path` when this process wrote it: a newer process of the service may already have replaced it."""
    if path is None:
        return
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def check_marker(data_dir: Path, service: str, proc: Path = Path("/proc")) -> str:
    path = marker_path(data_dir, service)
    try:
        marker = json.loads(path.read_text())
        pid = int(marker["pid"])
    except FileNotFoundError:
        raise NotReady(f"no readiness marker {path} yet") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise NotReady(f"readiness marker {path} is not JSON with a pid") from None
    if not (proc / str(pid)).exists():
        raise NotReady(f"marker {path} names pid {pid}, which is not running (stale marker from an earlier run)")
    started = process_start_epoch(pid, proc)
    # A marker older than its process was left by an earlier process that happened to get the same pid.
    if started is not None and path.stat().st_mtime + 1.0 < started:
        raise NotReady(f"marker {path} predates pid {pid} (stale marker from an earlier run)")
    return f"{service} ready (pid {pid})"


def wait_for(probe: Callable[[], str], wait_s: float, poll_s: float | None = None,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """probe() until it passes or `wait_s` runs out; then NotReady with the last reason and the time waited."""
    poll_s = POLL_S if poll_s is None else poll_s
    deadline = clock() + wait_s
    while True:
        try:
            return probe()
        except Refused:
            raise
        except NotReady as exc:
            if clock() + poll_s > deadline:
                if wait_s <= 0:
                    raise
                raise NotReady(f"{exc} (waited {wait_s:g} s)") from None
        sleep(poll_s)


def hold(probe: Callable[[], str], answer: str, until: float, poll_s: float = HOLD_POLL_S,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """After a pass (`answer`), probe() again every `poll_s` while a check can start before `until` (a clock()
    time); the last answer, or NotReady at the first failure."""
    while clock() + poll_s <= until:
        sleep(poll_s)
        answer = probe()
    return answer


def _note(service: str, state_dir: Path) -> Path:
    return state_dir / f"hermes-health-{service}"


def passed_before(service: str, state_dir: Path, proc: Path = Path("/proc")) -> bool:
    """Whether this container (its PID 1, by start time) passed its last probe of `service`; notes that it has now.
    False when the note cannot be read or written: the probe then returns at once, as without --hold. Keyed by the
    raw start ticks, not an epoch: btime moves when the wall clock is stepped."""
    started = process_start_ticks(1, proc)
    if started is None:
        return False
    note, key = _note(service, state_dir), str(started)
    try:
        if note.read_text() == key:
            return True
    except OSError:
        pass
    try:
        note.write_text(key)
    except OSError:
        pass
    return False


def forget_pass(service: str, state_dir: Path) -> None:
    """A failed probe: the next pass returns at once (a recovering service is seen healthy as soon as it is).
    Best effort, as passed_before: a note this user cannot remove (a root `docker exec` wrote it) costs one hold."""
    try:
        _note(service, state_dir).unlink(missing_ok=True)
    except OSError:
        pass


def check(service: str, env: dict[str, str], fetch: Fetch = http_fetch, url: str | None = None) -> str:
    data_dir = Path(env.get("HERMES_DATA_DIR", defaults.DATA_DIR))
    inference_url = env.get("HERMES_INFERENCE_URL", defaults.INFERENCE_URL)
    key = env.get("HERMES_INFERENCE_KEY", "")
    model = env.get("HERMES_SERVED_MODEL_NAME") or None
    if service == "atropos":
        return check_atropos(url or loopback(env.get("HERMES_ATROPOS_URL", defaults.ATROPOS_URL)), fetch)
    if service == "inference":
        return check_inference(url or loopback(inference_url), key, model, fetch)
    if service == "environment":
        return check_marker(data_dir, "environment")
    if service == "router":
        return check_router(url or loopback(inference_url), fetch)
    if service == "trainer":
        ready = check_marker(data_dir, "trainer")
        if env.get("HERMES_INFERENCE_REPLICA_URLS"):  # behind the router, which lists no served model of its own
            check_router(url or inference_url, fetch)
        else:
            check_models(url or inference_url, key, model, fetch)
        return f"{ready}, inference answers"
    raise NotReady(f"unknown service {service!r}; expected {', '.join(SERVICES)}")


def replica_counters(openai_url: str, key: str, fetch: Fetch) -> dict:
    """An inference replica's own counters (`hermes` in its /get_server_info): weights version, requests served."""
    url = f"{server_root(openai_url)}/get_server_info"
    status, body = fetch("GET", url, None, {"Authorization": f"Bearer {key}"} if key else {})
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("hermes"), dict):
        raise NotReady(f"GET {url} answered {status} {str(body)[:80]}, expected 200 with the replica's counters")
    return body["hermes"]


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv == ["weights"]:  # `status`, in an inference container: this replica's counters as one JSON line
        env = dict(os.environ)
        from hermes_stack.secret_files import load_secrets

        load_secrets(env)
        try:
            print(json.dumps(replica_counters(loopback(env.get("HERMES_INFERENCE_URL", defaults.INFERENCE_URL)),
                                              env.get("HERMES_INFERENCE_KEY", ""), http_fetch)))
        except NotReady as exc:
            print(f"weights: {exc}", file=sys.stderr)
            return 1
        return 0
    started = time.monotonic()
    service, options = argv[0], dict(zip(argv[1::2], argv[2::2]))
    try:
        wait_s, hold_s = float(options.get("--wait", 0)), float(options.get("--hold", 0))
    except ValueError:
        wait_s = hold_s = -1.0
    if (service not in SERVICES or len(argv) % 2 == 0 or not set(options) <= {"--url", "--wait", "--hold"}
            or not (0 <= wait_s < INF and 0 <= hold_s < INF)):  # NaN fails both comparisons
        print(f"usage: python -m hermes_stack.health {{{','.join(SERVICES)}}} [--url URL] [--wait SECONDS] "
              f"[--hold SECONDS]; got {' '.join(argv)}", file=sys.stderr)
        return 1  # Docker reserves exit 2 in healthchecks
    env = dict(os.environ)
    if service in ("inference", "trainer"):
        # Their checks call inference with its key, a Compose secret file. (Not for atropos: it holds no secret.)
        from hermes_stack.secret_files import load_secrets

        load_secrets(env)
    probe = lambda: check(service, env, url=options.get("--url"))
    state_dir = Path(os.environ.get("TMPDIR") or "/tmp")
    try:
        answer = wait_for(probe, wait_s)
        if hold_s > 0 and passed_before(service, state_dir):
            answer = hold(probe, answer, started + hold_s)
        print(answer)
    except NotReady as exc:
        print(f"{service} not ready: {exc}", file=sys.stderr)
        if hold_s > 0:
            forget_pass(service, state_dir)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The sglang backend: launch and supervise `python -m sglang.launch_server` (GPU), and proxy to it.

Key handling: SGLang's `--api-key` is given through SGLang's YAML `--config` file (mode 0600 in a private temp dir,
deleted once the child is ready), never on argv. The child also binds 127.0.0.1 only, so from outside the
container it is reachable solely through this front, which checks HERMES_INFERENCE_KEY itself.

Supervision: readiness = `/health_generate` answers 200. A child that exits before it is ready is fatal (the error
names the exit code and the log tail). After readiness, a crash is restarted up to `max_restarts` times; then the
service exits non-zero so compose's restart policy and healthcheck take over.

LoRA adapters follow SGLang's rules (python/sglang/srt/lora/lora_manager.py `validate_new_adapter` refuses a name that
is already loaded; managers/tokenizer_control_mixin.py `_unload_lora_adapter_locked` waits, holding the LoRA update
lock that every load takes too, until no request holds the adapter): a load of a name this front already serves
from the same export is answered as done without asking SGLang (a push is idempotent: after a restart this front
loads the newest `step-<N>` itself and the trainer's retry of it must not fail), a different export under that name
replaces it; an adapter is unloaded only once no request this front forwarded still uses it, in the background, so
neither the trainer's push nor its unload waits behind a long rollout.

sglang itself is never imported here: it is only on GPU images, and we only need its command line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from hermes_stack.errors import StackError
from hermes_stack.inference.backend import BackendReply, exit_process
from hermes_stack.modelcore.weights_layout import LORA_TARGET_MODULES
from hermes_stack.secret_files import SECRETS

log = logging.getLogger("hermes.inference")

# Variables the child must not inherit (every Compose secret's): it gets its key from the config file, and has no use
# for the others.
SECRET_ENV = tuple(SECRETS.values())


@dataclass(frozen=True)
class SGLangLaunch:
    model_path: str
    served_model: str
    port: int = 30000  # internal, loopback only
    tp: int = 1
    mem_fraction_static: float | None = None
    context_length: int | None = None
    max_lora_rank: int | None = None  # set: LoRA serving enabled (the Tinker engine pushes adapters)
    extra_args: tuple[str, ...] = ()
    launcher: tuple[str, ...] = (sys.executable, "-m", "sglang.launch_server")
    start_timeout_s: float = 1800.0  # model loading on a cold GPU VM takes minutes
    max_restarts: int = 3


# SGLang sizes its static share (weights and KV pool) from the memory free when it starts, not from the card:
# model_executor/model_runner.py reads the free memory before loading (`min_per_gpu_memory = init_torch_distributed()`,
# torch.cuda.mem_get_info) and passes it to init_memory_pool as `total_gpu_memory`, and the KV pool gets `available -
# total_gpu_memory * (1 - mem_fraction_static)` after the weights ("Not enough memory" when that is <= 0). So the
# static share is `free at start x fraction`. The planned fraction assumes an empty card, as at the stack's first start
# (the trainer waits for inference to be healthy). A restart beside a running trainer would shrink the share by the
# trainer's memory times the fraction, or not start on a tight split, so each launch scales the fraction by
# card / free. The allowance covers the probe's CUDA context and the driver's reserve, which an empty card shows too
# (so the first start keeps the planned fraction exactly).
CONTEXT_ALLOWANCE_BYTES = 1 << 30
MAX_FRACTION = 0.99
GPU_MEMORY_PROBE = ("import json, sys, torch\n"
                    "n = min(int(sys.argv[1]), torch.cuda.device_count())\n"
                    "print(json.dumps([list(torch.cuda.mem_get_info(i)) for i in range(n)]))")


def launch_fraction(planned: float, free: int, total: int) -> float:
    """The --mem-fraction-static that gives SGLang its planned static share (`planned x total`) when only `free` bytes
    of the card are free at its start: planned x total / free (free counted with the allowance, at most the card),
    rounded down to 0.001, at most MAX_FRACTION."""
    if total <= 0 or free <= 0:
        return planned
    seen_free = min(total, free + CONTEXT_ALLOWANCE_BYTES)
    return min(MAX_FRACTION, max(planned, math.floor(planned * total / seen_free * 1000) / 1000))


def launch_argv(spec: SGLangLaunch, config_file: Path) -> list[str]:
    """The child's argv. It never contains the key: that is in `config_file`."""
    argv = [*spec.launcher, "--config", str(config_file), "--model-path", spec.model_path,
            "--served-model-name", spec.served_model, "--host", "127.0.0.1", "--port", str(spec.port),
            "--tp-size", str(spec.tp)]  # spelled out: "--tp" only worked by argparse's prefix expansion
    if spec.mem_fraction_static is not None:
        argv += ["--mem-fraction-static", str(spec.mem_fraction_static)]
    if spec.context_length is not None:
        argv += ["--context-length", str(spec.context_length)]
    if spec.max_lora_rank is not None:
        # The modules our adapters train, not SGLang's "all" (weights_layout.py says why).
        argv += ["--enable-lora", "--max-lora-rank", str(spec.max_lora_rank), "--lora-target-modules",
                 *LORA_TARGET_MODULES]
    return argv + list(spec.extra_args)



# One log-prob convention (trainer/algorithms.py): SGLang's default, log-probs of softmax(logits / temperature) that it
# sampled from. These variables (the second is the name before SGLang PR #11686) switch it to raw log-probs, which
# would make the trainer's first-pass ratio differ from 1 at any temperature but 1; the child never inherits them.
LOGPROB_ENV = ("SGLANG_RETURN_ORIGINAL_LOGPROB", "RETURN_ORIGINAL_LOGPROB")


# With --tp-size > 1, SGLang refuses to start when one rank's GPU has less than 0.9 of another's free memory
# (model_executor/model_runner.py `init_torch_distributed`, "The memory capacity is unbalanced"). Beside the trainer on
# GPU 0 that is every restart mid-run; colocated RL frameworks (verl) switch the check off the same way. The names
# changed across SGLang versions, so all three are set, unless the user set any of them: SGLang 0.5.18 forwards an old
# name's value onto the new one (srt/environ.py `_DeprecatedEnv.apply`), so one of ours would override the user's.
TP_BALANCE_ENV = {"SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK": "true", "SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK": "true",
                  "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "false"}


def child_env(environ: dict[str, str]) -> dict[str, str]:
    kept = {k: v for k, v in environ.items() if k not in SECRET_ENV and k not in LOGPROB_ENV}
    return kept if any(name in kept for name in TP_BALANCE_ENV) else {**TP_BALANCE_ENV, **kept}


# SGLang logs `server_args=ServerArgs(..., api_key='...', ...)` at start (upstream issue #37457): every key-like field
# of a child line is masked, and the key itself wherever else it appears, before the line reaches our stdout.
_KEY_FIELD = re.compile(r"""((?:api[_-]?key|admin[_-]?api[_-]?key|token|secret)\s*[=:]\s*)(['"]?)([^'",)\s]+)\2""",
                        re.IGNORECASE)


def redact_child_line(line: str, api_key: str | None) -> str:
    from hermes_stack.redaction import redact_known_secrets

    if api_key:
        line = line.replace(api_key, "<redacted>")
    line = _KEY_FIELD.sub(lambda m: m.group(1) + m.group(2) + ("<redacted>" if m.group(3) not in ("None", "null")
                                                               else m.group(3)) + m.group(2), line)
    return redact_known_secrets(line)


def write_key_config(directory: Path, api_key: str | None) -> Path:
    """SGLang YAML config holding only the api key (a JSON string is valid YAML). 0600 in a 0700 directory."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / "sglang-config.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"api-key: {json.dumps(api_key)}\n" if api_key else "{}\n")
    return path


async def probe_gpu_memory(spec: SGLangLaunch, timeout_s: float = 120.0) -> tuple[int, int] | None:
    """(free, total) bytes of the fullest of the first `tp` visible GPUs, read by SGLang's own interpreter in a short
    child (torch.cuda.mem_get_info, what SGLang reads; a CUDA context in this front would hold memory for the
    service's life); None, logged, when it cannot be read."""
    reason = ""
    process = None
    try:
        process = await asyncio.create_subprocess_exec(
            spec.launcher[0], "-c", GPU_MEMORY_PROBE, str(spec.tp), env=child_env(dict(os.environ)),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
        if process.returncode == 0:
            devices = [(int(free), int(total)) for free, total in json.loads(out)]
            if devices:
                return min(devices)
            reason = "no GPU visible"
        else:
            lines = err.decode(errors="replace").strip().splitlines()
            reason = lines[-1] if lines else f"exit {process.returncode}"
    except TimeoutError:
        reason = f"no answer within {timeout_s:.0f} s"
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
    except (OSError, ValueError, TypeError) as exc:
        reason = type(exc).__name__
    log.warning("could not read the GPU's free memory (%s); SGLang starts with the planned --mem-fraction-static",
                reason)
    return None


@dataclass
class _Child:
    process: asyncio.subprocess.Process
    tail: deque = field(default_factory=lambda: deque(maxlen=40))


class SGLangBackend:
    name = "sglang"
    slow_start = True  # the front serves /health while the child loads

    def __init__(self, spec: SGLangLaunch, api_key: str | None, *, transport: httpx.AsyncBaseTransport | None = None,
                 spawn: bool = True, on_fatal: Callable[[str], None] | None = None,
                 memory_probe: Callable[[SGLangLaunch], Awaitable[tuple[int, int] | None]] | None = None):
        self.spec = spec
        self.served_model = spec.served_model
        self.api_key = api_key
        self.spawn = spawn  # False: talk to an already running upstream (tests, or an external SGLang)
        self.on_fatal = on_fatal or exit_process
        self.memory_probe = memory_probe or probe_gpu_memory
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{spec.port}", headers=headers,
                                      timeout=httpx.Timeout(1200.0, connect=5.0), transport=transport)
        self.adapters: list[str] = []
        self.default_adapter: str | None = None
        self._exports: dict[str, tuple] = {}     # adapter name -> identity of the export it was loaded from
        self._in_flight: Counter[str] = Counter()  # adapter name -> requests forwarded with it, not yet answered
        self._retiring: set[str] = set()         # unloads scheduled until their adapter's requests are answered
        self._tasks: set[asyncio.Task] = set()
        self.start_timeout_s = spec.start_timeout_s  # the front reports it: the trainer's restart ride-out bound
        # Set by the front (server.create_app): loads the newest synced weights after a restart of the child, before
        # it counts as ready again, as after a restart of the whole service.
        self.after_restart: Callable[[], Any] | None = None
        self._ready = False
        self._child: _Child | None = None
        self._monitor: asyncio.Task | None = None
        self._stopping = False
        self._secret_dir: Path | None = None

    # ------------------------------------------------------------------ supervision

    def is_ready(self) -> bool:
        return self._ready

    async def start(self) -> None:
        if self.spawn:
            await self._launch()
        await self._wait_ready()
        if self._secret_dir is not None:  # SGLang has read its config: the key file is no longer needed
            shutil.rmtree(self._secret_dir, ignore_errors=True)
            self._secret_dir = None
        if self.spawn:
            self._monitor = asyncio.create_task(self._supervise())

    async def _fetch_model(self) -> None:
        """A hub id is downloaded once into the shared cache (progress in our log) and SGLang gets the folder: the
        trainer then loads the very same files, and SGLang needs no hub access of its own."""
        from hermes_stack.hub import is_hub_id, resolve_model

        if not is_hub_id(self.spec.model_path):
            return
        try:
            path = await asyncio.to_thread(resolve_model, self.spec.model_path, who="inference",
                                           log=lambda text: log.info("%s", text))
        except LookupError as exc:
            raise StackError(f"inference: model {self.spec.model_path}: {exc}. Hint: check the name, the network "
                             "and HF_TOKEN for gated models") from None
        self.spec = dataclasses.replace(self.spec, model_path=str(path))

    async def _launch(self) -> None:
        await self._fetch_model()
        self._secret_dir = Path(tempfile.mkdtemp(prefix="hermes-sglang-"))
        config_file = write_key_config(self._secret_dir, self.api_key)
        argv = launch_argv(await self._spec_for_free_memory(), config_file)
        log.info("starting SGLang: %s", " ".join(argv))  # safe to log: the key is in the file
        process = await asyncio.create_subprocess_exec(*argv, env=child_env(dict(os.environ)),
                                                       stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.STDOUT)
        self._child = _Child(process)
        asyncio.create_task(self._pump(self._child))

    async def _spec_for_free_memory(self) -> SGLangLaunch:
        """The launch spec with --mem-fraction-static raised by what other processes (a running trainer) hold on the
        card now (launch_fraction); the planned spec when no fraction was planned or the card cannot be read."""
        planned = self.spec.mem_fraction_static
        if planned is None:
            return self.spec
        reading = await self.memory_probe(self.spec)
        if reading is None:
            return self.spec
        free, total = reading
        fraction = launch_fraction(planned, free, total)
        if fraction != planned:
            held = (total - free) / 2**30
            log.info("SGLang starts beside %.1f GiB held by other processes (a running trainer): "
                     "--mem-fraction-static %.3f instead of the planned %.2f: SGLang applies it to the memory free "
                     "at its start, and its weights and KV cache keep their planned size", held, fraction, planned)
            if fraction >= MAX_FRACTION:
                log.warning("the planned split no longer fits beside what other processes hold: SGLang's KV cache "
                            "will be smaller than planned, or SGLang will not start. Hint: `make down` and `make up` "
                            "restore the split")
        return dataclasses.replace(self.spec, mem_fraction_static=fraction)

    async def _pump(self, child: _Child) -> None:
        # Child output goes to our stdout (docker compose logs inference) and a tail kept for error messages.
        assert child.process.stdout is not None
        async for raw in child.process.stdout:
            line = redact_child_line(raw.decode(errors="replace").rstrip(), self.api_key)
            child.tail.append(line)
            print(f"[sglang] {line}", flush=True)

    async def _wait_ready(self, mark_ready: bool = True) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.spec.start_timeout_s
        while loop.time() < deadline:
            if self._child is not None and self._child.process.returncode is not None:
                await asyncio.sleep(0.1)  # let the pump drain the last lines
                raise StackError(f"inference: SGLang exited with code {self._child.process.returncode} before it "
                                 f"was ready. Last output: {' | '.join(list(self._child.tail)[-5:]) or '(none)'}. "
                                 "Hint: a GPU, CUDA torch and enough GPU memory are required; "
                                 "check `docker compose logs inference`")
            try:
                response = await self.http.get("/health_generate", timeout=30.0)
                if response.status_code == 200:
                    self._ready = mark_ready
                    log.info("SGLang is ready (health_generate 200)")
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(1.0)
        raise StackError(f"inference: SGLang did not answer /health_generate within {self.spec.start_timeout_s:.0f} s"
                         ". Hint: loading large models takes minutes; check `docker compose logs inference`")

    async def _supervise(self) -> None:
        restarts = 0
        while not self._stopping:
            assert self._child is not None
            code = await self._child.process.wait()
            if self._stopping:
                return
            self._ready = False
            restarts += 1
            log.error("SGLang exited with code %s (restart %d of %d)", code, restarts, self.spec.max_restarts)
            if restarts > self.spec.max_restarts:
                self.on_fatal(f"SGLang crashed {restarts} times; giving up")
                return
            # A restarted SGLang lost the adapters: none is named to it until loaded again.
            self.adapters.clear()
            self.default_adapter = None
            self._exports.clear()
            self._retiring.clear()
            try:
                await self._launch()
                await self._wait_ready(mark_ready=False)
                if self.after_restart is not None:
                    await self.after_restart()  # the newest synced weights, not the base model
                self._ready = True
            except StackError as exc:
                self.on_fatal(str(exc))
                return
            finally:
                if self._secret_dir is not None:
                    shutil.rmtree(self._secret_dir, ignore_errors=True)
                    self._secret_dir = None

    async def stop(self) -> None:
        self._stopping = True
        self._ready = False
        if self._child is not None and self._child.process.returncode is None:
            self._child.process.terminate()
            try:
                await asyncio.wait_for(self._child.process.wait(), 30)
            except TimeoutError:
                self._child.process.kill()
                await self._child.process.wait()
        if self._monitor is not None:
            self._monitor.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._secret_dir is not None:
            shutil.rmtree(self._secret_dir, ignore_errors=True)
        await self.http.aclose()

    # ------------------------------------------------------------------ proxy

    async def _forward(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = await self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise BackendReply(503, {"error": {"message": f"SGLang is not reachable: {type(exc).__name__}",
                                               "type": "unavailable", "code": 503}}) from exc
        try:
            payload = response.json()
        except ValueError:
            payload = {"error": {"message": response.text[:500], "type": "upstream_error", "code": response.status_code}}
        if response.status_code != 200:
            raise BackendReply(response.status_code, payload)
        return payload

    def _with_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        # Hermes extension: the newest loaded adapter serves requests that name none (the trainer's latest policy).
        # A model name that selects no adapter (`base:adapter` does, in SGLang) is answered by that adapter too:
        # SGLang would answer an unknown name with the base model, the builtin backend's _adapter says why not.
        if self.default_adapter is not None and body.get("lora_path") is None:
            model = body.get("model")
            if model is None or model == self.served_model or (isinstance(model, str) and ":" not in model
                                                                 and model != "base"):
                return {**body, "lora_path": self.default_adapter}
        return body

    async def _forward_counted(self, path: str, body: dict[str, Any]) -> Any:
        """Forward a generation, counting it against its adapter until answered: an adapter is unloaded only when
        no request holds it (SGLang's unload would otherwise wait for them with the LoRA update lock held)."""
        body = self._with_adapter(body)
        adapter = body.get("lora_path") if isinstance(body.get("lora_path"), str) else None
        if adapter is not None:
            self._in_flight[adapter] += 1
        try:
            return await self._forward("POST", path, body)
        finally:
            if adapter is not None:
                self._in_flight[adapter] -= 1
                if self._in_flight[adapter] <= 0:
                    del self._in_flight[adapter]

    async def generate(self, body: dict[str, Any]) -> Any:
        return await self._forward_counted("/generate", body)

    async def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._forward_counted("/v1/completions", body)

    async def chat_completions(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._forward_counted("/v1/chat/completions", body)

    async def _admin(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._forward("POST", path, body)
        except BackendReply as reply:
            body = reply.body if isinstance(reply.body, dict) else {}
            # SGLang's LoRA routes answer errors in `error_message`; the weight routes in `message`.
            message = body.get("error_message") or body.get("message")
            return {"success": False, "message": message or json.dumps(reply.body)[:500]}

    async def _admin_answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self._admin(path, body)
        if answer.get("success") is False and not answer.get("message") and answer.get("error_message"):
            answer = {**answer, "message": answer["error_message"]}
        return answer

    async def update_weights_from_disk(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._admin("/update_weights_from_disk", body)

    async def load_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        # One load at a time, as SGLang takes its lora lock for each: after a restart the front's own load of the
        # newest step and the trainer's retry of that step arrive together, and both must not pass the "already
        # loaded?" check before either is done (SGLang would refuse the second as a loaded name).
        if getattr(self, "_load_lock", None) is None:
            self._load_lock = asyncio.Lock()
        async with self._load_lock:
            return await self._load_lora_adapter(body)

    async def _load_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        name, path = body.get("lora_name"), body.get("lora_path")
        identity = export_identity(path)
        if name in self.adapters and name not in self._retiring:
            if identity is not None and self._exports.get(name) == identity:
                # Idempotent: SGLang would refuse the name as already loaded; it serves this very export.
                self.default_adapter = name
                return {"success": True, "message": f"LoRA adapter {name} is already loaded from this export"}
            # The same name, another export (a trainer resumed from an older checkpoint re-trains a step the server
            # still serves): replace it, as SGLang will not load a name twice.
            self.adapters.remove(name)
            if self.default_adapter == name:
                self.default_adapter = self.adapters[-1] if self.adapters else None
            await self._wait_unused(name)
            await self._admin("/unload_lora_adapter", {"lora_name": name})
        elif name in self._retiring:
            await self._wait_retired(name)
        answer = await self._admin_answer("/load_lora_adapter", body)
        if not answer.get("success") and "already loaded" in str(answer.get("message")) and name not in self.adapters:
            # SGLang serves that name already (loaded at its launch, or by a client past this front): served is what
            # the load asked for. Refusing would end in "serving the base model" after every restart.
            answer = {"success": True, "message": f"LoRA adapter {name} was already loaded in SGLang"}
        if answer.get("success"):
            previous = [a for a in self.adapters if a != name]
            self.adapters = [*previous, name]
            self._exports[name] = identity
            self.default_adapter = name
            # Keep GPU memory bounded: the older adapters are no longer served by default.
            for old in previous:
                self._retire(old)
        return answer

    async def unload_lora_adapter(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body.get("lora_name")
        if name in self._retiring:
            return {"success": True, "message": f"LoRA adapter {name} is being unloaded"}
        if name in self.adapters:
            # Answered at once; unloaded once the requests holding it are answered (never blocks the caller).
            self._retire(name)
            return {"success": True, "message": f"LoRA adapter {name} is unloaded once its "
                                                f"{self._in_flight.get(name, 0)} requests in flight are answered"}
        return await self._admin_answer("/unload_lora_adapter", body)

    def _retire(self, name: str) -> None:
        if name in self._retiring:
            return
        self._retiring.add(name)
        if name in self.adapters:
            self.adapters.remove(name)
        if self.default_adapter == name:
            self.default_adapter = self.adapters[-1] if self.adapters else None
        task = asyncio.create_task(self._unload_when_unused(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _wait_unused(self, name: str, poll_s: float = 0.05) -> None:
        while self._in_flight.get(name, 0) > 0:
            await asyncio.sleep(poll_s)

    async def _wait_retired(self, name: str, poll_s: float = 0.05) -> None:
        while name in self._retiring:
            await asyncio.sleep(poll_s)

    async def _unload_when_unused(self, name: str) -> None:
        try:
            await self._wait_unused(name)
            answer = await self._admin_answer("/unload_lora_adapter", {"lora_name": name})
            if not answer.get("success"):
                log.warning("could not unload LoRA adapter %s: %s", name, answer.get("message"))
        finally:
            self._retiring.discard(name)
            self._exports.pop(name, None)

    async def health_generate(self) -> bool:
        try:
            return (await self.http.get("/health_generate", timeout=30.0)).status_code == 200
        except httpx.HTTPError:
            return False

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.spec.model_path, "served_model_name": self.served_model, "backend": self.name,
                "is_generation": True, "lora_adapters": list(self.adapters)}

    def models(self) -> list[str]:
        return [self.served_model, *self.adapters]


def export_identity(path: Any) -> tuple | None:
    """What tells one export of a weights folder from another under the same path: each file's name, size and
    modification time (an export is written into a new temp folder and renamed into place, so its files are new)."""
    if not isinstance(path, str):
        return None
    try:
        return tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in Path(path).iterdir()
                            if f.is_file()))
    except OSError:
        return None

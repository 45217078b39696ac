"""`hermes-stack test-inference --algo grpo [--steps N] [--out FILE] [--local URL]`: a few scored groups before
paying for training.

Runs the environment in atroposlib's process mode (no Atropos, no trainer): with a key file, completions come from
the gateway model (TAOTOKEN_MODEL, through hermes_stack.gateway); offline, or with --local URL, from the local
inference service (the stack's, OpenAI-style URL ending in /v1, `/generate` at its root). Writes the scored groups to
JSONL (plus atroposlib's HTML view next to it) and prints accuracy, format rate and mean reward.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from hermes_stack.controller.commands.app import app
from hermes_stack.errors import InputError, Problem, StackError


def _inference_key(stack, keyfile_path: Path | None) -> str:
    """HERMES_INFERENCE_KEY, else the key file's inference.api_key_env value, else (offline) the key `up`
    generated and keeps in .hermes/inference.key: the same order `up` gives the service its key."""
    if os.environ.get("HERMES_INFERENCE_KEY"):
        return os.environ["HERMES_INFERENCE_KEY"]
    from hermes_stack.controller.stack_state import STATE_DIR, project_root, stored_inference_key
    from hermes_stack.keyfile import load_keyfile

    keyfile = load_keyfile(keyfile_path)
    from_file = (keyfile.get(stack.settings.inference.api_key_env) or "") if not keyfile.offline else ""
    return from_file or stored_inference_key(project_root() / STATE_DIR) or ""


def probe_inference(base_url: str, key: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds, naming the URL, instead of after atroposlib's retries."""
    import httpx

    from hermes_stack.health import server_root

    root = server_root(base_url)
    try:
        response = httpx.get(f"{root}/health", timeout=timeout_s,
                             headers={"authorization": f"Bearer {key}"} if key else {})
    except httpx.HTTPError as exc:
        raise StackError(
            f"the local inference service at {base_url} is not reachable ({type(exc).__name__}); start the stack "
            "(`make up`) or pass --local <URL ending in /v1>"
        ) from None
    if response.status_code in (401, 403):
        raise StackError(f"the inference service at {base_url} refused the key ({response.status_code}): set "
                         "HERMES_INFERENCE_KEY or the key file's inference.api_key_env variable")


def _explain(exc: BaseException, base_url: str | None) -> StackError | None:
    """atroposlib retries then raises tenacity.RetryError / aiohttp errors: name the cause."""
    try:
        from tenacity import RetryError
    except ImportError:  # pragma: no cover
        RetryError = ()  # type: ignore[assignment]
    while isinstance(exc, RetryError) and exc.last_attempt.exception() is not None:
        exc = exc.last_attempt.exception()
    import aiohttp

    if isinstance(exc, aiohttp.ClientResponseError):
        if exc.status in (401, 403):
            return StackError(f"the inference service at {base_url} refused the key ({exc.status}): set "
                              "HERMES_INFERENCE_KEY or the key file's inference.api_key_env variable")
        return StackError(f"the inference service at {base_url} answered {exc.status} for {exc.request_info.url}")
    if isinstance(exc, aiohttp.ClientError):
        return StackError(f"the inference service at {base_url} failed: {type(exc).__name__}: {exc}")
    return None


@app.command("test-inference")
def test_inference(
    algo: Annotated[str, typer.Option("--algo", help="ppo or grpo: which configs to use")],
    steps: Annotated[int, typer.Option("--steps", min=1, help="Groups (prompts) to generate and score.")] = 4,
    out: Annotated[Path | None, typer.Option("--out", help="JSONL file for the scored groups.")] = None,
    local: Annotated[str | None, typer.Option(
        "--local", help="Use this local inference service (URL ending in /v1) instead of the gateway.")] = None,
    config_dir: Annotated[Path, typer.Option("--config-dir", help="Folder holding the config files.")] = Path(
        "configs"),
    keyfile: Annotated[Path | None, typer.Option(
        "--keyfile", help="Key file (default: $HERMES_KEYFILE or .env.taotoken).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu (embedded profile) or gpu.")] = "auto",
    tokenizer: Annotated[str | None, typer.Option(
        "--tokenizer", help="Local tokenizer directory (default: from the inference model).")] = None,
) -> None:
    """Generate and score a few groups with the gateway model (or the local inference service offline)."""
    import asyncio

    from hermes_stack.controller import console
    from hermes_stack.controller.commands.validate import validated_stack
    from hermes_stack.environment.__main__ import run_process
    from hermes_stack.environment.runtime import build_configs
    from hermes_stack.gateway import GatewayClient, settings_from

    stack = validated_stack(algo, config_dir, keyfile, device=device)
    gateway = None if local else settings_from(keyfile_path=keyfile, timeout_s=60.0)
    client = None
    inference_url = None
    environ = dict(os.environ)
    if gateway is not None:
        if not gateway.model:
            raise InputError(Problem(str(keyfile or ".env.taotoken"), "TAOTOKEN_MODEL", "no value",
                                     "the gateway model to test", "add TAOTOKEN_MODEL=<model> to the key file, or "
                                     "pass --local <URL> to use the local inference service"))
        client = GatewayClient(gateway)
        console.info(f"test-inference: {steps} groups of {stack.config.rollout.group_size} from the gateway model "
                     f"{gateway.model} at {gateway.root}")
    else:
        inference_url = local or stack.settings.inference.base_url
        key = _inference_key(stack, keyfile)
        reason = "--local" if local else "offline mode (no key file)"
        console.info(f"test-inference: {reason}: {steps} groups of {stack.config.rollout.group_size} from the "
                     f"local inference service at {inference_url}")
        probe_inference(inference_url, key)
        environ["HERMES_INFERENCE_KEY"] = key
    env_config, server = build_configs(
        stack, environ, tokenizer=tokenizer, inference_url=inference_url or stack.settings.inference.base_url,
        rollout_source="gateway" if client else "inference", offline=gateway is None and not local,
    )
    out = out or Path("data") / f"test-inference-{algo}.jsonl"
    try:
        env = asyncio.run(run_process(env_config, [server], groups=steps, out=out, gateway_client=client))
    except Exception as exc:
        named = _explain(exc, inference_url)
        if named is None:
            raise
        raise named from exc
    finally:
        if client is not None:
            client.close()
    t = env.totals
    console.info(f"wrote {env.config.data_path_to_save_groups}: {t.groups} groups, {t.sequences} completions")
    console.info(f"accuracy {t.accuracy:.3f}  format rate {t.format_rate:.3f}  mean reward {t.mean_reward:.3f}")

"""python -m hermes_stack.environment serve | process [--groups N] [--out FILE] | evaluate

serve: register with Atropos (HERMES_ATROPOS_URL), stream scored groups until `total_steps` ([trainer] num_steps) is
reached (the step the trainer pushed last, where it writes one on the data volume: stack_behaviour.py), then exit
0. The readiness marker $HERMES_DATA_DIR/ready/environment exists from registration to exit.
process: atroposlib's process mode: N groups written to a JSONL file, no Atropos needed. `hermes-stack
test-inference` runs this command on the host (with --gateway, --inference-url, --tokenizer, --offline, --summary).
Configuration: hermes_stack.service_env.ServiceEnv (docs/architecture.md), through service_env.load_service_stack.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from hermes_stack.errors import HermesError, StackError

log = logging.getLogger("hermes_stack.environment")


def setup_logging() -> None:
    import os

    # atroposlib logs its status dict at INFO ten times a second, and a DEBUG line per rollout worker: keep its
    # warnings only. Imported first: atroposlib.envs.base sets its logger to DEBUG when imported, which undid
    # this when it came later (~60 lines a second went to the container log).
    import atroposlib.envs.base  # noqa: F401

    from hermes_stack.service_log import level_from
    from hermes_stack.service_log import setup_logging as setup

    setup(level_from(os.environ), quiet=("atroposlib.envs.base", "atroposlib.envs.server_handling", "httpx"))


async def serve(env_config, server_configs, env_class=None) -> int:
    """Serve `env_class` (a user's environment, prepared by user_env.prepare) or the built-in one."""
    from hermes_stack.environment.env import HermesMathEnv
    from hermes_stack.environment.stack_behaviour import TrainerFinished
    from hermes_stack.health import remove_marker
    from hermes_stack.service_heap import freeze_startup_heap

    # slurm/testing given as atroposlib's `serve` CLI gives them (ServerManagerConfig: off): upstream files default
    # slurm=True in their __init__ and would look for a SLURM allocation.
    env = (env_class or HermesMathEnv)(env_config, server_configs, slurm=False, testing=False)
    freeze_startup_heap("environment")  # the libraries and the tokenizer stay for the run (the dataset comes after)
    try:
        await env.env_manager()
        reached = f"Atropos at step {env.curr_step}"
    except TrainerFinished as done:
        for worker in list(env.workers):  # what upstream's loop does when it leaves
            worker.cancel()
        reached = f"the trainer pushed step {done.args[0]}"
    finally:
        remove_marker(env.ready_marker)
        if hasattr(env, "close_pools"):
            await env.close_pools()
    totals = env.totals.as_dict() if hasattr(env, "totals") else {"groups returned as None": env.none_groups}
    steps = env.trainer_steps if env.trainer_steps is not None else env.config.total_steps
    log.info("total_steps %d reached (%s): %s; exiting", steps, reached, totals)
    return 0


SETUP_CHECK_S = 300.0  # a setup() that reads a dataset may take a while; one that hangs must not hold `up` forever


async def check(env_config, server_configs, env_class, info) -> int:
    """The dry-run's check of a user's environment (`up` runs it as a one-off container, the environment image and
    its packages): the file imported and config_init() run (prepare, before this), the class created as `serve`
    creates it, and its setup() run. Until then an import error, a config_init() or setup() failure showed only
    once training had started, as a crash loop. Nothing is registered with Atropos and nothing is sampled."""
    from hermes_stack.environment.stack_behaviour import log_traceback, raised_at

    try:
        env = env_class(env_config, server_configs, slurm=False, testing=False)
    except Exception as exc:  # noqa: BLE001 - the user's __init__: named, not a traceback
        log_traceback(exc)
        log.error("%s: creating %s failed: %s: %s at %s", info.file, info.class_name, type(exc).__name__, exc,
                  raised_at(exc))
        return 1
    bound = asyncio.timeout(SETUP_CHECK_S)
    try:
        async with bound:
            await env.setup()
    except TimeoutError as exc:
        if not bound.expired():  # the setup's own timeout (a socket's): a failure like any other, below
            return _setup_failed(info, exc)
        log.error("%s: %s.setup() did not end within %.0f s", info.file, info.class_name, SETUP_CHECK_S)
        return 1
    except Exception as exc:  # noqa: BLE001 - the user's setup(): named, not a traceback
        return _setup_failed(info, exc)
    finally:
        if hasattr(env, "close_pools"):
            await env.close_pools()
    log.info("environment check: %s (%s, %s) imports, config_init() and setup() ran", info.name, info.class_name,
             info.file)
    return 0


def _setup_failed(info, exc: BaseException) -> int:
    from hermes_stack.environment.stack_behaviour import log_traceback, raised_at

    log_traceback(exc)
    log.error("%s: %s.setup() failed: %s: %s at %s", info.file, info.class_name, type(exc).__name__, exc,
              raised_at(exc))
    return 1


def selected_environment(stack):
    """The environment `[environment] name` selects (environments_catalog.select, validated at load)."""
    from hermes_stack import environments_catalog

    project_root = Path(stack.config_path).resolve().parent.parent
    selection = environments_catalog.select(project_root, stack.config.environment.name)
    return project_root, selection.environment


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


async def run_process(env_config, server_configs, *, groups: int, out: Path, gateway_client=None,
                      group_size: int | None = None):
    """atroposlib's process mode (what its `process` CLI does), with our settings: every group kept and written;
    `group_size` completions per prompt when given, else the config's."""
    from hermes_stack.environment.env import HermesMathEnv

    out.parent.mkdir(parents=True, exist_ok=True)
    config = env_config.model_copy(update={
        "ensure_scores_are_not_same": False, "include_messages": True, "data_path_to_save_groups": str(out),
        "use_wandb": False, "total_steps": groups, **({"group_size": group_size} if group_size else {}),
    })
    env = HermesMathEnv(config, server_configs, gateway_client=gateway_client)
    env.process_mode = True
    env.n_groups_to_process = groups
    env.group_size_to_process = config.group_size
    env.max_token_len = config.max_token_length + 1  # nothing registered: our own limit
    try:
        await env.process_manager()
    finally:  # as `serve` does: sessions left open were reported by aiohttp at exit ("Unclosed client session")
        await env.close_pools()
    return env


def process_command(stack, args) -> int:
    """The `process` command: N scored groups from the inference service, or from the gateway model (--gateway)."""
    import json

    from hermes_stack.environment.runtime import build_configs
    from hermes_stack.gateway import GatewayClient, settings_from

    client = GatewayClient(settings_from(timeout_s=60.0)) if args.gateway else None
    inference_url = args.inference_url or stack.settings.inference.base_url
    env_config, server_config = build_configs(
        stack, tokenizer=args.tokenizer, inference_url=inference_url,
        rollout_source="gateway" if client else "inference",
        offline={"auto": None, "yes": True, "no": False}[args.offline])
    try:
        env = asyncio.run(run_process(env_config, [server_config], groups=args.groups, out=args.out,
                                      gateway_client=client, group_size=args.group_size))
    except Exception as exc:
        named = _explain(exc, None if client else inference_url)
        if named is None:
            raise
        raise named from exc
    finally:
        if client is not None:
            client.close()
    log.info("wrote %s: %s", env.config.data_path_to_save_groups, env.totals.as_dict())
    if args.summary:
        args.summary.write_text(json.dumps(env.totals.as_dict() | {"path": env.config.data_path_to_save_groups}))
    return 0


def run_serve_loop(main_coro):
    """The serve loop on uvloop where it is installed (the environment image has it): a PPO chunk's 256 groups are
    tasks, callbacks and socket reads in this one loop, which uvloop runs in C (issue 22). asyncio's own otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main_coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main_coro)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_stack.environment")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="serve rollouts to Atropos until total_steps")
    process = sub.add_parser("process", help="write N scored groups to a JSONL file (no Atropos)")
    process.add_argument("--groups", type=int, default=4)
    process.add_argument("--group-size", type=int, help="completions per prompt (default: the config's)")
    process.add_argument("--out", type=Path, default=Path("data/process.jsonl"))
    process.add_argument("--gateway", action="store_true",
                         help="completions from the gateway model (TAOTOKEN_*: environment, else the key file)")
    process.add_argument("--inference-url", help="the inference service to sample from (OpenAI style, ending in /v1)")
    process.add_argument("--tokenizer", help="local tokenizer directory (default: from the inference model)")
    process.add_argument("--offline", choices=("auto", "yes", "no"), default="auto",
                         help="hub access: auto decides from the key file and the profile")
    process.add_argument("--summary", type=Path, help="write the totals as JSON to this file")
    sub.add_parser("evaluate", help="greedy accuracy on held-out prompts")
    sub.add_parser("check", help="a user's environment: import it, run config_init() and setup() (the dry-run's)")
    args = parser.parse_args(argv)
    setup_logging()
    from hermes_stack.secret_files import load_secrets

    load_secrets()  # /run/secrets -> environment: the inference key, the gateway key (judge), WANDB_API_KEY
    # docker stop sends SIGTERM: turn it into SystemExit so `finally` removes the readiness marker.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        from hermes_stack.environment.runtime import build_configs
        from hermes_stack.service_env import ServiceEnv, load_service_stack

        stack = load_service_stack(ServiceEnv.from_environ())
        for line in stack.overrides and [f"profile {stack.profile} overrides: {stack.overrides}"] or []:
            log.info(line)
        if args.command == "process":
            return process_command(stack, args)
        env_config, server_config = build_configs(stack)
        project_root, chosen = selected_environment(stack)
        if args.command == "check" and (chosen is None or chosen.builtin):
            log.info("environment check: the built-in environment (the trainer's dry-run checks its prompts)")
            return 0
        if chosen is not None and not chosen.builtin:
            from hermes_stack.environment import user_env

            if args.command == "check":
                served = ServiceEnv.from_environ().served_model_name or stack.settings.inference.model_path
                env_class, user_config, user_servers = user_env.prepare(project_root, chosen, env_config,
                                                                        server_config, served)
                return asyncio.run(check(user_config, user_servers, env_class, chosen))
            if args.command != "serve":
                log.error("%s: only `serve` runs a user's environment (%s)", chosen.file, args.command)
                return 2
            served = ServiceEnv.from_environ().served_model_name or stack.settings.inference.model_path
            env_class, user_config, user_servers = user_env.prepare(project_root, chosen, env_config, server_config,
                                                                    served)
            return run_serve_loop(serve(user_config, user_servers, env_class))
        if args.command == "serve":
            return run_serve_loop(serve(env_config, [server_config]))
        from hermes_stack.environment.env import HermesMathEnv

        env = HermesMathEnv(env_config, [server_config])
        asyncio.run(env._run_evaluate())
        return 0
    except HermesError as exc:
        for line in exc.lines():
            log.error("%s", line)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())

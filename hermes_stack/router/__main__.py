"""`python -m hermes_stack.router`: SGLang's router in front of the inference replicas (compose service `router`,
written by `up` for inference.replicas > 1: hermes_stack/controller/replicas.py)."""

from __future__ import annotations

import sys

from hermes_stack.errors import HermesError, InputError, Problem


def main() -> int:
    try:
        from hermes_stack.secret_files import load_secrets

        load_secrets()  # /run/secrets/hermes_inference_key -> HERMES_INFERENCE_KEY: the replicas' key
        from hermes_stack.router.args import router_argv
        from hermes_stack.service_env import ServiceEnv

        env = ServiceEnv.from_environ()
        if not env.replica_urls:
            raise InputError(Problem("(environment)", "HERMES_INFERENCE_REPLICA_URLS", "no value",
                                     "the replicas' URLs, comma-separated", "start the stack with `make up "
                                     "REPLICAS=N`, which writes them"))
        if not env.key:
            raise InputError(Problem("(environment)", "HERMES_INFERENCE_KEY", "no value",
                                     "the key that protects the inference replicas",
                                     "start the stack with `make up`, which generates one"))
        argv = router_argv(env.replica_urls, env.inference_port or 8001, env.log_level)
    except HermesError as exc:
        for line in exc.lines():
            print(f"router: {line}", file=sys.stderr)
        return exc.exit_code
    from sglang_router.launch_router import launch_router, parse_router_args

    print(f"router: sglang-router, workers {' '.join(env.replica_urls)}, policy {argv[argv.index('--policy') + 1]}",
          file=sys.stderr, flush=True)
    launch_router(parse_router_args([*argv, "--api-key", env.key]))  # blocks while the router serves
    return 0


if __name__ == "__main__":
    sys.exit(main())

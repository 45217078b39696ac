"""`python -m hermes_stack.inference`: the inference service on 0.0.0.0:<inference.port> (exec-form CMD)."""

from __future__ import annotations

import logging
import sys

from hermes_stack.errors import HermesError


def main() -> int:
    try:
        from hermes_stack.secret_files import load_secrets

        load_secrets()  # /run/secrets/hermes_inference_key -> HERMES_INFERENCE_KEY
        from hermes_stack.hub import set_hub_access
        from hermes_stack.inference.service_config import build_backend, load_service_config

        cfg = load_service_config()
        from hermes_stack.service_log import setup_logging

        setup_logging(cfg.log_level, quiet=("httpx",))  # not a line per proxied request
        # Before any Hugging Face import: online only for the gpu profile with a hub id (the SGLang child inherits
        # it); offline otherwise, where a hub lookup would hang ~49 s before failing.
        set_hub_access(cfg.online)
        from hermes_stack.inference.server import create_app

        logging.getLogger("hermes.inference").info("inference: %s", cfg.describe())
        backend = build_backend(cfg)
        app = create_app(backend, cfg.api_key, data_dir=cfg.data_dir)
    except HermesError as exc:
        for line in exc.lines():
            print(f"inference: {line}", file=sys.stderr)
        return exc.exit_code
    import uvicorn

    from hermes_stack.service_heap import freeze_startup_heap

    freeze_startup_heap("inference")  # the model and the libraries stay for the run; a rollout's objects do not
    # access_log off: request lines would be noise at rollout rates; errors are still logged.
    # log_config None: uvicorn's loggers keep the services' one format (service_log) instead of its own.
    uvicorn.run(app, host=cfg.host, port=cfg.port, access_log=False, log_level=cfg.log_level.lower(),
                log_config=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

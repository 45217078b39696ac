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

FROM ${BASE_IMAGE} AS runtime
RUN echo 'hermes:x:10001:10001:hermes:/home/hermes:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'hermes:x:10001:' >> /etc/group \
 && mkdir -p /home/hermes/.cache/huggingface /data /app/hermes_stack && chown -R 10001:10001 /home/hermes /data
# No HF_*_OFFLINE here: the environment decides at start (hermes_stack.hub via runtime.build_configs): offline
# unless the gpu profile needs the hub (gsm8k, a hub tokenizer) and a key file is present.
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 HOME=/home/hermes WANDB_MODE=offline
COPY --from=deps /opt/venv /opt/venv
# Code last: a code-only change rebuilds just this layer; compiled now, /app is read-only to the service.
COPY hermes_stack /app/hermes_stack
RUN python -m compileall -q /app/hermes_stack
USER 10001:10001
WORKDIR /home/hermes
CMD ["python", "-m", "hermes_stack.environment", "serve"]

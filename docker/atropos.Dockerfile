# atropos: atroposlib's own `run-api` on port 8000, nothing else (plus our healthcheck module, hermes_stack.health).
# The same image runs SGLang's router (`python -m hermes_stack.router`) when inference.replicas > 1.
# Build context: the repository root (.dockerignore keeps it small). Python packages come from the host-side
# wheelhouse (scripts/wheelhouse.sh) through a bind mount, so the build needs no network and no CA bundle.
# No `# syntax=` line: it would pull a frontend image from a registry.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
COPY pyproject.toml requirements.lock docker/requirements.py /src/
# Identical in environment.Dockerfile: BuildKit reuses this ~1 GB layer for both images.
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml --only atroposlib > /src/atropos.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -c /src/requirements.lock -r /src/atropos.txt
# SGLang's router (service `router`, `make up REPLICAS=N`): its own layer, after the one shared with the environment
# image. A manylinux wheel (the router is Rust inside): no compiler, no GPU.
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml router > /src/router.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -c /src/requirements.lock -r /src/router.txt

FROM ${BASE_IMAGE} AS runtime
# useradd is not in a minbase Debian: write the entries directly. One uid (10001) in every image so the shared
# /data volume is writable by all services.
RUN echo 'hermes:x:10001:10001:hermes:/home/hermes:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'hermes:x:10001:' >> /etc/group \
 && mkdir -p /home/hermes /data /app/hermes_stack && chown 10001:10001 /home/hermes /data
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 HOME=/home/hermes
COPY --from=deps /opt/venv /opt/venv
# The package, not a list of the modules the healthcheck imports today (code only, ~0.7 MB: .dockerignore keeps
# caches out). Compiled now: each probe would otherwise compile them again (/app is read-only to the service).
COPY hermes_stack /app/hermes_stack
RUN python -m compileall -q /app/hermes_stack
USER 10001:10001
WORKDIR /home/hermes
EXPOSE 8000
CMD ["run-api", "--host", "0.0.0.0", "--port", "8000"]

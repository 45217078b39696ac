#!/usr/bin/env bash
# Make the Python base image every hermes-stack image builds FROM: hermes-stack/base:py311.
#   1. already in the engine            -> nothing to do
#   2. cached tarball from an earlier run -> `docker load` (~2 s)
#   3. the public image pulls quickly     -> tag it
#   4. no registry reachable              -> mmdebstrap a minimal Debian bookworm + python3, `docker import`
# The apt sources are read from this machine (never written into the repository).
# Prints the image name on stdout as its last line; progress goes to stderr.
set -euo pipefail

TAG="${HERMES_BASE_TAG:-hermes-stack/base:py311}"
PUBLIC="${BASE_IMAGE:-python:3.11-slim-bookworm}"
PULL_TIMEOUT="${PULL_TIMEOUT:-20}"
CACHE_DIR="${HERMES_CACHE_DIR:-$HOME/.cache/hermes-stack}"
# Bump when the recipe below changes so a stale cached tarball is not reused.
RECIPE=1
CACHE_TAR="$CACHE_DIR/base-py311-r${RECIPE}.tar.gz"
say() { printf '[base-image] %s\n' "$*" >&2; }

if [ "${1:-}" = "--force" ]; then
  docker image rm -f "$TAG" >/dev/null 2>&1 || true
  rm -f "$CACHE_TAR"
fi

if docker image inspect "$TAG" >/dev/null 2>&1; then
  say "$TAG present"; echo "$TAG"; exit 0
fi

if [ -s "$CACHE_TAR" ]; then
  say "loading $TAG from $CACHE_TAR"
  gzip -dc "$CACHE_TAR" | docker load >&2
  echo "$TAG"; exit 0
fi

if [ "${HERMES_BASE_NO_PULL:-0}" != 1 ] && timeout "$PULL_TIMEOUT" docker pull -q "$PUBLIC" >/dev/null 2>&1; then
  say "pulled $PUBLIC; tagging it $TAG"
  docker tag "$PUBLIC" "$TAG"
  echo "$TAG"; exit 0
fi

say "no registry answered within ${PULL_TIMEOUT}s: building $TAG with mmdebstrap (60-120 s, CPU-bound)"
command -v mmdebstrap >/dev/null || { say "ERROR: mmdebstrap is missing: apt-get install mmdebstrap (or run scripts/provision-docker.sh)"; exit 3; }

# The machine's own apt sources: deb822 (.sources) or one-line format; mmdebstrap reads both from a file path.
sources=()
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
  [ -s "$f" ] && grep -qE '^(deb |URIs:)' "$f" && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || { say "ERROR: no apt sources found under /etc/apt"; exit 3; }

hook=/usr/share/mmdebstrap/hooks/merged-usr   # without it, bookworm's usrmerge pulls perl (+70 MB)
excl=()
for p in '/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*' '/usr/share/lintian/*'; do
  excl+=("--dpkgopt=path-exclude=$p")
done

mkdir -p "$CACHE_DIR"
tmp_tar="$CACHE_DIR/.base-$$.tar"
trap 'rm -f "$tmp_tar"' EXIT
mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
  --include=python3,python3-venv,ca-certificates \
  --hook-dir="$hook" "${excl[@]}" \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  bookworm "$tmp_tar" "${sources[@]}" >&2

docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' \
  "$tmp_tar" "$TAG" >&2

say "caching $TAG as $CACHE_TAR"
docker save "$TAG" | gzip -1 > "$CACHE_TAR.part" && mv "$CACHE_TAR.part" "$CACHE_TAR"
say "built $TAG ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$TAG"

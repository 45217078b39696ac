#!/usr/bin/env bash
# Fill .cache/wheelhouse with a wheel for every pin in requirements.lock, on the host.
# Why: containers here cannot do TLS to the package index (the machine's CA is not inside), and builds should need
# no network at all. The host's pip configuration (index, CA, local wheel dirs such as a CPU torch) applies.
# The Dockerfiles then `pip install --no-index --find-links` from a bind mount of this folder.
# Skips when the folder was filled from the same requirements.lock + pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${HERMES_WHEELHOUSE:-.cache/wheelhouse}"
if [ -z "${PIP:-}" ]; then
  if [ -x .venv/bin/python ]; then PIP=".venv/bin/python -m pip"; else PIP="python3 -m pip"; fi
fi
say() { printf '[wheelhouse] %s\n' "$*" >&2; }

key=$(cat requirements.lock pyproject.toml environments/requirements.txt 2>/dev/null | sha256sum | cut -c1-16)
if [ -f "$OUT/.stamp" ] && [ "$(cat "$OUT/.stamp")" = "$key" ] && [ "${1:-}" != "--force" ]; then
  say "up to date ($OUT)"; exit 0
fi

mkdir -p "$OUT"
say "collecting wheels for requirements.lock into $OUT"
# --no-deps: the lock is already the full resolved set. `pip wheel` reuses wheels and builds the rare sdist.
# (The filter drops pip's noise about local index folders that lack a package; real errors still show.)
$PIP wheel -q --no-deps -r requirements.lock -w "$OUT" 2> >(grep -v 'is neither a file nor a directory' >&2)
# The user's environment packages (pinned, the whole set, like the lock: environments/requirements.txt).
if grep -qvE '^[[:space:]]*(#|$)' environments/requirements.txt 2>/dev/null; then
  say "collecting wheels for environments/requirements.txt"
  $PIP wheel -q --no-deps -r environments/requirements.txt -w "$OUT" 2> >(grep -v 'is neither a file nor a directory' >&2)
fi
echo "$key" > "$OUT/.stamp"
say "done: $(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1)"

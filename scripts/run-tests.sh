#!/usr/bin/env bash
# Runs the test tiers in order. pytest's exit 5 ("no tests collected") is a failure here: a tier that
# collects nothing means the suite is broken, not that everything passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
status=0
for tier in unit static docker; do
  echo "=== tier: $tier"
  # The unit tier in 2 workers (pytest-xdist): its tests mostly wait on subprocesses and sockets, and each uses its own
  # temp folders and ephemeral ports. The Docker tier stays serial: its stacks share host ports.
  workers=()
  [ "$tier" = unit ] && workers=(-n 2)
  $PY -m pytest -q "${workers[@]}" "tests/$tier" "$@"
  rc=$?
  if [ $rc -eq 5 ]; then
    echo "tier $tier collected no tests (pytest exit 5): treating as a failure" >&2
    rc=1
  fi
  [ $rc -eq 0 ] || status=$rc
done
exit $status

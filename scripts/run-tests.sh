#!/usr/bin/env bash
# Runs the test tiers in order. pytest's exit 5 ("no tests collected") is a failure here: a tier that
# collects nothing means the suite is broken, not that everything passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
status=0
for tier in unit static docker; do
  echo "=== tier: $tier"
  # The Docker tier's stacks publish the shipped host ports: a stack of the user's own (`make up`, then `make test`)
  # is named once with the command that stops it, instead of failing each Docker test in turn.
  if [ "$tier" = docker ] && ! $PY -m hermes_stack.controller.host_ports --for-tests; then
    status=2
    continue
  fi
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

#!/usr/bin/env bash
# The test command: set-up, then lint, format check, strict types, the import contracts
# (pyproject's [tool.importlinter]) and the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports
# FLEET_TEST_WORKERS=N (options only, no paths): what must stay serial (the lab, its install
# spec included, and the deploy spec) runs as one process beside N pytest-xdist workers that run
# the rest; its report follows theirs. (Not xdist groups: pytest-xdist 3.8 marks them through
# `item._nodeid`, which pytest 9 no longer reads.) Unset: one process, as CI runs it.
if [ -n "${FLEET_TEST_WORKERS:-}" ]; then
  serial=(tests/lab tests/test_ops_deploy.py)
  log=$(mktemp)
  .venv/bin/pytest "$@" "${serial[@]}" >"$log" 2>&1 &
  serial_pid=$!
  trap 'kill "$serial_pid" 2>/dev/null || true' INT TERM
  rest=0
  .venv/bin/pytest -n "$FLEET_TEST_WORKERS" "$@" --ignore=tests/lab \
    --ignore=tests/test_ops_deploy.py || rest=$?
  serial_rc=0
  wait "$serial_pid" || serial_rc=$?
  echo "== the serial part (${serial[*]}):"
  cat "$log"
  rm -f "$log"
  exit $((rest > serial_rc ? rest : serial_rc))
fi
.venv/bin/pytest "$@"

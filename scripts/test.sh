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
# FLEET_TEST_WORKERS=N: N pytest-xdist workers; the lab and the deploy spec stay serial, each on
# one worker (their xdist groups, see tests/conftest.py). Unset: one process, as CI runs it.
workers=()
if [ -n "${FLEET_TEST_WORKERS:-}" ]; then
  workers=(-n "$FLEET_TEST_WORKERS" --dist loadgroup)
fi
.venv/bin/pytest "${workers[@]}" "$@"

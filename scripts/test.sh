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
.venv/bin/pytest "$@"

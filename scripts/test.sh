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
# The suite runs on two pools of pytest-xdist workers side by side, each work-stealing. The
# first, FLEET_TEST_WORKERS workers (default: this machine's cores, 2 to 8), runs all but the
# lab's specs and the deploy spec. The second, FLEET_LAB_WORKERS workers (default: 1 on fewer
# than 4 cores, else 2), runs the lab's specs, which mostly wait on real timers: each worker
# boots its own lab on a net of its own (tests/conftest.py: nets 11, 12, ...), as root in a
# network namespace of its own (FLEET_LAB_NETNS=1: fleet_lab/netns.py); then the deploy spec
# (it installs sudoers on this machine) runs alone. The second pool's report follows the
# first's. (Not xdist groups: pytest-xdist 3.8 marks them through `item._nodeid`, which pytest 9
# no longer reads.) FLEET_TEST_WORKERS=1: one process, every spec in order. Arguments are pytest
# options (no paths) given to each run. docs/lab.md gives the times measured on 2 cores.
cores=$(nproc 2>/dev/null || echo 1)
workers=${FLEET_TEST_WORKERS:-$((cores < 2 ? 2 : cores > 8 ? 8 : cores))}
lab_workers=${FLEET_LAB_WORKERS:-$((cores < 4 ? 1 : 2))}
if [ "$workers" -gt 1 ]; then
  log=$(mktemp)
  (
    lab=0
    FLEET_LAB_NET=10 FLEET_LAB_NETNS=1 .venv/bin/pytest -n "$lab_workers" --dist worksteal \
      "$@" tests/lab || lab=$?
    deploy=0
    .venv/bin/pytest "$@" tests/test_ops_deploy.py || deploy=$?
    exit $((lab > deploy ? lab : deploy))
  ) >"$log" 2>&1 &
  serial_pid=$!
  trap 'kill "$serial_pid" 2>/dev/null || true' INT TERM
  rest=0
  .venv/bin/pytest -n "$workers" --dist worksteal "$@" --ignore=tests/lab \
    --ignore=tests/test_ops_deploy.py || rest=$?
  serial_rc=0
  wait "$serial_pid" || serial_rc=$?
  echo "== the lab (on its own workers), then the deploy spec:"
  cat "$log"
  rm -f "$log"
  exit $((rest > serial_rc ? rest : serial_rc))
fi
.venv/bin/pytest "$@"

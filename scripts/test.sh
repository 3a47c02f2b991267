#!/usr/bin/env bash
# The test command: set-up, then lint, format check and the import contracts (pyproject's
# [tool.importlinter]), then the whole suite with strict types (mypy) checked beside it.
# `--long`: set-up, then only the specs marked `long` (they hold a fault for minutes, so the
# default run leaves them out: pyproject's addopts `-m 'not long'`), as the lab's pool runs its
# specs (its workers, FLEET_LAB_NET, FLEET_LAB_NETNS=1, strict skips); no lint, no types.
set -euo pipefail
cd "$(dirname "$0")/.."
long=0
if [ "${1:-}" = "--long" ]; then
  long=1
  shift
fi
bash scripts/setup.sh
if [ "$long" = 0 ]; then
  .venv/bin/ruff check .
  .venv/bin/ruff format --check .
  .venv/bin/lint-imports
fi
# Python writes its bytecode caches (a machine that sets PYTHONDONTWRITEBYTECODE would otherwise
# compile every module, and pytest rewrite every test module, in each of the run's processes).
unset PYTHONDONTWRITEBYTECODE
# As root on Linux the suite runs everything it can: a spec that skips for a reason outside the
# short allow-list in tests/skips.py (ALLOWED, each entry with why) fails the run
# (tests/conftest.py). FLEET_STRICT_SKIPS=0 turns that off.
export FLEET_STRICT_SKIPS=${FLEET_STRICT_SKIPS:-1}
cores=$(nproc 2>/dev/null || echo 1)
lab_workers=${FLEET_LAB_WORKERS:-$((cores < 2 ? 2 : cores > 8 ? 8 : cores))}
if [ "$long" = 1 ]; then
  ran=0
  FLEET_LAB_NET=10 FLEET_LAB_NETNS=1 .venv/bin/pytest -n "$lab_workers" --dist worksteal \
    -m long "$@" tests || ran=$?
  if [ "$ran" = 5 ]; then # pytest collected nothing: a command that ran no spec proved nothing
    echo "scripts/test.sh --long: no spec ran: none is marked long, or the options left none" >&2
  fi
  exit "$ran"
fi
# mypy --strict (27 s of one core in a fresh clone) runs beside the suite, at a lower priority
# (`nice`): it takes the cycles the specs leave while they wait; its report follows the suite's.
types_log=$(mktemp)
nice -n 10 .venv/bin/mypy >"$types_log" 2>&1 &
types_pid=$!
types() {
  local rc=0
  wait "$types_pid" || rc=$?
  cat "$types_log"
  rm -f "$types_log"
  return $rc
}
# The suite runs on two pools of pytest-xdist workers side by side. The first, FLEET_TEST_WORKERS
# workers (default: two more than this machine's cores, 4 to 8: most of its time is waiting, on a
# freeze, a lease, a page; on 2 cores 3 workers ended a minute later, and the specs that 4 once
# failed by their own timeouts were made to wait for their event instead), runs all but the
# lab's specs, one at a time to whichever worker is free, those that wait longest first
# (tests/conftest.py: WAIT_FIRST), so that none is left running alone at the end. The second,
# FLEET_LAB_WORKERS workers (default: the cores, 2 to 8; on 2 cores 3 took the lab from 6 min
# 56 s to 5 min 51 s, but the third worker's lab twice never saw spark2's worker join 29501:
# not the default until that is understood), runs the lab's specs, which mostly wait on real
# timers: each worker boots its own lab on a net of its own (tests/conftest.py: nets 11,
# 12, ...), as root in a network namespace of its own (FLEET_LAB_NETNS=1: fleet_lab/netns.py).
# The second pool's report follows the first's. (Not xdist groups: pytest-xdist 3.8 marks them
# through `item._nodeid`, which pytest 9 no longer reads.) FLEET_TEST_WORKERS=1: one process,
# every spec in order. Arguments are pytest options (no paths) given to each run. docs/lab.md
# gives the times measured on 2 cores.
workers=${FLEET_TEST_WORKERS:-$((cores < 2 ? 4 : cores > 6 ? 8 : cores + 2))}
if [ "$workers" -gt 1 ]; then
  log=$(mktemp)
  FLEET_LAB_NET=10 FLEET_LAB_NETNS=1 .venv/bin/pytest -n "$lab_workers" --dist worksteal \
    "$@" tests/lab >"$log" 2>&1 &
  lab_pid=$!
  trap 'kill "$lab_pid" "$types_pid" 2>/dev/null || true' INT TERM
  rest=0
  .venv/bin/pytest -n "$workers" --dist load --maxschedchunk 1 "$@" --ignore=tests/lab ||
    rest=$?
  lab=0
  wait "$lab_pid" || lab=$?
  echo "== the lab (on its own workers):"
  cat "$log"
  rm -f "$log"
  checked=0
  types || checked=$?
  worst=$((rest > lab ? rest : lab))
  exit $((worst > checked ? worst : checked))
fi
rest=0
.venv/bin/pytest "$@" || rest=$?
checked=0
types || checked=$?
exit $((rest > checked ? rest : checked))

#!/usr/bin/env bash
# The main job until you have a fleet: set-up, then the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/fleet-supervisor demo "$@"

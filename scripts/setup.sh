#!/usr/bin/env bash
# Installs fleet-supervisor, its lab (./lab: the fleet-lab distribution) and what the tests use
# into ./.venv (editable, idempotent). As root on Debian it also installs the system packages the
# tests drive for real.
set -euo pipefail
cd "$(dirname "$0")/.."
APT_PACKAGES="openssh-server sudo systemd iproute2 procps util-linux openssl curl chromium chromium-driver postgresql"
missing=""
for pkg in $APT_PACKAGES; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
  else
    echo "setup: please install these Debian packages first:$missing" >&2
  fi
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
# uv (from PyPI, into the venv) installs the same packages as pip in a tenth of the time (5 s
# instead of 55 on 2 cores, most of pip's spent compiling every module to bytecode up front); where
# uv cannot be had or fails, pip does it.
[ -x .venv/bin/uv ] || .venv/bin/pip install --quiet --disable-pip-version-check uv || true
if ! { [ -x .venv/bin/uv ] &&
  .venv/bin/uv pip install --quiet --python .venv/bin/python -e '.[test]' -e ./lab; }; then
  .venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]' -e ./lab
fi
# Bytecode for every module, compiled here once on all cores: uv compiles none, and a test run
# starts about ten Python processes at once, each of which compiled what it imported (4.8 CPU-s a
# process in a fresh clone, 1.7 with the caches). About 7 s on 2 cores the first time, then 1 s.
.venv/bin/python -m compileall -q -j 0 .venv/lib supervisor lab/fleet_lab tests bench >/dev/null

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
# The venv is made without pip (`python3 -m venv` spent 3.5 s seeding one): this machine's pip
# installs uv into it (`pip --python`, pip 22.3 and later), and uv installs everything else
# there, pip included (a spec builds a wheel with it). uv (from PyPI) installs the same packages
# as pip in a tenth of the time (5 s instead of 55 on 2 cores, most of pip's spent compiling
# every module to bytecode up front). Where any of that cannot be had or fails, the venv's own
# pip (ensurepip) does it.
[ -x .venv/bin/python ] || python3 -m venv --without-pip .venv
venv_pip() {
  [ -x .venv/bin/pip ] || .venv/bin/python -m ensurepip --default-pip >/dev/null
}
pip_quiet=(--quiet --disable-pip-version-check --root-user-action=ignore)
if [ ! -x .venv/bin/uv ]; then
  python3 -m pip --python .venv/bin/python install "${pip_quiet[@]}" uv 2>/dev/null ||
    { venv_pip && .venv/bin/pip install "${pip_quiet[@]}" uv; } || true
fi
if ! { [ -x .venv/bin/uv ] &&
  .venv/bin/uv pip install --quiet --python .venv/bin/python pip -e '.[test]' -e ./lab; }; then
  venv_pip
  .venv/bin/pip install "${pip_quiet[@]}" -e '.[test]' -e ./lab
fi
# LiteLLM, the OpenAI-compatible router some fleets put in front of their servers, for the specs
# that start a real one (tests/litellm.py): one exact release and every dependency pinned by hash
# (tests/data/litellm/requirements.txt, docs/lab.md says which and why), in a venv of its own that
# git ignores by its own .gitignore. Never in .venv: the runtime must not import it. Made again
# only when the pinned file changed; where it cannot be had, the specs that need it skip with
# that reason. --no-deps: the file holds every dependency (pip would take an extra such as
# fastapi-sso's `pydantic[email]` for a requirement not pinned); the check then proves none is
# missing. With uv: the venv, the install and the check in about 2 s (`python3 -m venv` alone
# took 3.5 s, seeding a pip nothing here uses); where uv fails, venv and pip (28-50 s on 2 cores).
litellm_reqs=tests/data/litellm/requirements.txt
litellm_uv() {
  [ -x .venv/bin/uv ] &&
    .venv/bin/uv venv --quiet --no-project --python "$(command -v python3)" .venv-litellm &&
    .venv/bin/uv pip install --quiet --python .venv-litellm/bin/python --no-deps \
      --require-hashes -r "$litellm_reqs" &&
    .venv/bin/uv pip check --quiet --python .venv-litellm/bin/python
}
litellm_pip() {
  python3 -m venv .venv-litellm &&
    .venv-litellm/bin/pip install --quiet --disable-pip-version-check --no-deps \
      --require-hashes -r "$litellm_reqs" &&
    .venv-litellm/bin/pip check >/dev/null
}
if ! cmp -s "$litellm_reqs" .venv-litellm/requirements.txt 2>/dev/null; then
  rm -rf .venv-litellm
  if litellm_uv || { rm -rf .venv-litellm && litellm_pip; }; then
    printf '*\n' >.venv-litellm/.gitignore
    cp "$litellm_reqs" .venv-litellm/requirements.txt
  else
    echo "setup: LiteLLM could not be installed into .venv-litellm; its specs will skip" >&2
    rm -rf .venv-litellm
  fi
fi
# Bytecode for every module, compiled here once on all cores: uv compiles none, and a test run
# starts about ten Python processes at once, each of which compiled what it imported (4.8 CPU-s a
# process in a fresh clone, 1.7 with the caches). Not the packages no run imports from source
# (pip, setuptools, pygments; mypy and mypyc load their compiled modules): 4 s on 2 cores the
# first time (6 s with them), then 1 s.
.venv/bin/python -m compileall -q -j 0 -x '/site-packages/(pip|setuptools|pygments|mypy|mypyc)/' \
  .venv/lib supervisor lab/fleet_lab tests bench >/dev/null

"""Run a part as a user other than root: as root, as nobody (uid 65534); otherwise as we are.

Nobody cannot read a clone under `/root` (mode 0700), nor a Python installed there (pyenv): there
such a spec skips, with the reason, instead of failing on a missing module."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

NOBODY = 65534
ROOT = Path(__file__).resolve().parent.parent
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
#: what the parts run as nobody read: the checkout's code (also through `os.access`, as alembic
#: does) and the installed packages, through this Python
_READS = (
    "import os, sys, pytest, supervisor, fleet_lab; "
    "sys.exit(0 if os.access(sys.argv[1], os.R_OK | os.X_OK) else 1)"
)


@functools.cache
def _unreadable() -> str | None:
    ran = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", _READS, str(ROOT / "supervisor")],
        capture_output=True,
        check=False,
        timeout=60,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    if ran.returncode == 0:
        return None
    return (
        f"uid {NOBODY} cannot read this clone or its Python ({ROOT}, {sys.prefix}): "
        "clone where other users can read (not under /root) to run it as another user"
    )


def as_someone_else() -> tuple[list[str], int]:
    """The command prefix that runs a part as a user other than root, and that user's uid;
    skips the spec (with the reason) where nobody cannot read the clone."""
    if os.geteuid() != 0:
        return [], os.geteuid()
    why = _unreadable()
    if why is not None:
        pytest.skip(why)
    return AS_NOBODY, NOBODY

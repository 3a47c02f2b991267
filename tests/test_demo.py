"""The demo a newcomer runs first: it must detect and recover every fault it injects. (The lab
demo, as root, is tested in tests/lab/test_demo_lab.py; here the loopback one.)"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

pytestmark = pytest.mark.slow

NOBODY = 65534
FALLBACK = (
    "the lab demo needs root on Linux (the lab needs root: it mounts filesystems and starts "
    "systemd): running the loopback demo instead"
)


def _as_someone_else() -> list[str]:
    """As root: run as nobody (the demo must not need root); otherwise as we are."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


async def test_without_root_it_says_so_in_one_line_then_runs_the_loopback_demo() -> None:
    proc = await asyncio.create_subprocess_exec(
        *_as_someone_else(),
        sys.executable,
        "-m",
        "supervisor",
        "demo",
        cwd="/",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert text.splitlines()[0] == FALLBACK
    assert text.rstrip().endswith("3 of 3 faults detected and recovered.")


async def test_demo_detects_and_recovers_every_fault() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "supervisor",
        "demo",
        "--loopback",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert "ds4 is down: connection refused (incident #1 opened)" in text
    assert "kimi is degraded: no reasoning text (incident #2 opened)" in text
    assert "ds4 is down: timed out after 2s (incident #3 opened)" in text
    assert text.rstrip().endswith("3 of 3 faults detected and recovered.")
    assert err.decode() == ""

"""The demo a newcomer runs first: it must detect and recover every fault it injects."""

from __future__ import annotations

import asyncio
import sys

import pytest

pytestmark = pytest.mark.slow


async def test_demo_detects_and_recovers_every_fault() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "supervisor",
        "demo",
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

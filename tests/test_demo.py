"""The demo a newcomer runs first: the supervisor must detect every fault the demo injects, and see
each endpoint recover once the demo has undone it; the demo says who did what and claims no
repair the supervisor did not make. (The lab demo, as root, is tested in
tests/lab/test_demo_lab.py; here the loopback one.)"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from tests.nobody import as_someone_else

pytestmark = pytest.mark.slow

FALLBACK = (
    "the lab demo needs root on Linux (the lab needs root: it mounts filesystems and starts "
    "systemd): running the loopback demo instead"
)
#: how the loopback demo ends: the supervisor runs observe-only, so every repair is the demo's
ENDING = [
    "The supervisor detected 3 of 3 faults and opened an incident for each.",
    "The supervisor repaired none of them: it runs observe-only here (remediation.dry_run), "
    "recording what it would do.",
    "The demo undid each of its 3 faults itself; the supervisor then saw a real completion pass "
    "and closed each incident (3 of 3).",
]


async def test_without_root_it_says_so_in_one_line_then_runs_the_loopback_demo() -> None:
    proc = await asyncio.create_subprocess_exec(
        *as_someone_else()[0],  # the demo must not need root
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
    assert text.splitlines()[-3:] == ENDING


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
    said = [line.split("] ", 1)[1] for line in text.splitlines() if line.startswith("[")]
    for number, detected, endpoint, incident in [
        (1, "ds4 is down: connection refused", "ds4", 1),
        (2, "kimi is degraded: no reasoning text", "kimi", 2),
        (3, "ds4 is down: timed out after 2s", "ds4", 3),
    ]:
        at = said.index(f"the supervisor detected it: {detected} (incident #{incident} opened)")
        assert said[at - 1].startswith(f"the demo injects fault {number}: ")
        assert said[at + 1] == f"the demo undoes fault {number} itself"
        assert said[at + 2] == (
            f"{endpoint} passed a real completion again: the supervisor closed incident "
            f"#{incident} (it made no repair attempt)"
        )
    assert "repaired by hand" not in text
    assert "detected and recovered" not in text
    assert text.splitlines()[-3:] == ENDING
    assert err.decode() == ""


def _answers(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    ("signum", "inherited"),
    [
        # a job started in the background of a script inherits SIGINT as ignored
        (signal.SIGINT, "trap '' INT; "),
        (signal.SIGINT, ""),
        (signal.SIGTERM, ""),
    ],
    ids=["SIGINT inherited as ignored", "SIGINT", "SIGTERM"],
)
async def test_an_interrupted_loopback_demo_exits_130_and_stops_everything(
    signum: signal.Signals, inherited: str, tmp_path: Path
) -> None:
    demo = f"{inherited}exec {sys.executable} -m supervisor demo --loopback"
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        demo,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    said: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not said or "the demo injects fault 1: " not in said[-1]:
                line = (await proc.stdout.readline()).decode()
                assert line, f"the demo ended before its first fault: {said}"
                said.append(line.rstrip("\n"))
        proc.send_signal(signum)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, out.decode() + err.decode()
    assert err.decode() == "\ninterrupted: everything the demo started is stopped\n"
    servers = [line.rsplit(" at ", 1)[1] for line in said if "-shaped server for " in line]
    assert len(servers) == 2, said
    assert [url for url in servers if _answers(url)] == []
    assert os.listdir(tmp_path) == []  # its folder (the store, the config) is removed

"""The lab demo (`fleet-supervisor demo` as root): the four headline failures healed in the real
lab, narrated, with their timelines; and a demo stopped by Ctrl-C or SIGTERM takes its own lab
down without a trace.

The interrupted demos boot their own lab on a net of their own (`FLEET_LAB_NET`, see
`fleet_lab.network`: other loopback addresses and cgroup names), so they run whatever else is up
(they run beside the package's lab, which they leave up) and never skip for it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from fleet_lab import network, procs
from fleet_lab.demo.lab import HEADLINE
from fleet_lab.lab import Lab

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HEAD = "vllm-ds4-head.service@spark1"


#: The net the interrupted demos boot their labs on, beside this process's lab (net 0, or a
#: worker's net when the lab's specs are split across pytest-xdist workers: tests/conftest.py).
NET = 121 + network.NET
SPARK1 = network.address(11, NET)
HOSTS = {"spark1": SPARK1, "spark2": network.address(12, NET), "m3ultra": network.address(13, NET)}
CGROUPS = procs.CGROUP_ROOT.parent / network.cgroup_name(NET)


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _mounts() -> str:
    return Path("/proc/self/mountinfo").read_text()


def _on_the_net() -> list[str]:
    """What is up on the interrupted demos' net: hosts' cgroups, sshds, the DeepSeek endpoint."""
    left = [f"cgroup {n}" for n in HOSTS if (CGROUPS / n).exists()]
    left += [f"sshd on {a}" for a in HOSTS.values() if _answers(a, 22)]
    return left + (["ds4 on :8000"] if _answers(SPARK1, 8000) else [])


def _traces(folder: Path) -> list[str]:
    """What a lab under `folder` left behind: its folder, processes, cgroups, listeners."""
    left = [f"folder {folder}"] if folder.exists() else []
    left += [f"pid {p}" for p in procs.pids() if str(folder) in " ".join(procs.cmdline(p))]
    return left + _on_the_net()


async def _demo(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "supervisor",
        "demo",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _line_with(proc: asyncio.subprocess.Process, text: str, within: float) -> list[str]:
    """stdout lines up to (and with) the first one holding `text`."""
    assert proc.stdout is not None
    seen: list[str] = []
    async with asyncio.timeout(within):
        while not seen or text not in seen[-1]:
            line = await proc.stdout.readline()
            assert line, f"the demo ended before printing {text!r}: {seen}"
            seen.append(line.decode().rstrip("\n"))
    return seen


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_an_interrupted_demo_takes_its_own_lab_down(signum: signal.Signals, lab: Lab) -> None:
    assert _on_the_net() == [], f"a lab is up on net {NET} (left by a killed run?)"
    mounts_before = _mounts()
    proc = await _demo(env={**os.environ, network.VARIABLE: str(NET)})
    try:
        seen = await _line_with(proc, "fault 1 of 4", within=40)
        folder = Path(seen[0].split("booting the lab in ", 1)[1].split(":", 1)[0])
        assert folder.parent == Path("/var/lib")
        assert f"folder {folder}" in _traces(folder)  # its lab is up, the first drill under way
        assert seen[0].endswith(f"spark1 ({SPARK1}) and spark2 ({HOSTS['spark2']})")
        assert f"sshd on {SPARK1}" in _traces(folder)
        proc.send_signal(signum)
        out, err = await asyncio.wait_for(proc.communicate(), timeout=40)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, err.decode()
    assert err.decode() == "\ninterrupted: taking the lab down\n"
    assert out.decode().splitlines()[-1] == f"the lab is down and {folder} is removed"
    assert _traces(folder) == []
    assert _mounts() == mounts_before
    assert all(lab.running().values())  # the package's lab, on net 0, ran beside it untouched


async def test_the_lab_demo_heals_the_four_headline_failures(lab: Lab) -> None:
    proc = await _demo("--lab", str(lab.folder))
    out, err = await asyncio.wait_for(proc.communicate(), timeout=150)
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert err.decode() == ""
    lines = text.splitlines()
    assert lines[-1] == "4 of 4 faults detected, diagnosed, repaired and verified."
    for number, name in enumerate(HEADLINE, 1):
        told = [line for line in lines if f"fault {number} of 4, {name}: " in line]
        assert len(told) == 1, text
        block = lines[lines.index(told[0]) + 1 :][:8]
        assert any(f"diagnosed: {name} matched on {HEAD}" in line for line in block), block
        assert any("verified:  a real completion passed again " in line for line in block), block
        assert any(
            "Telegram messages, the first: 🔴 <b>ds4</b> is down: connection refused" in line
            for line in block
        ), block
        timeline = lines.index(f"drill {name}: incident #1")
        # found by systemd's unit event (then confirmed by a probe) or by the probes alone
        opened = lines[timeline + 1]
        assert "transition   healthy -> down: " in opened, opened
        by_event = opened.endswith("; probe confirms: connection refused")
        by_probes = "healthy -> down: connection refused (" in opened
        assert by_event or by_probes, opened
    # the demo used the running lab and left it up
    assert all(lab.running().values())

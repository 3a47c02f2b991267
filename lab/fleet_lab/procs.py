"""Processes, cgroups and mounts of the machine, read from /proc and /sys: what the lab starts
and what it must leave behind."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from fleet_lab import network

PROC = Path("/proc")


def _cgroup_base() -> Path:
    unified = Path("/sys/fs/cgroup/unified")
    return unified if (unified / "cgroup.procs").exists() else Path("/sys/fs/cgroup")


#: Where every lab host's cgroup lives on the machine (`fleet-lab/NAME` under the cgroup2 root,
#: `fleet-lab-N/NAME` on net N: `fleet_lab.network`).
CGROUP_ROOT = _cgroup_base() / network.cgroup_name()


def cmdline(pid: int) -> list[str]:
    """`pid`'s argv (empty if it is gone or a kernel thread)."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]]


def pids() -> list[int]:
    return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]


def find(argv: list[str]) -> list[int]:
    """The processes whose argv is exactly `argv`."""
    return [pid for pid in pids() if cmdline(pid) == argv]


def children(pid: int) -> list[int]:
    """`pid`'s direct children."""
    try:
        text = (PROC / str(pid) / "task" / str(pid) / "children").read_text()
    except OSError:
        return []
    return [int(part) for part in text.split()]


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill(pid: int, signum: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def cgroup_of(name: str) -> Path:
    return CGROUP_ROOT / name


def cgroup_kill(name: str) -> None:
    """SIGKILL every process in host `name`'s cgroup tree (nothing if it has none)."""
    control = cgroup_of(name) / "cgroup.kill"
    with contextlib.suppress(OSError):
        control.write_text("1")


def cgroup_remove(name: str) -> bool:
    """Remove host `name`'s (empty) cgroup tree, children first; True once it is gone."""
    top = cgroup_of(name)
    if not top.exists():
        return True
    folders = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for folder in [*folders, top]:
        with contextlib.suppress(OSError):
            folder.rmdir()
    if (
        not top.exists()
        and CGROUP_ROOT.exists()
        and not any(p.is_dir() for p in CGROUP_ROOT.iterdir())
    ):
        with contextlib.suppress(OSError):
            CGROUP_ROOT.rmdir()
    return not top.exists()


def mounts_under(folder: Path) -> list[str]:
    """Mount points of this mount namespace at or under `folder`."""
    found = []
    for line in (PROC / "self" / "mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == str(folder) or point.startswith(f"{folder}/"):
            found.append(point)
    return found

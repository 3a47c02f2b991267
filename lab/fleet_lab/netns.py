"""A network namespace of this process's own, for the labs it boots.

The hosts of a lab share the network namespace of the process that boots them (their own are
mount, PID, UTS, IPC and cgroup). Two labs in one namespace see each other's sockets: one lab's
`ss 'sport = :29501'` lists the other lab's rendezvous listener, owned by no process it can
name, and the eaddrinuse drill then refuses to kill. So a process that boots a lab beside
another (a pytest-xdist worker of the lab's specs, `FLEET_LAB_NETNS=1`) first moves into a new
network namespace whose loopback is up: its hosts, its daemons and the servers it starts live
there, 127.0.0.0/8 and all, and nothing of another lab's is in sight. The namespace has no way
out: what needs the machine's network (pip reaching its index) runs elsewhere.

`unshare(CLONE_NEWNET)` moves the calling thread; threads and processes it starts afterwards
follow it. Call `enter_own` from the main thread before anything opens a socket.
"""

from __future__ import annotations

import ctypes
import os
import subprocess

#: Set to 1 (as root) to give each process that boots the lab's specs a namespace of its own.
VARIABLE = "FLEET_LAB_NETNS"
CLONE_NEWNET = 0x40000000  #: <linux/sched.h>


class NetnsError(Exception):
    """Why this process could not have a network namespace of its own (one line)."""


def wanted() -> bool:
    """Whether this process was asked to move into a namespace of its own."""
    return os.environ.get(VARIABLE, "") == "1"


def enter_own() -> None:
    """Move this thread into a new network namespace and bring its loopback up."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        reason = os.strerror(ctypes.get_errno())
        raise NetnsError(f"{VARIABLE}=1: cannot make a network namespace: {reason}")
    try:
        done = subprocess.run(
            ["ip", "link", "set", "lo", "up"], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        raise NetnsError(f"{VARIABLE}=1: cannot run ip: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = done.stderr.strip() or f"exit {done.returncode}"
        raise NetnsError(f"{VARIABLE}=1: cannot bring the loopback up: {said}")

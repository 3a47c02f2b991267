"""Ports for the servers specs start: each pytest-xdist worker hands out its own block, below the
ports the OS gives clients (`free_port`)."""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path


def _ephemeral_low() -> int:
    """The lowest port the OS hands out for bind(0) and outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


PORTS_FROM = 10000
"""Below this, the ports of services a machine may run (PostgreSQL's 5432, 8000, 8080...)."""
PORT_BLOCKS = 16
"""Blocks between PORTS_FROM and the OS's own range: one per pytest-xdist worker (gwN: block N)."""


def _port_block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) % PORT_BLOCKS if worker[2:].isdigit() else 0
    size = max(1, (_ephemeral_low() - PORTS_FROM) // PORT_BLOCKS)
    return range(PORTS_FROM + index * size, PORTS_FROM + (index + 1) * size)


_BLOCK = _port_block()
_next_port = itertools.count(os.getpid() % len(_BLOCK))  # a nested run starts elsewhere in it


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now, for a server a spec starts later. Not one the OS
    picks (bind to port 0): the OS hands those out to every client's connection too, so one
    could take it before the server binds (seen with four workers). This process's ports come
    from its worker's own block, below the OS's range (`ip_local_port_range`), in turn: no
    client, no other worker and no earlier spec of this one holds it, and one that will not
    bind is passed over."""
    for _ in range(len(_BLOCK)):
        port = _BLOCK[next(_next_port) % len(_BLOCK)]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_BLOCK.start}-{_BLOCK.stop - 1} on {host}")

"""`free_port()` (`tests/ports.py`): a server's port for a spec, from its worker's own block
below the ports the OS hands out to clients, never one in use."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from tests import ports as blocks
from tests.ports import PORTS_FROM, free_port


def test_ports_come_from_this_workers_block_below_the_clients_range_each_once() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(port in blocks._BLOCK for port in ports)
    assert blocks._BLOCK.start >= PORTS_FROM
    assert blocks._BLOCK.stop <= low
    with socket.socket() as server:
        server.bind(("127.0.0.1", free_port()))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            assert client.getsockname()[1] >= low  # a client's port: in no worker's block


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        held = taken.getsockname()[1]
        monkeypatch.setattr(blocks, "_next_port", itertools.count(held - blocks._BLOCK.start))
        assert free_port() == held + 1

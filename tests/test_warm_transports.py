"""A follower's warm connections (`supervisor.hear.streams.warm`) against a real OpenSSH server
(tests/sshd.py): one login per host, kept open, opened again when the server drops it, handed
over open; a host that does not answer says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Host
from supervisor.core.backoff import Backoff
from supervisor.hear.streams.stream import StreamSettings
from supervisor.hear.streams.warm import WarmTransports
from tests.helpers import eventually
from tests.ports import free_port
from tests.sshd import Sshd

FAST = StreamSettings(backoff=Backoff(base_s=0.1, cap_s=0.1, jitter=0.0))


def _config(tmp_path: Path, host: Host) -> FleetConfig:
    return FleetConfig.model_validate(
        {
            "source": tmp_path / "fleet.yaml",
            "store": {"path": tmp_path / "state.db"},
            "hosts": {host.name: host, "forge": {"name": "forge", "local": True}},
            "endpoints": {
                "m": {
                    "name": "m",
                    "kind": "health",
                    "url": "http://127.0.0.1:9/health",
                    "units": [
                        {"host": host.name, "unit": "vllm.service"},
                        {"host": "forge", "unit": "router.service"},
                    ],
                }
            },
        }
    )


async def test_one_login_kept_open_handed_over_and_opened_again(tmp_path: Path, sshd: Sshd) -> None:
    warm = WarmTransports(_config(tmp_path, sshd.host), settings=FAST)
    assert list(warm.transports) == ["spark1"]  # a local host has nothing to keep open
    assert warm.status() == {"spark1": "connecting"}
    warm.start()
    try:
        await eventually(lambda: warm.status() == {"spark1": "warm"}, what="warm")
        handed = await warm.hand_over()
        connection = handed["spark1"].connection
        assert connection is not None
        assert not connection.is_closed()
        assert (sshd.logins(), handed["spark1"].connects) == (1, 1)

        warm.start()  # following again: the same connection, no new login
        await eventually(lambda: warm.status() == {"spark1": "warm"}, what="warm again")
        assert (sshd.logins(), warm.transports["spark1"].connection) == (1, connection)

        sshd.stop()  # the server goes, and with it the connection
        await eventually(lambda: connection.is_closed(), what="the connection closed")
        sshd.start()
        await eventually(lambda: sshd.logins() == 2, what="a second login")
        await eventually(lambda: warm.status() == {"spark1": "warm"}, what="warm once more")
        assert warm.transports["spark1"].connects == 2
    finally:
        await warm.close()
    assert warm.transports["spark1"].connection is None


@pytest.mark.parametrize(
    ("known_hosts", "why", "next_s"),
    [
        (None, "cannot connect to spark9 (127.0.0.1:{port}): connection refused", "0.1"),
        (
            "missing",
            "cannot read known_hosts file {tmp}/missing for spark9: no such file or directory",
            "300.0",
        ),
    ],
    ids=["refused", "no-known-hosts"],
)
async def test_a_host_that_cannot_be_kept_warm_is_cold_and_says_why(
    tmp_path: Path, known_hosts: str | None, why: str, next_s: str
) -> None:
    port = free_port()
    host = Host(
        name="spark9",
        address="127.0.0.1",
        port=port,
        user="root",
        check_host_key=known_hosts is not None,
        known_hosts=None if known_hosts is None else tmp_path / known_hosts,
    )
    warm = WarmTransports(_config(tmp_path, host), settings=FAST)
    warm.start()
    expected = f"cold: {why.format(port=port, tmp=tmp_path)} (next in {next_s}s)"
    try:
        await eventually(lambda: warm.status() == {"spark9": expected}, what=expected)
    finally:
        await warm.close()

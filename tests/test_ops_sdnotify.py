"""sd_notify: real unix datagram sockets standing in for systemd's $NOTIFY_SOCKET, and the real
daemon (`python -m supervisor run`) in a subprocess: READY=1, WATCHDOG=1 from its loop, pings
that stop while the loop hangs (the test aid), SIGHUP reload, STOPPING=1 on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import httpx
import pytest
import yaml

from supervisor.app.sdnotify import HANG_FILE_ENV, SdNotifier, watchdog_interval
from supervisor.core.tls import default_tls
from tests.ports import free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(10)
    yield sock
    sock.close()


def _next(sock: socket.socket, *, within: float = 10.0) -> str:
    sock.settimeout(within)
    return sock.recv(4096).decode()


def _until(sock: socket.socket, wanted: str, *, within: float = 15.0) -> list[str]:
    """Datagrams up to and including the first one holding `wanted`."""
    seen: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            seen.append(_next(sock, within=max(0.01, deadline - time.monotonic())))
        except TimeoutError:
            break
        if wanted in seen[-1].splitlines():
            return seen
    raise AssertionError(f"no {wanted} within {within}s; got {seen}")


def test_notifier_sends_each_message_as_one_datagram(
    notify_socket: socket.socket, tmp_path: Path
) -> None:
    notifier = SdNotifier(str(tmp_path / "notify.sock"))
    assert notifier.ready("supervising 2 endpoints")
    assert _next(notify_socket) == "READY=1\nSTATUS=supervising 2 endpoints"
    assert notifier.watchdog()
    assert _next(notify_socket) == "WATCHDOG=1"
    assert notifier.stopping()
    assert _next(notify_socket) == "STOPPING=1"


def test_an_abstract_socket_address_starts_with_at() -> None:
    name = f"fleet-supervisor-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        assert SdNotifier("@" + name).send("STATUS=hello")
        assert sock.recv(100) == b"STATUS=hello"


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = SdNotifier.from_env({})
    assert not notifier.enabled
    assert not notifier.ready()
    assert not notifier.watchdog()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WATCHDOG_USEC": "60000000"}, 30.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "4242"}, 30.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_the_ping_interval_is_half_of_watchdog_usec(
    env: dict[str, str], expected: float | None
) -> None:
    assert watchdog_interval(env, pid=4242) == expected


def _fleet(folder: Path, http_port: int, endpoints: dict[str, object]) -> Path:
    document = {
        "store": {"path": "state/supervisor.db"},
        "remediation": {"dry_run": True},
        "http": {"listen": f"127.0.0.1:{http_port}"},
        "defaults": {"probe": {"liveness_interval": "200ms", "jitter": "0s", "timeout": "1s"}},
        "hosts": {"forge": {"local": True}},
        "endpoints": endpoints,
    }
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _health(port: int) -> dict[str, object]:
    return {"kind": "health", "url": f"http://127.0.0.1:{port}/health", "host": "forge"}


def _status_names(http_port: int) -> list[str]:
    document = httpx.get(
        f"http://127.0.0.1:{http_port}/status", verify=default_tls(), timeout=5
    ).json()
    return [e["name"] for e in document["endpoints"]]


@pytest.mark.slow
def test_the_daemon_is_ready_pings_from_its_loop_and_stops_pinging_when_the_loop_hangs(
    tmp_path: Path, notify_socket: socket.socket
) -> None:
    http_port = free_port()
    web = _health(free_port())
    config = _fleet(tmp_path, http_port, {"web": web})
    hang = tmp_path / "hang"
    env = os.environ | {
        "NOTIFY_SOCKET": str(tmp_path / "notify.sock"),
        "WATCHDOG_USEC": "200000",  # a ping every 100 ms
        HANG_FILE_ENV: str(hang),
    }
    env.pop("WATCHDOG_PID", None)
    argv = [sys.executable, "-m", "supervisor", "--config", str(config), "run"]
    log = (tmp_path / "daemon.log").open("wb")  # a file, not a pipe nobody drains
    daemon = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        first = _until(notify_socket, "READY=1")
        assert first[-1] == "READY=1\nSTATUS=supervising 1 endpoint"
        _until(notify_socket, "WATCHDOG=1")
        _until(notify_socket, "WATCHDOG=1")
        hang.touch()
        with suppress(TimeoutError):  # a ping sent before the loop saw the file
            while True:
                _next(notify_socket, within=0.3)
        with pytest.raises(TimeoutError):
            _next(notify_socket, within=1.0)  # ten intervals: the hung loop sends nothing
        hang.unlink()
        _until(notify_socket, "WATCHDOG=1", within=5)  # the loop runs again

        assert _status_names(http_port) == ["web"]
        _fleet(tmp_path, http_port, {"web": web, "api": _health(free_port())})
        daemon.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while sorted(_status_names(http_port)) != ["api", "web"]:
            assert time.monotonic() < deadline, "SIGHUP did not add the endpoint"
            time.sleep(0.05)

        daemon.send_signal(signal.SIGTERM)
        _until(notify_socket, "STOPPING=1")
        assert daemon.wait(timeout=15) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        log.close()

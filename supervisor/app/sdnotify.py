"""systemd's notify protocol: READY=1, WATCHDOG=1, STOPPING=1 and STATUS=... as datagrams to
`$NOTIFY_SOCKET` (a leading `@` means the abstract namespace). Without `$NOTIFY_SOCKET` (not
under systemd, or not `Type=notify`) every call is a no-op.

The watchdog pings come from a task on the daemon's event loop, every `WATCHDOG_USEC / 2`: a
loop that hangs stops pinging, and systemd (`WatchdogSec=`) kills and restarts the daemon.

Test aid, off by default: when `$FLEET_SUPERVISOR_TEST_HANG_FILE` names a file that exists, the
watchdog task blocks the whole event loop with `time.sleep` until the file is removed, so a test
(or the lab) can make the loop hang on purpose and watch the pings stop.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

import structlog

log = structlog.get_logger("supervisor.ops.sdnotify")

HANG_FILE_ENV = "FLEET_SUPERVISOR_TEST_HANG_FILE"
"""Test aid: while the file it names exists, the watchdog task blocks the event loop."""


class SdNotifier:
    """Sends notify datagrams to `address` (`$NOTIFY_SOCKET`); a no-op when it is None."""

    def __init__(self, address: str | None) -> None:
        self.address = address or None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SdNotifier:
        return cls((os.environ if env is None else env).get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        """Send `fields` (e.g. `READY=1`) as one datagram; False when off or when it failed."""
        if self.address is None:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto("\n".join(fields).encode(), target)
        except OSError as exc:
            log.warning("sd_notify failed", socket=self.address, error=str(exc))
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *((f"STATUS={status}",) if status else ()))

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")


def watchdog_interval(env: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between pings (`WATCHDOG_USEC / 2`), or None when systemd asks for none (no or a
    bad `WATCHDOG_USEC`, or `WATCHDOG_PID` names another process)."""
    env = os.environ if env is None else env
    raw = env.get("WATCHDOG_USEC", "")
    owner = env.get("WATCHDOG_PID", "")
    if owner and owner != str(os.getpid() if pid is None else pid):
        return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    return usec / 2 / 1_000_000 if usec > 0 else None


def hang_if_asked(env: Mapping[str, str] | None = None) -> None:
    """Test aid: block the event loop while `$FLEET_SUPERVISOR_TEST_HANG_FILE` exists."""
    name = (os.environ if env is None else env).get(HANG_FILE_ENV, "")
    if not name:
        return
    path = Path(name)
    if path.exists():
        log.warning("test aid: blocking the event loop", hang_file=name)
    while path.exists():
        time.sleep(0.05)  # on purpose: this is the hung loop the watchdog must catch


async def ping_forever(notifier: SdNotifier, interval: float) -> None:
    """WATCHDOG=1 every `interval` seconds, from the event loop, until cancelled."""
    while True:
        hang_if_asked()
        notifier.watchdog()
        await asyncio.sleep(interval)

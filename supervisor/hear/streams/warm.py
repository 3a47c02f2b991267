"""A follower's warm connections: one SSH transport per host whose units are streamed, opened
while the instance follows and kept open, so the streams of the leader it may become start on
connections already made (no SSH handshake, no login at the takeover).

A follower does not follow the journal: it writes nothing and acts on nothing, and the leader
resumes from the stored cursor (the old leader's), never from a follower's. On each connection
it runs the head command once (`journalctl -n 1`, as root like the stream): that proves the host
answers, the login works and journalctl may read the journal, and gives the follower's own
status. Then it waits for the connection to close (SSH keepalives, 15 s x 3, find a dead one)
and opens it again with the streams' backoff (after `retry_stream_every_s` when the login or
the host key was refused).

`hand_over()` stops the keepers and leaves the connections open for the leader's streams
(`transports`); `start()` resumes keeping them when the instance follows again (a connection
that closed meanwhile is opened again); `close()` closes them. Hosts run `local: true` have no
connection to keep.

Status per host: `connecting`, `warm`, `warm, but journalctl failed: WHY` (the leader would
poll), `cold: WHY (next in Xs)` while it cannot connect.
"""

from __future__ import annotations

import asyncio
import random
from contextlib import suppress
from pathlib import Path

import structlog

from supervisor.config.models import FleetConfig
from supervisor.hear.streams.hub import units_by_host
from supervisor.hear.streams.journal import head_argv
from supervisor.hear.streams.protocol import TransportError
from supervisor.hear.streams.ssh import SshTransport
from supervisor.hear.streams.stream import StreamSettings

log = structlog.get_logger("supervisor.hostevents")

CONNECTING = "connecting"
WARM = "warm"


class WarmTransports:
    """The warm connections of a fleet's remote systemd hosts; `start`, `hand_over`, `close`."""

    def __init__(
        self,
        config: FleetConfig,
        *,
        settings: StreamSettings | None = None,
        known_hosts_default: Path | None = None,
    ) -> None:
        self.transports: dict[str, SshTransport] = {
            name: SshTransport(config.hosts[name], known_hosts_default)
            for name in units_by_host(config)
            if not config.hosts[name].local
        }
        self._settings = settings or StreamSettings()
        self._status = dict.fromkeys(self.transports, CONNECTING)
        self._tasks: list[asyncio.Task[None]] = []
        self._rng = random.Random()

    def status(self) -> dict[str, str]:
        return dict(self._status)

    def start(self) -> None:
        """Keep every connection open (again) until `hand_over` or `close`."""
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(self._keep(name, transport), name=f"warm:{name}")
            for name, transport in self.transports.items()
        ]

    async def hand_over(self) -> dict[str, SshTransport]:
        """Stop keeping the connections (they stay open) and give them to the leader's
        streams."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with suppress(asyncio.CancelledError):
                await task
        return dict(self.transports)

    async def close(self) -> None:
        await self.hand_over()
        for transport in self.transports.values():
            with suppress(Exception):
                await transport.close()

    async def _keep(self, name: str, transport: SshTransport) -> None:
        attempt = 0
        while True:
            try:
                head = await transport.run(
                    head_argv(), timeout=self._settings.command_timeout_s, sudo=True
                )
            except TransportError as exc:  # refused for good (login, host key): as the stream
                attempt += 1
                delay = (
                    self._settings.retry_stream_every_s
                    if exc.lasting
                    else self._settings.backoff.delay(attempt, self._rng)
                )
                self._status[name] = f"cold: {exc.reason} (next in {delay:.1f}s)"
                log.warning("warm connection failed", host=name, reason=exc.reason)
                await asyncio.sleep(delay)
                continue
            attempt = 0
            self._status[name] = WARM if head.ok else f"warm, but journalctl failed: {head.why()}"
            await transport.wait_closed()
            self._status[name] = CONNECTING

"""The daemon's ops side, started and stopped by the composition root (`supervisor.app.root`) around
the running daemon: the HTTP server (when `http.enabled`), READY=1 once the first probe round is
scheduled, the watchdog pings, and STOPPING=1 on the way down."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import TYPE_CHECKING

import structlog

from supervisor.app.sdnotify import SdNotifier, ping_forever, watchdog_interval
from supervisor.core.peers import PeerDoor
from supervisor.core.tenure import Tenure
from supervisor.tell.web.listen import ListenError

if TYPE_CHECKING:
    from supervisor.control import ControlApi
    from supervisor.runtime import Daemon
    from supervisor.tell.web.http import OpsServer

log = structlog.get_logger("supervisor.ops")


class OpsRuntime:
    def __init__(self, notifier: SdNotifier | None = None) -> None:
        self.notifier = notifier or SdNotifier.from_env()
        self.server: OpsServer | None = None
        self._watchdog: asyncio.Task[None] | None = None

    async def start(
        self,
        daemon: Daemon,
        *,
        control: ControlApi | None = None,
        tenure: Tenure | None = None,
        peer: PeerDoor | None = None,
    ) -> None:
        """After the first probe round is scheduled: serve HTTP (the control API's routes
        with it), say READY=1, start pinging."""
        http = daemon.config.http
        if http.enabled:
            from supervisor.tell.web.http import OpsServer  # the web stack, only when it serves

            try:
                server = OpsServer(
                    daemon,
                    listen=http.listen,
                    started_at=daemon.clock.now(),
                    control=control,
                    tenure=tenure,
                    peer=peer,
                )
                await server.start()
                self.server = server
            except (ListenError, OSError) as exc:
                # supervising matters more than metrics: keep running, say so loudly
                log.error("http not served", listen=http.listen, error=str(exc))
        endpoints = len(daemon.workers)
        self.notifier.ready(f"supervising {endpoints} endpoint{'s' * (endpoints != 1)}")
        interval = watchdog_interval()
        if interval is not None and self.notifier.enabled:
            self._watchdog = asyncio.create_task(
                ping_forever(self.notifier, interval), name="watchdog"
            )

    async def stop_serving(self) -> None:
        """The HTTP server off (its address free for a follower's)."""
        if self.server is not None:
            await self.server.stop()
            self.server = None

    async def stop(self) -> None:
        self.notifier.stopping()
        if self._watchdog is not None:
            self._watchdog.cancel()
            with suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None
        if self.server is not None:
            await self.server.stop()
            self.server = None

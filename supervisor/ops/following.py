"""The follower's HTTP side as the leadership gate runs it: started when the instance begins
to follow, stopped before its own supervisor binds the same `http.listen` (and started again
when it follows again). The web stack is imported only when `http.enabled`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from supervisor.clock import utcnow
from supervisor.config import FleetConfig
from supervisor.ops.listen import ListenError
from supervisor.store import Store

if TYPE_CHECKING:
    from supervisor.ops.follower import FollowerServer

log = structlog.get_logger("supervisor.ops")


class FollowerHttp:
    def __init__(self, config: FleetConfig, store: Store, *, me: str) -> None:
        self.config = config
        self.store = store
        self.me = me
        self.server: FollowerServer | None = None

    async def start(self) -> None:
        """Serve; an address that cannot be bound is logged and the instance follows on."""
        http = self.config.http
        if not http.enabled or self.server is not None:
            return
        from supervisor.ops.follower import FollowerServer  # the web stack, only when it serves
        from supervisor.ops.stored import StoredFleet

        fleet = StoredFleet(self.config, self.store, me=self.me)
        try:
            server = FollowerServer(fleet, listen=http.listen, started_at=utcnow())
            await server.start()
        except (ListenError, OSError) as exc:
            log.error("http not served while following", listen=http.listen, error=str(exc))
            return
        self.server = server

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None

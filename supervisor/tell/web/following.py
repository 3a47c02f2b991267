"""The follower's HTTP side as the leadership gate runs it: started when the instance begins
to follow, stopped before its own supervisor binds the same `http.listen` (and started again
when it follows again). The web stack is imported only when `http.enabled`.

On PostgreSQL its page is live as the leader's: each timeline entry another process commits is
announced (`supervisor.record.store.listen`), and the announcement calls the store's `on_timeline`
hooks in this process, which wake the page's open `/events` streams."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from supervisor.config.models import FleetConfig
from supervisor.core.clock import utcnow
from supervisor.core.peers import PeerDoor
from supervisor.record.store.listen import TIMELINE, Listener
from supervisor.record.store.store import Store
from supervisor.tell.web.listen import ListenError

if TYPE_CHECKING:
    from supervisor.tell.web.follower import FollowerServer

log = structlog.get_logger("supervisor.ops")


class FollowerHttp:
    def __init__(
        self,
        config: FleetConfig,
        store: Store,
        *,
        me: str,
        listener: Listener | None = None,
        peer: PeerDoor | None = None,
        cut_off: Callable[[], str] = lambda: "",
    ) -> None:
        self.config = config
        self.peer = peer
        #: why this instance does not lead while the store does not answer it ('' otherwise)
        self.cut_off = cut_off
        self.store = store
        self.me = me
        self.listener = listener
        self.server: FollowerServer | None = None
        self._unsubscribe: Callable[[], None] | None = None

    async def start(self) -> None:
        """Serve; an address that cannot be bound is logged and the instance follows on."""
        http = self.config.http
        if not http.enabled or self.server is not None:
            return
        from supervisor.tell.web.follower import (
            FollowerServer,  # the web stack, only when it serves
        )
        from supervisor.tell.web.stored import StoredFleet

        fleet = StoredFleet(self.config, self.store, me=self.me)
        try:
            server = FollowerServer(
                fleet,
                listen=http.listen,
                started_at=utcnow(),
                peer=self.peer,
                cut_off=self.cut_off,
            )
            await server.start()
        except (ListenError, OSError) as exc:
            log.error("http not served while following", listen=http.listen, error=str(exc))
            return
        self.server = server
        if self.listener is not None:
            self._unsubscribe = self.listener.subscribe(TIMELINE, self._committed)

    def _committed(self, _payload: str) -> None:
        """Another process committed a timeline entry: as if this store had."""
        for hook in list(self.store.on_timeline):
            hook()

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self.server is not None:
            await self.server.stop()
            self.server = None

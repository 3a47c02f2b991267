"""The silences, pauses and control journal as stored, for a follower's page: what the leader's
control API reads, read-only (`supervisor.tell.web.source.ControlReads`)."""

from __future__ import annotations

from supervisor.control.entries import pause_reason
from supervisor.control.model import FLEET, JournalRow, PauseRow, SilenceRow
from supervisor.control.tables import ControlStore
from supervisor.core.clock import Clock
from supervisor.record.store.store import Store


class StoredControl:
    """`load()` (each request: the pauses), then read like the control API."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.tables = ControlStore(store)
        self._clock = clock
        self._pauses: list[PauseRow] = []

    async def load(self) -> None:
        self._pauses = await self.tables.pauses()

    def pauses(self) -> list[PauseRow]:
        return self._pauses

    def paused(self, endpoint: str) -> str:
        scopes = {p.scope for p in self._pauses}
        if FLEET in scopes:
            return pause_reason(None)
        return pause_reason(endpoint) if endpoint in scopes else ""

    async def silences(self) -> list[SilenceRow]:
        return await self.tables.silences(active_at=self._clock.now())

    async def journal(
        self, subject: str | None = None, *, latest: int | None = None
    ) -> list[JournalRow]:
        return await self.tables.journal(subject, latest=latest)

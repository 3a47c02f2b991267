"""A store a spec reads again and again while its daemons write it (a wait's predicate).

Opened once, when a daemon has made it, and kept until the spec's teardown closes it. Opening
one per read cost, on PostgreSQL, a server backend (its fork and its login) and the store's
check of its tables each time: ten reads a second through waits of up to two minutes made the
leadership specs the run's largest source of PostgreSQL backends (2,234 in one run). The
store's PostgreSQL pool pings a connection before it lends it, so a server restarted meanwhile
is met with a new connection, not an error.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.record.store.errors import StoreError
from supervisor.record.store.lease import LeaseJournalEntry, lease_journal
from supervisor.record.store.records import AttemptRow
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget


@dataclass
class KeptStore:
    target: StoreTarget
    _store: Store | None = None

    async def get(self) -> Store | None:
        """The store, opened on first use (never made here: None until a daemon made it)."""
        if self._store is None:
            try:
                self._store = await Store.open(self.target, create=False)
            except StoreError:
                return None
        return self._store

    async def lease_and_attempts(
        self, endpoint: str
    ) -> tuple[list[LeaseJournalEntry], list[AttemptRow]]:
        """The leadership journal and `endpoint`'s repair attempts (both empty: no store yet)."""
        store = await self.get()
        if store is None:
            return [], []
        async with store.tx(write=False) as conn:
            entries = await lease_journal(conn)
        return entries, await store.attempts(endpoint)

    async def close(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            await store.close()

"""The Store: one SQLite file of states, incidents, their append-only timeline and probe samples.

Every public call is one transaction, so a daemon killed between any two calls leaves the file
consistent. Several processes may read the file while one writes (WAL). How a call becomes a
(fenced) transaction is the first part of `Store`; the statements are `writes.py` and `queries.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self

from sqlalchemy import select
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from supervisor.core.events import ProbeResult
from supervisor.record.store import history, lease, queries, writes
from supervisor.record.store.apply import Ids, appends_entry, apply, result_id
from supervisor.record.store.engine import make_any_engine, open_engine, reason, transaction
from supervisor.record.store.errors import (
    SERVER_DOWN,
    StoreError,
    StoreRefusedError,
    server_unreachable,
)
from supervisor.record.store.grouped import GroupedSaves, Save
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.pgengine import drop_connections
from supervisor.record.store.queued import (
    AddSample,
    AppendWrite,
    FinishAttempt,
    StartAttempt,
    Supervised,
    Supervising,
    TransitionWrite,
    Write,
)
from supervisor.record.store.records import (
    AttemptRow,
    IncidentRow,
    SampleRow,
    Snapshot,
    SubjectKind,
    TimelineEntry,
    TimelineRow,
)
from supervisor.record.store.schema import attempts
from supervisor.record.store.target import StoreTarget


class Store:
    """Open with ``await Store.open(path)``; use as ``async with await Store.open(p) as s``."""

    def __init__(self, engine: AsyncEngine, path: StoreTarget) -> None:
        self._engine = engine
        self.path = path
        #: the leader's epoch: set, every write is fenced by it (`supervisor.record.store.lease`)
        self.fence_epoch: int | None = None
        self.fence_holder = ""  #: who we are, for the journal of refusals
        self.fence_host = ""
        #: called once with the error when the fence refused us (we are deposed)
        self.on_deposed: list[Callable[[StaleEpochError], None]] = []
        self.closed = False
        #: (epoch, holder) of the leader a peer named while the store did not answer us: every
        #: write and fence question is refused at once (`depose`)
        self.deposed_by: tuple[int, str] | None = None
        #: one per transaction under way: `depose` cuts them short (they wait on that store)
        self._under_way: set[asyncio.Timeout] = set()
        #: called after each committed timeline entry (the notifier's composer wakes on it)
        self.on_timeline: list[Callable[[], None]] = []
        #: snapshot saves that fall due together share a transaction (group commit)
        self.saves = GroupedSaves(self._save_many)

    # transactions: one per call, driver errors turned into a `StoreRefusedError` naming the
    # store, and, while we lead, every write fenced by our epoch (a refusal written to the
    # leadership journal and told to whoever listens)

    async def close(self) -> None:
        await self.saves.idle()
        self.closed = True
        # deposed while cut off: closing a connection waits for the server's answer, which a
        # silent partition never gives (asyncpg's close has no limit); the sockets are dropped
        await self._engine.dispose(close=self.deposed_by is None)

    @asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """On the store's engine while it is open. Once closed (the daemon stopped), on an
        engine of its own, disposed when the transaction ends: the closed engine would open a
        connection again and nobody would close it (a read of a stopped daemon's store)."""
        if not self.closed:
            async with transaction(self._engine, write=write) as conn:
                yield conn
            return
        engine = make_any_engine(self.path)
        try:
            async with transaction(engine, write=write) as conn:
                yield conn
        finally:
            await engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def depose(self, *, epoch: int, holder: str) -> None:
        """[leadership] Another instance leads with `epoch` (a peer said so while this store
        does not answer us: cut off from it): from now on every write and every fence question
        is refused at once, with no round trip to a store that would not answer; so is every
        read, and every transaction under way is cut short (a teardown waits on none of them:
        without this, each would wait for the driver's statement limit, or the partition's end).
        A PostgreSQL store's connections are dropped (`pgengine.drop_connections`): what was
        under way on one is not cancelled through the partition, which would wait."""
        self.deposed_by = (epoch, holder)
        drop_connections(self._engine)
        now = asyncio.get_running_loop().time()
        for under_way in self._under_way:
            under_way.reschedule(now)

    def _cut_off(self, *, write: bool) -> StoreError | None:
        """Deposed while cut off (`depose`): the refusal of a write (the fence's) or a read."""
        if self.deposed_by is None:
            return None
        if write and (stale := self._stale("a store write")) is not None:
            return stale
        epoch, holder = self.deposed_by
        return StoreRefusedError(
            f"cannot {'write to' if write else 'read'} store {self.path}: it does not answer "
            f"this instance; {holder} leads (epoch {epoch})",
            cause=SERVER_DOWN,
        )

    def _stale(self, what: str) -> StaleEpochError | None:
        if self.deposed_by is None or self.fence_epoch is None:
            return None
        epoch, holder = self.deposed_by
        return StaleEpochError(mine=self.fence_epoch, current=epoch, holder=holder, what=what)

    @asynccontextmanager
    async def _tx(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """One transaction; driver errors become a StoreError naming the file."""
        if (refused := self._cut_off(write=write)) is not None:
            raise refused
        try:
            async with self._cut_short(), self._transaction(write=write) as conn:
                if write and self.fence_epoch is not None:
                    await lease.check_epoch(conn, epoch=self.fence_epoch, what="a store write")
                yield conn
        except StaleEpochError as err:
            await self._refused(err)
            raise
        except (StatementError, OSError, TimeoutError) as err:  # OSError: a server gone
            if (refused := self._cut_off(write=write)) is not None:
                raise refused from None
            verb = "write to" if write else "read"
            raise StoreRefusedError(
                f"cannot {verb} store {self.path}: {reason(err)}",
                cause=SERVER_DOWN if server_unreachable(err) else "",
            ) from None

    @asynccontextmanager
    async def _cut_short(self) -> AsyncIterator[None]:
        """Cut short by `depose` (a TimeoutError where it waits)."""
        async with asyncio.timeout(None) as under_way:
            self._under_way.add(under_way)
            try:
                yield
            finally:
                self._under_way.discard(under_way)

    async def check_fence(self, what: str) -> None:
        """Before an outside effect (a command, a message): raise `StaleEpochError` (recorded
        in the leadership journal) unless we still hold the lease's epoch. Unfenced: no-op."""
        if self.fence_epoch is None:
            return
        if (stale := self._stale(what)) is not None:
            raise stale
        async with self._tx(write=False) as conn:
            await lease.check_epoch(conn, epoch=self.fence_epoch, what=what)

    async def _refused(self, err: StaleEpochError) -> None:
        """Write the refusal to the journal (its own transaction: the refused one rolled back;
        if the store cannot take it either, the refusal still stands), then tell listeners."""
        with suppress(StatementError, OSError, TimeoutError):
            async with self._transaction(write=True) as conn:
                await lease.write_journal(
                    conn,
                    epoch=err.mine,
                    holder=self.fence_holder,
                    host=self.fence_host,
                    event="refused",
                    detail=f"{err.what}: {err.holder} leads with epoch {err.current}",
                )
        for listener in list(self.on_deposed):
            listener(err)

    def tx(self, *, write: bool) -> AbstractAsyncContextManager[AsyncConnection]:
        """One transaction for store add-ons (`supervisor.record.store.outbox`): same errors as
        ours."""
        return self._tx(write=write)

    # records

    def _appended(self) -> None:
        for listener in list(self.on_timeline):
            listener()

    @classmethod
    async def open(cls, path: StoreTarget, *, create: bool = True) -> Store:
        """create=True makes parent dirs and tables; create=False needs an existing store."""
        return cls(await open_engine(path, create=create), path)

    # write side

    async def save_snapshot(self, snapshot: Snapshot, *, sample: ProbeResult | None = None) -> None:
        """Insert or replace the snapshot of (kind, name), and store the probe `sample` that
        led to it in the same transaction (one write per probe, not two; the saves of other
        endpoints that fall due meanwhile share it: `supervisor.record.store.grouped`)."""
        await self.saves.save(snapshot, sample)

    async def _save_many(self, saves: Sequence[Save]) -> None:
        async with self._tx(write=True) as conn:
            await writes.save_snapshots(conn, [(s.snapshot, s.sample) for s in saves])

    async def transition(
        self,
        *,
        snapshot: Snapshot,
        entry: TimelineEntry,
        open_cause: str | None = None,
        close_resolution: str | None = None,
        reopen_within: timedelta | None = None,
    ) -> int | None:
        """Open (or reuse) the subject's incident, append `entry`, maybe close it, save state.

        With `reopen_within`, a problem that comes back within that long of the subject's last
        incident closing reopens that incident instead of opening a new one (a flapping
        endpoint is one incident). Returns the id of the incident the entry was appended to, or
        None if there was none (no incident open and no `open_cause`).
        """
        write = TransitionWrite(
            snapshot=snapshot,
            entry=entry,
            open_cause=open_cause,
            close_resolution=close_resolution,
            reopen_within=reopen_within,
        )
        return await self._write(write)

    async def supervising(self, started: datetime, subjects: Sequence[history.Subject]) -> None:
        """A run of the daemon starts at `started`: each subject's (kind, name, state) is logged
        then, after `unsupervised` where the previous run was last seen."""
        await self._write(Supervising(started=started, subjects=tuple(subjects)))

    async def supervised(self, started: datetime, at: datetime) -> None:
        """The run that started at `started` is alive at `at`."""
        await self._write(Supervised(started=started, at=at))

    async def append(self, incident_id: int, entry: TimelineEntry) -> int:
        """Append to an incident's timeline (closed ones too); returns the new row's id."""
        return _made(await self._write(AppendWrite(incident_id=incident_id, entry=entry)))

    async def add_sample(self, result: ProbeResult) -> None:
        await self._write(AddSample(result=result))

    async def prune_samples(self, older_than: datetime) -> int:
        """Delete samples taken before `older_than`; returns how many went."""
        async with self._tx(write=True) as conn:
            return await writes.prune_samples(conn, older_than)

    async def start_attempt(
        self, *, endpoint: str, rule_id: str, incident_id: int | None, at: datetime
    ) -> int:
        """Record that a remediation starts; returns the attempt's id."""
        write = StartAttempt(
            endpoint=endpoint,
            rule_id=rule_id,
            incident_id=incident_id,
            at=at,
            epoch=self.fence_epoch,
        )
        return _made(await self._write(write))

    async def finish_attempt(self, attempt_id: int, *, at: datetime, outcome: str) -> None:
        await self._write(FinishAttempt(attempt_id=attempt_id, at=at, outcome=outcome))

    async def _write(self, write: Write) -> int | None:
        """Every write call's (a `ResilientStore` queues them while the store refuses them)."""
        return await self._write_now(write, Ids())

    async def _write_now(self, write: Write, ids: Ids) -> int | None:
        """One write in a transaction of its own: the statements a queued one runs
        (`supervisor.record.store.apply`, each placeholder mapped by `ids`); the id it made."""
        async with self._tx(write=True) as conn:
            result = await apply(conn, write, ids)
        if appends_entry(write, result):
            self._appended()
        return result_id(result)

    async def attempts(
        self, endpoint: str | None = None, *, since: datetime | None = None
    ) -> list[AttemptRow]:
        """Attempts started at or after `since`, oldest first (all endpoints when None)."""
        query = select(attempts).order_by(attempts.c.id)
        if endpoint is not None:
            query = query.where(attempts.c.endpoint == endpoint)
        if since is not None:
            query = query.where(attempts.c.started_at >= since)
        async with self._tx(write=False) as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [AttemptRow(**row) for row in rows]

    # read side

    async def snapshots(self, kind: SubjectKind | None = None) -> list[Snapshot]:
        """All snapshots (or those of one kind), ordered by kind, then name."""
        async with self._tx(write=False) as conn:
            return await queries.snapshot_list(conn, kind)

    async def snapshot(self, kind: SubjectKind, name: str) -> Snapshot | None:
        async with self._tx(write=False) as conn:
            return await queries.snapshot_one(conn, kind, name)

    async def open_incident(self, kind: SubjectKind, name: str) -> IncidentRow | None:
        async with self._tx(write=False) as conn:
            return await queries.open_incident(conn, kind, name)

    async def incident(self, incident_id: int) -> IncidentRow | None:
        async with self._tx(write=False) as conn:
            return await queries.incident_one(conn, incident_id)

    async def incidents(
        self,
        *,
        subject: str | None = None,
        since: datetime | None = None,
        open_only: bool = False,
        limit: int | None = None,
    ) -> list[IncidentRow]:
        """Newest first; `since` keeps incidents opened or closed at/after it, or still open."""
        if limit is not None:
            _check_limit(limit)
        async with self._tx(write=False) as conn:
            return await queries.incident_list(
                conn, subject=subject, since=since, open_only=open_only, limit=limit
            )

    async def timeline(self, incident_id: int) -> list[TimelineRow]:
        """The incident's entries in the order they were appended."""
        async with self._tx(write=False) as conn:
            return await queries.timeline_of(conn, incident_id)

    async def samples(self, endpoint: str, *, limit: int = 20) -> list[SampleRow]:
        """The endpoint's latest samples, newest first."""
        _check_limit(limit)
        async with self._tx(write=False) as conn:
            return await queries.samples_of(conn, endpoint, limit)


def _made(found: int | None) -> int:
    """The id of a write that always makes one (a `ResilientStore` queueing it: a placeholder)."""
    assert found is not None
    return found


def _check_limit(limit: int) -> None:
    if limit < 0:
        raise StoreError(f"limit must be 0 or more, got {limit}")

"""A Store that survives its file refusing writes for a while (locked by another process,
made read-only, a full disk): writes are queued in memory, in order, and retried until the file
takes them again. Probing and alerting go on meanwhile; nothing recorded is lost once it clears.

A write that returns an id (`transition`, `append`, `start_attempt`) while writes are queued
returns a *placeholder*: a negative number standing for the id the store will give it. Later
writes that carry the placeholder (an entry appended to that incident, the attempt finished)
are mapped to the real id when the queue is flushed, so callers never notice. Reads go straight
to the file (SQLite's WAL lets them through a writer's lock) and do not see queued writes,
except the timeline entries: each queued one is also *held* (`held`: the row and its incident as
the store will have them, under placeholder ids) so the notifier composes and sends from memory
while the store cannot take them (`supervisor.record.store.outbox`).

The queue is bounded (`max_queued`): past it the oldest probe samples (and superseded snapshot
saves) are dropped first; timeline entries, attempts and the outbox are never dropped.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from supervisor.core.aio import wait_event
from supervisor.core.events import ProbeResult
from supervisor.record.store import queries
from supervisor.record.store.engine import open_engine
from supervisor.record.store.errors import StoreError, StoreRefusedError, unwritable_cause
from supervisor.record.store.history import Subject
from supervisor.record.store.records import IncidentRow, Snapshot, TimelineEntry, TimelineRow
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget

log = structlog.get_logger("supervisor.store")


def refused(err: StoreError) -> bool:
    """Whether `err` is the file refusing (locked, read-only, disk full), worth a retry (as
    opposed to e.g. 'no incident 42')."""
    return isinstance(err, StoreRefusedError)


MAX_QUEUED = 20_000
"""Writes held in memory at most, before the oldest samples are dropped."""

_DROPPABLE = frozenset({"add_sample", "save_snapshot", "prune_samples", "supervised"})
"""Writes whose loss loses no record (a probe sample; a snapshot, or a run's heartbeat, the next
one replaces)."""


@dataclass(frozen=True)
class _Write:
    what: str  #: e.g. "add_sample", for the log
    run: Callable[[], Awaitable[int | None]]
    placeholder: int | None  #: the id handed out for this write's result, if any


@dataclass(frozen=True, kw_only=True)
class Held:
    """A timeline entry the store has not taken yet, as the notifier reads it: the row (its
    id negative, its incident's id possibly a placeholder) and its incident."""

    row: TimelineRow
    incident: IncidentRow


class ResilientStore(Store):
    """`Store` with writes that queue while the file refuses them. Open with
    ``await ResilientStore.open(path)``. `outage` says why writes are queued ('' when not)."""

    def __init__(
        self,
        engine: AsyncEngine,
        path: StoreTarget,
        *,
        retry_every: float = 1.0,
        max_queued: int = MAX_QUEUED,
    ) -> None:
        super().__init__(engine, path)
        self.retry_every = retry_every
        self.max_queued = max_queued
        self.outage = ""  #: the error that made writes queue, '' while they go through
        self.outage_cause = ""  #: why, in a few words (`unwritable_cause`)
        self.outages = 0  #: how many times writes started queueing
        self.dropped = 0  #: samples dropped because the queue was full
        self.saved = 0  #: queued writes the store took once it cleared (this outage's)
        #: some queued writes landed and the rest wait: the table may hold entries the notifier
        #: composed from memory already (it reads none from the table meanwhile)
        self.flushing = False
        self.landed = 0  #: queued writes the store took, ever (a read spanning one sees it)
        #: the timeline's last id when the store took the last queued write (0: not known): every
        #: entry held until then is at or below it, every later one above
        self.flushed_to = 0
        #: called with the error when writes start queueing, and with '' when they are saved
        self.on_outage: list[Callable[[str], None]] = []
        #: the timeline entries queued, oldest first (gone once the store took them)
        self.held: list[Held] = []
        self._held_ids = itertools.count(-1, -1)
        self._held_incidents: dict[int, IncidentRow] = {}
        self._queue: deque[_Write] = deque()
        self._writable = asyncio.Event()  #: set while writes go through
        self._writable.set()
        self._ids: dict[int, int | None] = {}  #: placeholder -> the real id once flushed
        self._next = itertools.count(-1, -1)
        self._retry: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, path: StoreTarget, *, create: bool = True) -> ResilientStore:
        return cls(await open_engine(path, create=create), path)

    @property
    def queued(self) -> int:
        """Writes held in memory, waiting for the file."""
        return len(self._queue)

    def problem(self) -> str:
        """'' while writes go through; else one line for people: why the store cannot be
        written, and what is kept meanwhile."""
        if not self.outage:
            return ""
        dropped = f"; {self.dropped} oldest samples dropped" if self.dropped else ""
        return (
            f"the store cannot be written: {self.outage_cause} ({self.outage}); "
            f"{self.queued} records kept in memory, written when it returns{dropped}"
        )

    def real_id(self, value: int | None) -> int | None:
        """The store's id for `value` (itself unless it is a flushed placeholder)."""
        if value is None or value >= 0:
            return value
        return self._ids.get(value, value)

    async def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            await asyncio.gather(self._retry, return_exceptions=True)
        if self._queue:
            await self._flush()
        if self._queue:
            log.error("store closed with writes unsaved", store=str(self.path), lost=self.queued)
        await super().close()

    # the queue

    async def _write(
        self, what: str, run: Callable[[], Awaitable[int | None]], *, returns_id: bool
    ) -> int | None:
        return (await self._submit(what, run, returns_id=returns_id))[0]

    async def _submit(
        self, what: str, run: Callable[[], Awaitable[int | None]], *, returns_id: bool
    ) -> tuple[int | None, bool]:
        """The write's result, and whether it was queued (not yet in the store)."""
        if not self._queue:
            try:
                return await run(), False
            except StoreError as err:
                if not refused(err):
                    raise
                if not self.outage:  # the writes refused together (a tick's saves) begin one
                    self._begin_outage(err)
        placeholder = next(self._next) if returns_id else None
        self._enqueue(_Write(what, run, placeholder))
        return placeholder, True

    def queue(self, what: str, run: Callable[[], Awaitable[None]], *, error: str = "") -> None:
        """Queue a write of a store add-on (the outbox's) behind the others, in order; it runs
        when the store takes writes again (an outage begins, for `error`, if none was)."""

        async def runs() -> None:
            await run()

        begins = not self._queue
        self._enqueue(_Write(what, runs, None))
        if begins:
            self._begin_outage(error or self.outage or "the store refused a write")

    def _enqueue(self, write: _Write) -> None:
        self._queue.append(write)
        if len(self._queue) > self.max_queued:
            self._drop_oldest_sample()

    def _drop_oldest_sample(self) -> None:
        for index, write in enumerate(self._queue):
            if write.what in _DROPPABLE and write.placeholder is None:
                del self._queue[index]
                if not self.dropped:
                    log.warning("store outage: memory full, dropping the oldest samples")
                self.dropped += 1
                return

    async def writable(self, within: float) -> bool:
        """Wait (at most `within` seconds) until writes go through again; whether they do."""
        return await wait_event(self._writable, within)

    def _begin_outage(self, refusal: str | StoreError) -> None:
        self._writable.clear()
        error = str(refusal)
        self.outage, self.outage_cause = error, unwritable_cause(refusal)
        self.outages += 1
        self.saved = 0
        log.warning(
            "store refuses writes: queueing them in memory",
            error=error,
            cause=self.outage_cause,
        )
        for listener in list(self.on_outage):
            listener(error)
        if self._retry is None or self._retry.done():
            self._retry = asyncio.create_task(self._retry_until_clear(), name="store-retry")

    async def _retry_until_clear(self) -> None:
        while self._queue:
            await asyncio.sleep(self.retry_every)
            await self._flush()

    async def _flush(self) -> None:
        """Run the queued writes in order; stop at the first the file still refuses."""
        while self._queue:
            head = self._queue[0]
            try:
                result = await head.run()
            except StoreError as err:
                if refused(err):
                    self.outage, self.outage_cause = str(err), unwritable_cause(err)
                    return
                if getattr(err, "expected_end", False):  # deposed: every queued write is stale
                    self._drop_stale(str(err))
                    return
                log.error("queued write failed", write=head.what, error=str(err))
                result = None
            if head.placeholder is not None:
                self._ids[head.placeholder] = result
            if len(self._queue) == 1:  # the last: read before any write can go straight in
                self.flushed_to = await self._timeline_end()
            self._queue.popleft()
            self.saved += 1
            self.landed += 1
            self.flushing = bool(self._queue)  # (until the last: a refusal may stop it midway)
        if not self.outage:
            return
        log.warning(
            "store takes writes again: queued writes saved",
            error=self.outage,
            saved=self.saved,
            dropped=self.dropped,
        )
        self.outage = ""
        self._writable.set()
        self.held.clear()
        self._held_incidents.clear()
        for listener in list(self.on_outage):
            listener("")
        self.dropped = 0

    async def _timeline_end(self) -> int:
        try:
            async with self.tx(write=False) as conn:
                return await queries.timeline_end(conn)
        except StoreError:
            return 0

    # the timeline entries held while queued

    async def _hold_transition(
        self,
        incident_id: int,
        snapshot: Snapshot,
        entry: TimelineEntry,
        *,
        open_cause: str | None,
        closes: str | None,
    ) -> None:
        incident = await self._held_incident(incident_id, snapshot)
        if incident is None:
            if open_cause is None:
                return
            incident = IncidentRow(
                id=incident_id,
                subject_kind=snapshot.kind,
                subject=snapshot.name,
                opened_at=entry.at,
                closed_at=None,
                symptom=open_cause,
                resolution=None,
                last_state=snapshot.state,
                entries=0,
            )
        incident = replace(
            incident,
            last_state=snapshot.state,
            closed_at=entry.at if closes is not None else incident.closed_at,
            resolution=closes if closes is not None else incident.resolution,
        )
        self._hold(incident, entry)

    async def _held_incident(
        self, incident_id: int, snapshot: Snapshot | None
    ) -> IncidentRow | None:
        """The incident as the held entries left it, else as the store has it (None when the
        store cannot say: a new one)."""
        held = self._held_incidents.get(incident_id)
        if held is not None or incident_id < 0:
            return held
        try:
            return await super().incident(incident_id)
        except StoreError:
            if snapshot is None:
                return None
            return IncidentRow(
                id=incident_id,
                subject_kind=snapshot.kind,
                subject=snapshot.name,
                opened_at=snapshot.since,
                closed_at=None,
                symptom=snapshot.last_reason,
                resolution=None,
                last_state=snapshot.state,
                entries=0,
            )

    def _hold(self, incident: IncidentRow, entry: TimelineEntry) -> None:
        incident = replace(incident, entries=incident.entries + 1)
        self._held_incidents[incident.id] = incident
        row = TimelineRow.of(
            entry.record,
            id=next(self._held_ids),
            incident_id=incident.id,
            at=entry.at,
            subject=entry.subject,
        )
        self.held.append(Held(row=row, incident=incident))
        self._appended()  # the composer composes it from memory

    def held_incident(self, incident_id: int) -> IncidentRow | None:
        """An incident as the held entries left it (a placeholder id's: only here)."""
        return self._held_incidents.get(incident_id)

    def _drop_stale(self, refusal: str) -> None:
        """The fence refused a queued write: another instance leads, and records from its
        epoch on; ours, kept from before, are dropped (the new leader judged afresh)."""
        log.warning(
            "deposed", stops="the writes kept in memory", dropped=self.queued, refused=refusal
        )
        self._queue.clear()
        self.flushing = False
        self.held.clear()
        self._held_incidents.clear()
        self.outage = ""
        self._writable.set()

    def _snap(self, snapshot: Snapshot) -> Snapshot:
        return replace(snapshot, incident_id=self.real_id(snapshot.incident_id))

    # the write API, every call through the queue

    async def save_snapshot(self, snapshot: Snapshot, *, sample: ProbeResult | None = None) -> None:
        parent = super().save_snapshot
        await self._write(
            "save_snapshot",
            lambda: _none(parent(self._snap(snapshot), sample=sample)),
            returns_id=False,
        )

    async def transition(
        self,
        *,
        snapshot: Snapshot,
        entry: TimelineEntry,
        open_cause: str | None = None,
        close_resolution: str | None = None,
        reopen_within: timedelta | None = None,
    ) -> int | None:
        parent = super().transition

        def run() -> Awaitable[int | None]:
            return parent(
                snapshot=self._snap(snapshot),
                entry=entry,
                open_cause=open_cause,
                close_resolution=close_resolution,
                reopen_within=reopen_within,
            )

        may_have_one = open_cause is not None or snapshot.incident_id is not None
        incident_id, queued = await self._submit("transition", run, returns_id=may_have_one)
        if queued and incident_id is not None:
            await self._hold_transition(
                incident_id, snapshot, entry, open_cause=open_cause, closes=close_resolution
            )
        return incident_id

    async def append(self, incident_id: int, entry: TimelineEntry) -> int:
        parent = super().append

        async def run() -> int | None:
            target = self.real_id(incident_id)
            if target is None or target < 0:  # its incident was never opened
                raise StoreError(f"no incident {incident_id}")
            return await parent(target, entry)

        row_id, queued = await self._submit("append", run, returns_id=True)
        if queued:
            incident = await self._held_incident(incident_id, None)
            if incident is not None:
                self._hold(incident, entry)
        return _id(row_id)

    async def supervising(self, started: datetime, subjects: Sequence[Subject]) -> None:
        parent = super().supervising
        await self._write("supervising", lambda: _none(parent(started, subjects)), returns_id=False)

    async def supervised(self, started: datetime, at: datetime) -> None:
        parent = super().supervised
        await self._write("supervised", lambda: _none(parent(started, at)), returns_id=False)

    async def add_sample(self, result: ProbeResult) -> None:
        parent = super().add_sample
        await self._write("add_sample", lambda: _none(parent(result)), returns_id=False)

    async def prune_samples(self, older_than: datetime) -> int:
        parent = super().prune_samples
        return _id(await self._write("prune_samples", lambda: parent(older_than), returns_id=False))

    async def start_attempt(
        self, *, endpoint: str, rule_id: str, incident_id: int | None, at: datetime
    ) -> int:
        parent = super().start_attempt

        def run() -> Awaitable[int]:
            incident = self.real_id(incident_id)
            incident = incident if incident is None or incident >= 0 else None
            return parent(endpoint=endpoint, rule_id=rule_id, incident_id=incident, at=at)

        return _id(await self._write("start_attempt", run, returns_id=True))

    async def finish_attempt(self, attempt_id: int, *, at: datetime, outcome: str) -> None:
        parent = super().finish_attempt

        async def run() -> None:
            real = self.real_id(attempt_id)
            if real is not None and real >= 0:
                await parent(real, at=at, outcome=outcome)

        await self._write("finish_attempt", run, returns_id=False)


async def _none(call: Awaitable[Any]) -> None:
    await call


def _id(value: int | None) -> int:
    """Ids handed back by calls that always return one (0 for a queued prune's count)."""
    return 0 if value is None else value

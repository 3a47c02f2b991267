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

Queued writes are data (`supervisor.record.store.queued`), and with a `SpillPlace` each is also
appended to a spill file on local disk (`supervisor.record.store.spill`), so a process that dies
during the outage loses none: the next start (`recover`) replays the files dead processes left,
each write once. A write from a spill file is numbered (its identity: the file's id and its
number) and taken in one transaction with a row of `spill_writes` that says so, with its result;
a replay skips a write found there and reads its result (the id its placeholder stood for).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

import structlog
from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from supervisor.core.aio import wait_event
from supervisor.core.events import ProbeResult
from supervisor.record.store import queries
from supervisor.record.store.apply import Ids, Result, appends_entry, apply
from supervisor.record.store.engine import open_engine
from supervisor.record.store.errors import StoreError, StoreRefusedError, unwritable_cause
from supervisor.record.store.queued import (
    AppendWrite,
    PruneSamples,
    SaveSnapshot,
    StartAttempt,
    TransitionWrite,
    Write,
)
from supervisor.record.store.records import IncidentRow, Snapshot, TimelineEntry, TimelineRow
from supervisor.record.store.schema import leader_journal, spill_writes
from supervisor.record.store.spill import DeadSpill, SpillFile, SpillPlace, dead_spills
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget

log = structlog.get_logger("supervisor.store")


def refused(err: StoreError) -> bool:
    """Whether `err` is the file refusing (locked, read-only, disk full), worth a retry (as
    opposed to e.g. 'no incident 42')."""
    return isinstance(err, StoreRefusedError)


MAX_QUEUED = 20_000
"""Writes held in memory at most, before the oldest samples are dropped (`Write.DROPPABLE`:
writes whose loss loses no record: a probe sample; a snapshot, or a run's heartbeat, the next
one replaces)."""


BATCH = 200
"""Queued writes taken in one transaction at most (a replay of thousands is a few seconds)."""


@dataclass(eq=False)
class _Origin:
    """Whose queued writes: this process's, or those of a spill file a dead process left."""

    spill_id: str
    ids: Ids = field(default_factory=Ids)  #: its placeholders, mapped as the store takes them
    dead: DeadSpill | None = None
    left: int = 0  #: (a dead process's) its writes still queued
    written: int = 0  #: (a dead process's) taken by the store now
    found: int = 0  #: (a dead process's) found taken already
    began: float = 0.0


@dataclass(frozen=True)
class _Write:
    write: Write
    origin: _Origin
    seq: int | None  #: its number in its origin's spill file (None: in none)

    @property
    def what(self) -> str:
        return self.write.NAME

    @property
    def placeholder(self) -> int | None:
        return getattr(self.write, "placeholder", None)


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
        spill: SpillPlace | None = None,
    ) -> None:
        super().__init__(engine, path)
        self.retry_every = retry_every
        self.max_queued = max_queued
        self.batch = BATCH  #: queued writes taken in one transaction at most
        #: [leadership] awaited before each batch of queued writes is taken: the lease's
        #: renewal under way goes first (`Elector.quiet`)
        self.before_batch: Callable[[], Awaitable[None]] | None = None
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
        #: called with each of this process's queued writes the store took, and its result
        self.after_apply: list[Callable[[Write, Result], None]] = []
        self._queue: deque[_Write] = deque()
        self._writable = asyncio.Event()  #: set while writes go through
        self._writable.set()
        self._mine = _Origin(spill_id=uuid.uuid4().hex)  #: this process's writes
        self.row_ids = self._mine.ids.rows  #: outbox rows kept in memory, mapped once taken
        self._next = itertools.count(-1, -1)
        self._seq = itertools.count(1)
        self._retry: asyncio.Task[None] | None = None
        self.spill_place = spill
        #: this process's spill file (made at the first refused write, gone once all is saved)
        self.spill = (
            None
            if spill is None
            else SpillFile(spill, store=str(path), spill_id=self._mine.spill_id)
        )
        self._forget: list[str] = []  #: spill ids whose `spill_writes` rows may go
        self._in_flight = 0  #: the queue's first writes being written now
        self._retrying = False  #: the retry task is writing (not waiting)
        self._closing = False

    @classmethod
    async def open(
        cls, path: StoreTarget, *, create: bool = True, spill: SpillPlace | None = None
    ) -> ResilientStore:
        """With `spill`, refused writes are kept on disk too, and `recover` replays what a dead
        process kept."""
        return cls(await open_engine(path, create=create), path, spill=spill)

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
        kept = "in memory"
        spill = self.spill
        if spill is not None and spill.problem:
            kept = f"in memory only (the spill file cannot be written either: {spill.problem})"
        elif spill is not None and spill.exists:
            kept = f"in memory and in {spill.path}"
        return (
            f"the store cannot be written: {self.outage_cause} ({self.outage}); "
            f"{self.queued} records kept {kept}, written when it returns{dropped}"
        )

    def real_id(self, value: int | None) -> int | None:
        """The store's id for `value` (itself unless it is a flushed placeholder)."""
        return self._mine.ids.real(value)

    def depose(self, *, epoch: int, holder: str) -> None:
        """As `Store.depose`; a retry waiting on the store that does not answer is cut (what
        it would write is a deposed leader's: dropped at the close)."""
        super().depose(epoch=epoch, holder=holder)
        if self._retry is not None and not self._retry.done():
            self._retry.cancel()

    async def close(self) -> None:
        if self._retry is not None:
            self._closing = True
            if not self._retrying:  # waiting for its next try: cut short (a write is never cut)
                self._retry.cancel()
            await asyncio.gather(self._retry, return_exceptions=True)
        if self._queue:
            await self._flush()
        if self._queue:
            self._closed_unsaved()
        await super().close()

    def _closed_unsaved(self) -> None:
        """The store closes with writes it never took: those in a spill file wait for the next
        start; only the others are lost."""
        lost = sum(1 for w in self._queue if w.seq is None)
        spill = self.spill
        if spill is not None and spill.exists:
            log.warning(
                "store closed with writes unsaved: kept in the spill file for the next start",
                store=str(self.path),
                spill=str(spill.path),
                kept=self.queued - lost,
            )
            spill.release()
        if lost:
            log.error("store closed with writes unsaved", store=str(self.path), lost=lost)
        for origin in {w.origin for w in self._queue if w.origin.dead is not None}:
            assert origin.dead is not None
            origin.dead.release()

    # replaying what a dead process kept

    async def recover(self) -> None:
        """Write what the spill files of dead processes hold (for this store), in order, each
        write once, before anything new is written; each file goes once the store holds all of
        it. While the store refuses them they wait in the queue, as refused writes do."""
        place = self.spill_place
        if place is None:
            return
        for dead in dead_spills(place, store=str(self.path)):
            if await self._superseded(dead):
                continue
            origin = _Origin(
                spill_id=dead.spill_id, dead=dead, left=len(dead.writes), began=time.monotonic()
            )
            log.warning(
                "replaying the writes a process left in its spill file",
                spill=str(dead.path),
                pid=dead.pid,
                started=dead.started,
                writes=len(dead.writes),
                unreadable=dead.unreadable,
            )
            if not dead.writes:
                self._replayed(origin)
            for seq, write in dead.writes:
                self._queue.append(_Write(write, origin, seq))
        if not self._queue:
            return
        refusal = await self._flush()
        if refusal is not None and self._writable.is_set():  # the first refusal: one begins
            self._begin_outage(refusal)

    # the queue

    async def _write(self, write: Write) -> int | None:
        """Every write of the `Store` through the queue (`_submit`); a timeline entry queued is
        held too."""
        found, queued = await self._submit(write)
        if queued and found is not None and isinstance(write, TransitionWrite):
            await self._hold_transition(found, write)
        elif queued and isinstance(write, AppendWrite):
            incident = await self._held_incident(write.incident_id, None)
            if incident is not None:
                self._hold(incident, write.entry)
        return found

    async def _submit(
        self, write: Write, run: Callable[[], Awaitable[int | None]] | None = None
    ) -> tuple[int | None, bool]:
        """Run the write at once (by `run` when given), or queue it when writes queue or the
        store refuses it: its result (a placeholder when queued), and whether it was queued."""
        if not self._queue:
            try:
                if run is None:
                    return await self._write_now(write, self._mine.ids), False
                return await run(), False
            except StoreError as err:
                if not refused(err):
                    raise
                if not self.outage:  # the writes refused together (a tick's saves) begin one
                    self._begin_outage(err)
        placeholder = None
        if isinstance(write, AppendWrite | StartAttempt) or (
            # a transition that may open an incident or names one returns its id
            isinstance(write, TransitionWrite)
            and (write.open_cause is not None or write.snapshot.incident_id is not None)
        ):
            placeholder = next(self._next)
            write = replace(write, placeholder=placeholder)
        self._enqueue(write)
        return placeholder, True

    def queue(self, write: Write, *, error: str = "") -> None:
        """Queue a write of a store add-on (the outbox's) behind the others, in order; it runs
        when the store takes writes again (an outage begins, for `error`, if none was)."""
        begins = not self._queue
        self._enqueue(write)
        if begins:
            self._begin_outage(error or self.outage or "the store refused a write")

    def _enqueue(self, write: Write) -> None:
        seq = next(self._seq)
        if self.spill is not None and not self.spill.exists:
            self.spill.epoch, self.spill.holder = self.fence_epoch, self.fence_holder
        kept = self.spill is not None and self.spill.add(seq, write)
        self._queue.append(_Write(write, self._mine, seq if kept else None))
        if len(self._queue) > self.max_queued:
            self._drop_oldest_sample()

    def _drop_oldest_sample(self) -> None:
        for index, queued in enumerate(self._queue):
            if index < self._in_flight:  # being written now
                continue
            if queued.write.DROPPABLE and queued.placeholder is None:
                del self._queue[index]
                if not self.dropped:
                    log.warning("store outage: memory full, dropping the oldest samples")
                self.dropped += 1
                self._settled(queued)
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
        while self._queue and not self._closing:
            await asyncio.sleep(self.retry_every)
            self._retrying = True
            try:
                await self._flush()
            finally:
                self._retrying = False

    async def _flush(self) -> StoreError | None:
        """Run the queued writes in order, up to `batch` in one transaction; stop at the first
        the store still refuses (that refusal is returned)."""
        single = 0  #: writes to take one per transaction (a batch of them failed)
        while self._queue:
            if self.before_batch is not None:
                await self.before_batch()
            batch = list(itertools.islice(self._queue, 1 if single else self.batch))
            try:
                results, end = await self._take(batch)
            except StoreError as err:
                if refused(err):
                    self.outage, self.outage_cause = str(err), unwritable_cause(err)
                    return err
                if getattr(err, "expected_end", False):  # deposed: every queued write is stale
                    self._drop_stale(str(err))
                    return None
                if len(batch) > 1:  # one of them cannot be written: each alone, to know which
                    single = len(batch)
                    continue
                log.error("queued write failed", write=batch[0].what, error=str(err))
                batch[0].origin.ids.learn(batch[0].write, None)
                results, end = [None], await self._timeline_end()
            single = max(0, single - len(batch))
            # nothing awaited from the commit to the hooks: a message kept in memory is never
            # seen both there and in the table (it would be sent twice)
            if len(self._queue) == len(batch):  # the last: as it ended in its transaction
                self.flushed_to = end
            for queued, result in zip(batch, results, strict=True):
                self._queue.popleft()
                if queued.origin is self._mine:
                    for hook in list(self.after_apply):
                        hook(queued.write, result)
                self._settled(queued)
            self.saved += len(batch)
            self.landed += len(batch)
            self.flushing = bool(self._queue)  # (until the last: a refusal may stop it midway)
        if self.spill is not None and self.spill.exists:
            self.spill.remove()  # first: a crash between the two replays it, skipping each
            self._forget.append(self._mine.spill_id)
        await self._forget_taken()
        if not self.outage:
            return None
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
        return None

    async def _take(self, batch: list[_Write]) -> tuple[list[Result], int]:
        """Queued writes in one transaction, in order, each placeholder learned as it is
        written (the writes after it name it); one from a spill file is recorded as taken there
        too, or found taken already (its result read back). Nothing is taken when it fails, and
        nothing learned: what the writes learned is seen by others only once they committed.
        Their results, and the timeline's last id with them."""
        results: list[Result] = []
        found: list[bool] = []
        drafts: dict[_Origin, Ids] = {}
        self._in_flight = len(batch)
        try:
            async with self._tx(write=True) as conn:
                taken = await _taken(conn, batch)
                made = []
                for queued in batch:
                    origin = queued.origin
                    if origin not in drafts:
                        drafts[origin] = origin.ids.draft()
                    ids = drafts[origin]
                    identity = (origin.spill_id, queued.seq)
                    if identity in taken:
                        result = taken[identity]
                    else:
                        result = await apply(conn, queued.write, ids)
                        if queued.seq is not None:
                            made.append(
                                {"spill": origin.spill_id, "seq": queued.seq, "result": result}
                            )
                    ids.learn(queued.write, result)
                    results.append(result)
                    found.append(identity in taken)
                if made:
                    await conn.execute(insert(spill_writes), made)
                end = await queries.timeline_end(conn)
        finally:
            self._in_flight = 0
        for origin, ids in drafts.items():
            origin.ids.adopt(ids)
        appended = False
        for queued, result, was_found in zip(batch, results, found, strict=True):
            if was_found:
                queued.origin.found += 1
                continue
            queued.origin.written += 1
            appended = appended or appends_entry(queued.write, result)
        if appended:  # the composer wakes once for the batch
            self._appended()
        return results, end

    def _settled(self, queued: _Write) -> None:
        """A queued write left the queue (taken, or dropped)."""
        origin = queued.origin
        if origin.dead is None:
            return
        origin.left -= 1
        if origin.left == 0:
            self._replayed(origin)

    def _replayed(self, origin: _Origin) -> None:
        assert origin.dead is not None
        origin.dead.done()  # first: a crash between the two replays it, skipping each
        self._forget.append(origin.spill_id)
        log.warning(
            "spill file replayed",
            spill=str(origin.dead.path),
            written=origin.written,
            already_written=origin.found,
            seconds=round(time.monotonic() - origin.began, 3),
        )

    async def _superseded(self, dead: DeadSpill) -> bool:
        """Whether another instance led between the dead process's epoch and ours: its writes
        are a deposed leader's, dropped as a living one drops them (the leader since judged
        afresh, and its records are newer). The file goes."""
        if dead.epoch is None or self.fence_epoch is None:
            return False
        try:
            async with self.tx(write=False) as conn:
                found = await conn.execute(
                    select(leader_journal.c.holder, leader_journal.c.epoch).where(
                        leader_journal.c.event == "took_over",
                        leader_journal.c.epoch > dead.epoch,
                        leader_journal.c.epoch < self.fence_epoch,
                        leader_journal.c.holder != dead.holder,
                    )
                )
                since = found.first()
        except StoreError:  # cannot tell: replayed (under our epoch, as any write)
            return False
        if since is None:
            return False
        log.warning(
            "spill file of a replaced leader: dropped",
            spill=str(dead.path),
            dropped=len(dead.writes),
            why=f"{since.holder} led with epoch {since.epoch} after its epoch {dead.epoch}",
        )
        dead.done()
        return True

    async def _forget_taken(self) -> None:
        """The `spill_writes` rows of spill files that are gone (a refusal leaves them for the
        next time: a row left behind costs nothing)."""
        while self._forget:
            try:
                async with self._tx(write=True) as conn:
                    await conn.execute(
                        delete(spill_writes).where(spill_writes.c.spill == self._forget[0])
                    )
            except StoreError:
                return
            self._forget.pop(0)

    async def _timeline_end(self) -> int:
        try:
            async with self.tx(write=False) as conn:
                return await queries.timeline_end(conn)
        except StoreError:
            return 0

    # the timeline entries held while queued

    async def _hold_transition(self, incident_id: int, write: TransitionWrite) -> None:
        snapshot, entry, closes = write.snapshot, write.entry, write.close_resolution
        incident = await self._held_incident(incident_id, snapshot)
        if incident is None:
            if write.open_cause is None:
                return
            incident = _unstored(
                incident_id, snapshot, opened_at=entry.at, symptom=write.open_cause
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
            return _unstored(
                incident_id, snapshot, opened_at=snapshot.since, symptom=snapshot.last_reason
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
        for origin in {w.origin for w in self._queue if w.origin.dead is not None}:
            assert origin.dead is not None
            origin.dead.release()  # not ours to drop: replayed when this instance leads again
        if self.spill is not None:
            self.spill.remove()
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
        await self._submit(
            SaveSnapshot(snapshot=snapshot, sample=sample),
            lambda: parent(self._snap(snapshot), sample=sample),
        )

    async def append(self, incident_id: int, entry: TimelineEntry) -> int:
        if not self._queue and self._mine.ids.stored(incident_id) is None:
            raise StoreError(f"no incident {incident_id}")  # its incident was never opened
        return await super().append(incident_id, entry)

    async def prune_samples(self, older_than: datetime) -> int:
        parent = super().prune_samples
        write = PruneSamples(older_than=older_than)
        found, _ = await self._submit(write, lambda: parent(older_than))
        return _id(found)

    async def finish_attempt(self, attempt_id: int, *, at: datetime, outcome: str) -> None:
        if self._queue or self._mine.ids.stored(attempt_id) is not None:
            await super().finish_attempt(attempt_id, at=at, outcome=outcome)
        # else its start never reached the store: nothing to finish


async def _taken(
    conn: AsyncConnection, batch: list[_Write]
) -> dict[tuple[str, int | None], Result]:
    """The writes of `batch` the store took already (a spill replayed after a crash in the
    middle of a replay or a flush): (spill id, number) -> its result. One query per spill."""
    spans: dict[str, list[int]] = {}
    for queued in batch:
        if queued.seq is not None:
            spans.setdefault(queued.origin.spill_id, []).append(queued.seq)
    taken: dict[tuple[str, int | None], Result] = {}
    for spill, seqs in spans.items():
        found = await conn.execute(
            select(spill_writes.c.seq, spill_writes.c.result).where(
                spill_writes.c.spill == spill, spill_writes.c.seq.between(min(seqs), max(seqs))
            )
        )
        taken |= {(spill, row.seq): row.result for row in found}
    return taken


def _unstored(
    incident_id: int, snapshot: Snapshot, *, opened_at: datetime, symptom: str
) -> IncidentRow:
    """An open incident of the snapshot's subject as the store does not have it (yet)."""
    return IncidentRow(
        id=incident_id,
        subject_kind=snapshot.kind,
        subject=snapshot.name,
        opened_at=opened_at,
        closed_at=None,
        symptom=symptom,
        resolution=None,
        last_state=snapshot.state,
        entries=0,
    )


def _id(value: int | None) -> int:
    """Ids handed back by calls that always return one (0 for a queued prune's count)."""
    return 0 if value is None else value

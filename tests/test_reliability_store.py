"""The store's file refuses writes for a while (another process holds its write lock): probing
goes on, the error is reported, and every queued write lands, in order, once it clears."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
import threading
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeOutcome as ProbeOutcome
from supervisor.core.events import ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.judge.machine import State, Trigger
from supervisor.probe import run_probe
from supervisor.record.store import engine as store_engine
from supervisor.record.store import notify_rows
from supervisor.record.store import resilient as resilient_module
from supervisor.record.store.apply import Ids, Result, apply
from supervisor.record.store.errors import (
    SERVER_DOWN,
    StoreError,
    StoreRefusedError,
    server_unreachable,
    unwritable_cause,
)
from supervisor.record.store.history import ms
from supervisor.record.store.outbox import OutboxDraft, OutboxStore
from supervisor.record.store.queued import SaveSnapshot, Write
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.resilient import ResilientStore, refused
from supervisor.record.store.schema import supervision
from supervisor.record.store.store import Store
from supervisor.record.timeline.control import Note
from supervisor.record.timeline.state import Transition
from supervisor.tell.telegram.composer import Composer
from supervisor.tell.telegram.memory import Settings
from tests.helpers import eventually, write_fleet

pytestmark = pytest.mark.slow

CHAT = 1001
FULL = "database or disk is full"


@pytest.fixture(autouse=True)
def _short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused write fails after 100 ms instead of the daemon's 5 s (same code path)."""
    monkeypatch.setattr(store_engine, "BUSY_TIMEOUT_MS", 100)


class WriteLock:
    """Another process's view: a plain sqlite3 connection holding the file's write lock."""

    def __init__(self, db: Path) -> None:
        self._conn = sqlite3.connect(db, isolation_level=None, timeout=10, check_same_thread=False)

    def take(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self._conn.execute("COMMIT")
        self._conn.close()


async def test_a_locked_store_queues_writes_and_loses_none_once_it_clears(tmp_path: Path) -> None:
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="m")
    await sim.start("127.0.0.1", 0)
    port = int(sim.url.rsplit(":", 1)[1])
    (tmp_path / "playbooks").mkdir()
    config = write_fleet(tmp_path, {"m": {"kind": "openai", "url": sim.url, "model": "m"}})
    db = tmp_path / "state" / "supervisor.db"
    probed: list[ProbeResult] = []
    client = HttpClient()

    async def prober(endpoint: Endpoint, tier: Tier) -> ProbeResult:
        result = await run_probe(endpoint, tier, client, clock=SystemClock())
        probed.append(result)
        return result

    daemon = Supervisor(load_config(config), prober=prober)
    await daemon.start()
    store, worker = daemon.store, daemon.workers["m"]
    assert isinstance(store, ResilientStore)
    store.retry_every = 0.05
    reported: list[str] = []
    store.on_outage.append(reported.append)
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        lock = WriteLock(db)
        await asyncio.to_thread(lock.take)
        try:
            await eventually(lambda: store.queued > 0, what="a queued write")
            assert store.outage == f"cannot write to store {db}: database is locked"
            await sim.stop()  # the endpoint fails while nothing can be written
            await eventually(lambda: worker.state is State.DOWN, what="down (in memory)")
            placeholder = worker.record.incident_id
            assert placeholder is not None
            assert placeholder < 0  # the store will give it its id when the file clears
            await sim.start("127.0.0.1", port)
            await eventually(lambda: worker.state is State.HEALTHY, what="healthy again")
            assert store.queued > 0
            assert store.outage != ""
        finally:
            await asyncio.to_thread(lock.release)
        await eventually(lambda: store.queued == 0, what="the queue flushed")
        seen = len(probed)  # the last may have returned, its sample not yet handed to the store

        async def every_probe_saved() -> bool:
            return len(await store.samples("m", limit=100_000)) >= seen

        await eventually(every_probe_saved, what=f"the {seen} probes' samples in the store")
        assert daemon.remediator is not None
        await daemon.remediator.wait()
        incidents = await store.incidents(subject="m")
        timeline = await store.timeline(incidents[0].id)
        saved = await store.samples("m", limit=100_000)
    finally:
        await daemon.stop()
        await client.aclose()
        await sim.stop()
    assert reported == [f"cannot write to store {db}: database is locked", ""]
    assert store.outage == ""
    assert store.outages == 1
    assert [(i.is_open, i.cause) for i in incidents] == [(False, "connection refused")]
    transitions = [
        (r.record.source, r.record.dest) for r in timeline if isinstance(r.record, Transition)
    ]
    assert transitions == [("healthy", "down"), ("down", "healthy")]
    saved_order = [(s.at, s.tier) for s in reversed(saved)][:seen]
    assert saved_order == [(p.at, p.tier.value) for p in probed[:seen]]


async def test_a_write_that_is_wrong_is_not_queued(tmp_path: Path) -> None:
    store = await ResilientStore.open(tmp_path / "s.db")
    try:
        entry = TimelineEntry(at=SystemClock().now(), subject="m", record=Note(text="hello"))
        with pytest.raises(StoreError, match=r"^no incident 42$"):
            await store.append(42, entry)
        assert store.queued == 0
        assert store.outage == ""
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("error", "retry"),
    [
        (StoreRefusedError("cannot write to store /x.db: database is locked"), True),
        (StoreRefusedError("cannot read store /x.db: disk I/O error"), True),
        (StoreError("no incident 42"), False),
        (StoreError("cannot write to store /x.db: worded like a refusal, but it is not"), False),
    ],
)
def test_only_the_file_refusing_is_retried(error: StoreError, retry: bool) -> None:
    """Told apart by the error's type, never by its words."""
    assert refused(error) is retry


async def test_closing_with_the_file_still_locked_reports_the_lost_writes(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    store = await ResilientStore.open(db)
    store.retry_every = 60.0
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    try:
        entry = TimelineEntry(at=SystemClock().now(), subject="m", record=Note(text="x"))
        await store.prune_samples(SystemClock().now())
        assert store.queued == 1
        assert await store.append(-1, entry) == -1  # a placeholder id: nothing was written yet
        await store.close()
        assert store.queued == 2
    finally:
        await asyncio.to_thread(lock.release)
    reopened = await Store.open(db)
    try:
        assert await reopened.incidents() == []
    finally:
        await reopened.close()


async def test_a_tick_of_saves_the_store_refuses_begins_one_outage(tmp_path: Path) -> None:
    """Fifty endpoints' saves refused together (one group: `supervisor.record.store.grouped`)
    are one outage, told once (the chat says 'the store cannot be written' once), and all 50
    are kept to be written."""
    db = tmp_path / "s.db"
    store = await ResilientStore.open(db)
    store.retry_every = 60.0
    told: list[str] = []
    store.on_outage.append(told.append)
    now = SystemClock().now()
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    try:
        await asyncio.gather(
            *(
                store.save_snapshot(
                    Snapshot(
                        kind=SubjectKind.ENDPOINT,
                        name=f"e{i}",
                        state="ok",
                        since=now,
                        updated_at=now,
                    )
                )
                for i in range(50)
            )
        )
        assert (store.outages, store.queued) == (1, 50)
        assert told == [f"cannot write to store {db}: database is locked"]
    finally:
        await asyncio.to_thread(lock.release)
        await store.close()
    reopened = await Store.open(db)
    try:
        assert len(await reopened.snapshots()) == 50
    finally:
        await reopened.close()


async def test_the_queue_is_bounded_and_drops_the_oldest_samples_never_a_record(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    store = await ResilientStore.open(db, create=True)
    store.max_queued = 3
    store.retry_every = 3600.0  # nothing flushed until the spec closes the store
    now = datetime.now(UTC)
    snapshot = Snapshot(
        kind=SubjectKind.ENDPOINT, name="m", state="down", since=now, updated_at=now
    )
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    try:
        incident = await store.transition(
            snapshot=snapshot,
            entry=TimelineEntry(at=now, subject="m", record=Note(text="opened")),
            open_cause="connection refused",
        )
        assert incident is not None
        for second in range(4):
            await store.add_sample(_sample(now + timedelta(seconds=second)))
        await store.append(incident, TimelineEntry(at=now, subject="m", record=Note(text="more")))
        assert (store.queued, store.dropped) == (3, 3)  # the transition, the last sample, the note
        assert store.problem().endswith(
            "; 3 records kept in memory, written when it returns; 3 oldest samples dropped"
        )
    finally:
        await asyncio.to_thread(lock.release)
    await store.close()  # the file takes them: every record, the newest sample
    async with await Store.open(db, create=False) as reader:
        [opened] = await reader.incidents(subject="m")
        notes = [r.summary for r in await reader.timeline(opened.id)]
        samples = await reader.samples("m")
    assert notes == ["opened", "more"]
    assert [s.at for s in samples] == [now + timedelta(seconds=3)]


def _sample(at: datetime) -> ProbeResult:
    return ProbeResult(
        endpoint="m",
        tier=Tier.LIVENESS,
        check="health",
        outcome=ProbeOutcome.FAIL,
        reason="connection refused",
        at=at,
        latency_s=0.01,
    )


def _sqlite_connections_left() -> int:
    """aiosqlite connections still open in this process (each runs a thread of its own, which
    ends soon after its connection is closed: given 5 s to)."""
    threads = [t for t in threading.enumerate() if "_connection_worker_thread" in t.name]
    for thread in threads:
        thread.join(timeout=5)
    return sum(t.is_alive() for t in threads)


async def test_a_read_after_close_opens_and_closes_its_own_connection(tmp_path: Path) -> None:
    """A spec (or the CLI) may read a stopped daemon's store: the read answers from the file,
    and leaves no connection open behind it (the closed engine would open one again and nobody
    would close it: a ResourceWarning in some later test)."""
    store = await ResilientStore.open(tmp_path / "s.db")
    now = datetime.now(UTC)
    await store.transition(
        snapshot=Snapshot(
            kind=SubjectKind.ENDPOINT, name="m", state="down", since=now, updated_at=now
        ),
        entry=TimelineEntry(at=now, subject="m", record=Note(text="went down")),
        open_cause="connection refused",
    )
    await store.close()
    assert _sqlite_connections_left() == 0
    assert [i.cause for i in await store.incidents()] == ["connection refused"]
    assert [s.state for s in await store.snapshots()] == ["down"]
    assert _sqlite_connections_left() == 0


async def test_a_runs_start_and_heartbeat_queue_while_the_store_refuses(tmp_path: Path) -> None:
    """The schedule's records of supervised time (the run's start, its heartbeat) go through the
    queue like every write: refused, they wait and land once the file clears (they used to fail
    their job, logged at error level by the scheduler)."""
    db = tmp_path / "s.db"
    store = await ResilientStore.open(db)
    store.retry_every = 0.05
    started = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    try:
        await store.supervising(started, [(SubjectKind.ENDPOINT, "m", "healthy")])
        await store.supervised(started, started + timedelta(minutes=1))
        assert store.queued == 2
    finally:
        await asyncio.to_thread(lock.release)
    await eventually(lambda: store.queued == 0, what="the queue flushed")
    async with store.tx(write=False) as conn:
        rows = (await conn.execute(select(supervision.c.started_ms, supervision.c.seen_ms))).all()
    await store.close()
    minute = 60_000
    assert [tuple(r) for r in rows] == [(ms(started), ms(started) + minute)]


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        ("cannot write to store s.db: database or disk is full", "the disk is full"),
        (
            "cannot write to store s.db: attempt to write a readonly database",
            "no permission to write it",
        ),
        ("cannot write to store s.db: database is locked", "another process holds its write lock"),
        (
            "cannot write to store pg://db/f: [Errno 111] Connect call failed",
            "the database server is down or unreachable",
        ),
        (
            "cannot write to store pg://db/f: [Errno 104] Connection reset by peer",
            "the database server is down or unreachable",
        ),
        (
            "cannot write to store pg://db/f: [Errno 32] Broken pipe",
            "the database server is down or unreachable",
        ),
        (
            "cannot write to store pg://db/f: the database system is shutting down",
            "the database server is down or unreachable",
        ),
        ("cannot write to store s.db: something new", "cannot write to store s.db: something new"),
    ],
)
def test_why_the_store_cannot_be_written_in_a_few_words(error: str, cause: str) -> None:
    """The cause a person reads in the chat, /healthz and `status`: the driver's words mapped
    to a few plain ones; words it does not know are shown as they are."""
    assert unwritable_cause(error) == cause


class _PgError(Exception):
    """A PostgreSQL error as SQLAlchemy's asyncpg adapter hands it on: with its SQLSTATE."""

    def __init__(self, words: str, sqlstate: str) -> None:
        super().__init__(words)
        self.sqlstate = sqlstate


def _wrapped(orig: BaseException) -> BaseException:
    return DBAPIError("SELECT 1", None, orig)


@pytest.mark.parametrize(
    ("error", "unreachable"),
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed ('127.0.0.1', 5)"), True),
        (ConnectionResetError(errno.ECONNRESET, "words never seen before"), True),
        (BrokenPipeError(errno.EPIPE, "?"), True),
        (ConnectionError("unexpected connection_lost() call"), True),  # asyncpg, mid-handshake
        (OSError(errno.EHOSTUNREACH, "?"), True),
        (TimeoutError(), True),
        (_wrapped(_PgError("the database system is starting up", "57P03")), True),
        (_wrapped(_PgError("terminating connection due to administrator command", "57P01")), True),
        (_wrapped(_PgError("connection was closed in the middle of operation", "08003")), True),
        (OSError(errno.ENOSPC, "No space left on device"), False),
        (_wrapped(_PgError("duplicate key value violates unique constraint", "23505")), False),
        (_wrapped(sqlite3.OperationalError("database is locked")), False),
    ],
)
def test_a_server_down_is_known_by_the_errors_type(error: BaseException, unreachable: bool) -> None:
    """Whether the database server is down or unreachable comes from the driver's error's type
    (errno, SQLSTATE), not its words: a refusal that says so by type reads as that cause,
    whatever the words."""
    assert server_unreachable(error) is unreachable
    refusal = StoreRefusedError(
        f"cannot write to store pg://db/f: {error}",
        cause=SERVER_DOWN if server_unreachable(error) else "",
    )
    if unreachable:
        assert unwritable_cause(refusal) == SERVER_DOWN


async def test_a_composer_started_while_the_store_refuses_writes_still_tells_the_chat(
    tmp_path: Path,
) -> None:
    """The composer's first act on a new store is to write its cursor. Refused (the disk filled
    between the lead and the notifier's start), that write used to end the composer's task: no
    alert was composed, ever. Now the cursor is read, its write queued, and a held 'down' is
    composed from memory; the cursor lands with the rest once the file clears."""
    db = tmp_path / "s.db"
    store = await ResilientStore.open(db)
    store.retry_every = 0.05
    outbox = OutboxStore(store)
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    composer = Composer(
        outbox, SystemClock(), Settings(remind_every=timedelta(hours=1)), [CHAT], every=0.05
    )
    store.on_timeline.append(composer.wake)
    task = asyncio.create_task(composer.run())
    try:
        now = datetime.now(UTC)
        down = Transition(
            source=State.HEALTHY,
            dest=State.DOWN,
            trigger=Trigger.DOWN,
            note="connection refused",
            probes=(),
        )
        snapshot = Snapshot(
            kind=SubjectKind.ENDPOINT, name="m", state="down", since=now, updated_at=now
        )
        held = await store.transition(
            snapshot=snapshot,
            entry=TimelineEntry(at=now, subject="m", record=down),
            open_cause="connection refused",
        )
        assert held is not None
        assert held < 0  # a placeholder: the store took nothing

        def told() -> list[str]:
            return [r.text for r in outbox.memory.pending()]

        await eventually(lambda: told() != [], what="the 'down' composed from memory")
        assert not task.done()
        assert [t.split("\n")[0] for t in told()] == ["🔴 <b>m</b> is down: connection refused"]
        assert await outbox.cursor() is None  # its write waits in the queue
    finally:
        await asyncio.to_thread(lock.release)
    await eventually(lambda: store.queued == 0, what="the queue flushed")
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task
    assert await outbox.cursor() is not None
    rows = await outbox.messages()
    await store.close()
    said = [r.text.split("\n")[0] for r in rows]
    assert said == ["🔴 <b>m</b> is down: connection refused"]


async def test_held_entries_the_store_takes_between_a_rounds_read_and_write_are_said_once(
    tmp_path: Path,
) -> None:
    """A composer's round reads the held 'down' (the store refuses writes), the store takes its
    queue, then the round writes what it composed: straight to the table now, with its cursor
    before the 'down', which the table has by then. The cursor moves past it (to where the
    timeline ended when the store took its last queued write), or the next round would read it
    from the table and say it twice."""
    db = tmp_path / "s.db"
    store = await ResilientStore.open(db)
    store.retry_every = 0.05
    outbox = OutboxStore(store)
    cursor = await outbox.start_cursor()
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    try:
        now = datetime.now(UTC)
        snapshot = Snapshot(
            kind=SubjectKind.ENDPOINT, name="m", state="down", since=now, updated_at=now
        )
        down = Transition(
            source=State.HEALTHY, dest=State.DOWN, trigger=Trigger.DOWN,
            note="connection refused", probes=(),
        )  # fmt: skip
        await store.transition(
            snapshot=snapshot,
            entry=TimelineEntry(at=now, subject="m", record=down),
            open_cause="connection refused",
        )
        batch = await outbox.batch(cursor)
        assert [(r.id < 0, r.subject) for r in batch.rows] == [(True, "m")]
    finally:
        await asyncio.to_thread(lock.release)
    await eventually(lambda: store.queued == 0, what="the queue flushed")
    assert store.flushed_to > cursor
    draft = OutboxDraft(kind="opened", text="m is down", incident_id=None)
    await outbox.commit(drafts=[draft], chat_ids=[CHAT], states={}, at=now, cursor=cursor)
    assert (await outbox.batch(cursor)).rows == []  # the 'down' is not read again
    assert await outbox.cursor() == store.flushed_to
    assert [r.text for r in await outbox.messages()] == ["m is down"]
    await store.close()


async def _kept_in_memory(
    db: Path, *, retry_every: float
) -> tuple[ResilientStore, OutboxStore, WriteLock, datetime]:
    """A store whose file another process holds locked, and one message kept in memory."""
    store = await ResilientStore.open(db)
    store.retry_every = retry_every
    outbox = OutboxStore(store)
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    now = datetime.now(UTC)
    draft = OutboxDraft(kind="opened", text="m is down", incident_id=None)
    await outbox.commit(drafts=[draft], chat_ids=[CHAT], states={}, at=now)
    return store, outbox, lock, now


async def test_a_message_sent_while_a_flush_that_would_store_it_fails_is_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message kept in memory is sent while the store's flush, which has just inserted it,
    is still in its transaction; the transaction then fails (the disk filled up). The mark must
    land on the row in memory: a flush used to let everyone see the id the store was giving the
    row before it committed, so the mark went to a row that never came to be, and the row kept
    in memory, still unsent, was sent a second time (a loaded run of the crash spec)."""
    db = tmp_path / "s.db"
    store, outbox, lock, now = await _kept_in_memory(db, retry_every=0.05)
    [kept] = outbox.memory.pending()
    snapshot = Snapshot(
        kind=SubjectKind.ENDPOINT, name="m", state="down", since=now, updated_at=now
    )
    await store.save_snapshot(snapshot)  # queued behind the message
    inside, go_on = asyncio.Event(), asyncio.Event()

    async def fills_up_after_the_rows(conn: AsyncConnection, write: Write, ids: Ids) -> Result:
        if isinstance(write, SaveSnapshot) and not inside.is_set():  # the rows are in
            inside.set()
            await go_on.wait()
            raise OperationalError("INSERT", None, sqlite3.OperationalError(FULL))
        return await apply(conn, write, ids)

    monkeypatch.setattr(resilient_module, "apply", fills_up_after_the_rows)
    await asyncio.to_thread(lock.release)
    await inside.wait()  # the row inserted, the transaction not committed
    await outbox.part_sent(kept.id, parts=1, message_id=7, at=now, done=True)
    store.retry_every = 3600  # (the next flush waits: what is left to send is read before it)
    go_on.set()
    await eventually(lambda: FULL in store.outage, what="the flush refused")
    assert await outbox.pending() == []  # sent once: nothing left to send
    await store.close()  # (its last flush)
    async with await Store.open(db, create=False) as reader:
        rows = await OutboxStore(reader).messages()
    assert [(r.text, r.message_id, r.sent_at is not None) for r in rows] == [(kept.text, 7, True)]


async def test_a_message_the_store_took_before_its_flush_resumed_is_pending_once(
    tmp_path: Path,
) -> None:
    """The store committed a flush that holds a message kept in memory, and the flush has not
    resumed yet to say so (the commit ran in the driver's thread; the sender's read came
    first): the table and memory both hold it for a moment. It is pending once, from memory,
    or the sender sends both."""
    db = tmp_path / "s.db"
    store, outbox, lock, _ = await _kept_in_memory(db, retry_every=3600)  # no flush of its own
    await asyncio.to_thread(lock.release)
    [kept] = outbox.memory.pending()
    async with await Store.open(db, create=False) as other, other.tx(write=True) as conn:
        await notify_rows.insert_row(conn, kept, None)  # as the flush inserts it
    assert [(r.id, r.text) for r in await outbox.pending()] == [(kept.id, kept.text)]
    await store.close()


async def test_a_replay_waits_for_the_renewal_under_way_before_each_batch(tmp_path: Path) -> None:
    """Every queued write taken back passes the fence, which locks the lease row shared, and
    the renewal locks it alone: before each batch the replay awaits `before_batch` (the
    leader's `Elector.quiet`), so a renewal due waits for one batch at most, not for the whole
    replay. Five queued writes, two a batch: three waits, each before its batch is taken."""
    db = tmp_path / "s.db"
    store = await ResilientStore.open(db, create=True)
    store.retry_every = 0.01
    store.batch = 2
    taken_before: list[int] = []
    renewal = asyncio.Event()

    async def renewal_first() -> None:
        taken_before.append(store.saved)
        await renewal.wait()

    store.before_batch = renewal_first
    now = datetime.now(UTC)
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    try:
        for second in range(5):
            await store.add_sample(_sample(now + timedelta(seconds=second)))
        assert store.queued == 5
    finally:
        await asyncio.to_thread(lock.release)
    try:
        await eventually(lambda: taken_before == [0], what="the replay waiting for the renewal")
        assert store.queued == 5  # nothing taken while the renewal is under way
        renewal.set()
        assert await store.writable(30)
        assert taken_before == [0, 2, 4]
        assert len(await store.samples("m", limit=10)) == 5
    finally:
        await store.close()

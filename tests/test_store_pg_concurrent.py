"""No two operations ever share one asyncpg connection (issue 24: `cannot switch to state 12;
another operation (2) is in progress`, seen when a deposed leader's parts were cancelled in the
middle of a statement). The composer's reads and commits, the page's reads and a worker's
transitions run at once against a real PostgreSQL store, and some of them are cut off mid-way
(a timeout, a stop cancelling a task): every call either completes or is cancelled, none fails,
and a connection cut off is never used again."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Connection, event, make_url

from supervisor.record.store.outbox import OutboxDraft, OutboxStore
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.control import Note
from tests.pgserver import PgServer

pytestmark = pytest.mark.slow

ROUNDS = 60


@pytest.fixture
async def store(pg_server: PgServer) -> AsyncIterator[Store]:
    async with await Store.open(pg_server.database()) as opened:
        yield opened


async def _worker(store: Store, name: str, count: itertools.count[int]) -> None:
    now = datetime.now(UTC)
    snapshot = Snapshot(
        kind=SubjectKind.ENDPOINT, name=name, state="down", since=now, updated_at=now
    )
    incident = await store.transition(
        snapshot=snapshot,
        entry=TimelineEntry(at=now, subject=name, record=Note(text=f"n{next(count)}")),
        open_cause="connection refused",
    )
    assert incident is not None
    await store.append(incident, TimelineEntry(at=now, subject=name, record=Note(text="more")))


async def _composer(outbox: OutboxStore) -> None:
    batch = await outbox.batch(0)
    drafts = [OutboxDraft(kind="opened", text=f"{len(batch.rows)} rows")]
    await outbox.commit(drafts=drafts, chat_ids=[1], states={}, at=datetime.now(UTC), cursor=0)
    await outbox.pending()


async def _page(store: Store) -> None:
    await store.incidents(limit=20)
    await store.snapshots()


async def test_the_composer_the_page_and_a_worker_at_once_some_cut_off(store: Store) -> None:
    outbox = OutboxStore(store)
    count = itertools.count()
    failures: list[BaseException] = []
    cut = 0
    for round_ in range(ROUNDS):
        calls = [
            _worker(store, f"m{round_ % 3}", count),
            _composer(outbox),
            _page(store),
            _worker(store, f"n{round_ % 2}", count),
            _page(store),
        ]
        tasks = [asyncio.create_task(c) for c in calls]
        await asyncio.sleep(0.001 * (round_ % 7))  # cut some off mid-statement, others not
        victim = tasks[round_ % len(tasks)]
        if not victim.done():
            victim.cancel()
            cut += 1
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                failures.append(result)
    assert cut > ROUNDS // 2  # most rounds cut one call off while it ran
    assert [str(f) for f in failures] == []
    # the store is whole and usable afterwards
    await _page(store)
    assert len(await store.incidents()) == 5


IDLE_S = 1
"""The frozen transaction's idle-in-transaction timeout (its own, `SET LOCAL`)."""
FROZEN_S = 2.5
"""How long the spec's daemon stays frozen: past that timeout."""


def _end_sessions(server: PgServer, database: str) -> None:
    """What the server does to a frozen daemon's sessions (a follower's `end_stuck_sessions`, a
    restart): every session on `database` idle outside a transaction (the pool's) is ended;
    the ones inside a transaction are ended by the idle-in-transaction timeout."""
    subprocess.run(
        [
            str(server.bin / "psql"),
            "-h", "127.0.0.1", "-p", str(server.port), "-U", "fleet", "-d", database, "-qAt",
            "-c",
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND state = 'idle'"
            " AND pid <> pg_backend_pid()",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip


async def test_sessions_the_server_ended_while_the_daemon_was_frozen(pg_server: PgServer) -> None:
    """A daemon frozen (SIGSTOP, a hung VM) in the middle of a transaction finds, when it wakes,
    sessions the server ended while it slept: the one idle in that transaction (the server's
    idle-in-transaction timeout) and the ones idle in its pool (ended by a follower, a restart).
    The server's FATAL message reaches the driver while the connection is idle, before the
    connection closes; the driver then answered the next statement with `another operation (2)
    is in progress`. Each such connection is dropped as the disconnect it is: a pooled one is
    replaced at checkout (the call succeeds), the transaction it cut fails with one sentence
    saying the server closed the connection, and the next round of calls all succeed."""
    plain = pg_server.database()
    async with await Store.open(plain):  # the schema, made under the default timeout
        pass
    # every session long-suffering (a loaded machine's pause between two statements of a
    # transaction must not end it: 1 s did, in a CI run's last round); only the frozen
    # transaction is given a short timeout, by itself (`SET LOCAL`), just before the freeze
    target = replace(plain, idle_in_transaction_s=60.0)
    database = make_url(target.url).database
    assert database is not None
    async with await Store.open(target) as store:
        outbox = OutboxStore(store)
        count = itertools.count()
        frozen: list[str] = []

        def freeze(conn: Connection, _cursor: object, statement: str, *_args: object) -> None:
            """Once, right after a worker's first statement in its transaction: the whole
            process stops while the server ends its sessions."""
            if frozen or "INSERT INTO timeline" not in statement:
                return
            frozen.append(statement)
            own = conn.connection.dbapi_connection
            assert own is not None
            own.cursor().execute(f"SET LOCAL idle_in_transaction_session_timeout = '{IDLE_S}s'")
            _end_sessions(pg_server, database)  # the pooled, idle ones
            time.sleep(FROZEN_S)  # and this transaction's, idle past its timeout

        def calls() -> list[Coroutine[Any, Any, None]]:
            return [
                _composer(outbox),
                _page(store),
                _worker(store, "m", count),
                _page(store),
                _composer(outbox),
            ]

        for _ in range(2):  # a pool with several connections idle in it
            await asyncio.gather(*calls())
        event.listen(store._engine.sync_engine, "after_cursor_execute", freeze)
        results = await asyncio.gather(*calls(), return_exceptions=True)
        event.remove(store._engine.sync_engine, "after_cursor_execute", freeze)
        assert frozen != []
        failures = [str(r) for r in results if isinstance(r, BaseException)]
        assert failures != []  # the frozen worker's transaction, at least, was cut
        timeout = " (terminating connection due to idle-in-transaction timeout)"
        # a session checked out before the freeze but not yet used is 'idle' on the server:
        # ended with the pool's, its first statement meets the server's goodbye (seen once)
        ended = " (terminating connection due to administrator command)"
        said = {
            f"cannot {verb} store {target}: the database server closed the connection{why}"
            for verb in ("read", "write to")
            for why in ("", timeout, ended)
        }
        assert set(failures) <= said
        assert all(not isinstance(r, BaseException) for r in await asyncio.gather(*calls()))


async def test_pooled_connections_the_server_ended_are_replaced_at_checkout(
    pg_server: PgServer,
) -> None:
    """The server ends every session idle in the pool while the daemon is frozen; when it wakes
    the driver reads each FATAL message one loop turn before the connection's end. Checked out
    in between, such a connection is answered `another operation (2) is in progress` by the
    driver; the pool's pre-ping takes that for the disconnect it is and connects afresh, so the
    composer, the page and the worker, all at once, succeed."""
    target = pg_server.database()
    database = make_url(target.url).database
    assert database is not None
    async with await Store.open(target) as store:
        outbox = OutboxStore(store)
        count = itertools.count()
        await asyncio.gather(_composer(outbox), _page(store), _worker(store, "m", count))
        pool = store._engine.pool
        idle = pool.checkedin()  # type: ignore[attr-defined]
        assert idle >= 2
        _end_sessions(pg_server, database)
        time.sleep(0.5)  # noqa: ASYNC251  (frozen: the FATAL messages wait in the sockets)
        for _ in range(2):  # one turn of the loop reads each FATAL, the next would read the end
            await asyncio.sleep(0)
        results = await asyncio.gather(
            _composer(outbox), _page(store), _worker(store, "n", count), return_exceptions=True
        )
        assert [str(r) for r in results if isinstance(r, BaseException)] == []

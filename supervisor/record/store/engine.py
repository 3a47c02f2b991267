"""One async engine per store file: WAL, busy_timeout, foreign keys, explicit BEGIN.

The sqlite3 driver's own transaction handling is switched off (``isolation_level = None``) and
SQLAlchemy emits BEGIN itself, so a read sees one snapshot of the file and a write takes the
write lock up front (``BEGIN IMMEDIATE``), waiting up to `busy_timeout` for another writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import URL, Connection, event
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from supervisor.record.store import fresh, revise, schema
from supervisor.record.store.errors import StoreError
from supervisor.record.store.pgengine import closed_words, make_pg_engine, open_pg_engine
from supervisor.record.store.room import unwritable
from supervisor.record.store.target import PgTarget, StoreTarget

BUSY_TIMEOUT_MS = 5000
_BEGIN = "fleet_supervisor_begin"
"""Execution option naming the BEGIN mode: DEFERRED (reads) or IMMEDIATE (writes)."""


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN (see `_on_begin`)
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _on_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get(_BEGIN, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def mend_aiosqlite_stop() -> None:
    """Workaround for aiosqlite 0.22.1 (`aiosqlite/core.py`) under SQLAlchemy 2.1, applied once
    per process before the first SQLite connection. `Connection.close()` ends in a `finally` that
    calls `stop()` and awaits the future it returns, which the connection's thread resolves just
    before it ends. SQLAlchemy invalidating a connection (a store call cancelled mid-statement)
    runs a graceful `close()` in a task and, when its own caller is cancelled, `stop()`: the
    thread then ends after the first stop, and the close's own stop is queued to no thread. Its
    future is never resolved, and once the close has been cancelled at its first wait (a loop
    closing at the daemon's stop: a spec's teardown hung there for minutes) nothing ends it.
    Mended: a connection's second `stop()` queues nothing and returns the first one's future
    while the thread has not answered it (a close still waits for the thread to end, so no
    answer reaches a closed loop), else None. A connection that failed to connect is stopped
    by aiosqlite with nobody awaiting the answer: each first stop's future is kept until it is
    answered, so a failed open can wait for it (`drivers_stopped`) before its loop may close.
    tests/test_store_engine.py says whether it holds."""
    import aiosqlite  # the driver, only for a SQLite store

    if getattr(aiosqlite.Connection.stop, "mended", False):
        return
    first_stop = aiosqlite.Connection.stop
    stopped: WeakKeyDictionary[aiosqlite.Connection, asyncio.Future[Any] | None]
    stopped = WeakKeyDictionary()

    def stop(self: aiosqlite.Connection) -> asyncio.Future[Any] | None:
        if self in stopped:
            first = stopped[self]
            return None if first is None or first.done() else first
        stopped[self] = future = first_stop(self)
        if future is not None:
            _STOPPING.add(future)
            future.add_done_callback(_STOPPING.discard)
        return future

    stop.mended = True  # type: ignore[attr-defined]
    aiosqlite.Connection.stop = stop  # type: ignore[method-assign]


_STOPPING: set[asyncio.Future[Any]] = set()
"""The aiosqlite stops asked for and not yet answered by their connection's thread."""


async def drivers_stopped(within: float = 10.0) -> None:
    """Wait (at most `within` seconds) until every aiosqlite thread asked to stop on this loop
    has answered: after it, no driver thread answers a future of this loop once it closes."""
    loop = asyncio.get_running_loop()
    mine = [f for f in _STOPPING if f.get_loop() is loop]
    if mine:
        await asyncio.wait(mine, timeout=within)


def make_engine(path: Path) -> AsyncEngine:
    mend_aiosqlite_stop()
    engine = create_async_engine(URL.create("sqlite+aiosqlite", database=str(path)))
    event.listen(engine.sync_engine, "connect", _on_connect)
    event.listen(engine.sync_engine, "begin", _on_begin)
    return engine


def make_any_engine(where: StoreTarget) -> AsyncEngine:
    """An engine on a store already checked (`open_engine` checks and creates)."""
    return make_pg_engine(where) if isinstance(where, PgTarget) else make_engine(where)


def reason(err: BaseException) -> str:
    """The driver's own words for what went wrong (e.g. 'database is locked'; a connection the
    PostgreSQL server ended: `pgengine.closed_words`)."""
    if isinstance(err, StatementError):
        return closed_words(str(err.orig) if err.orig is not None else str(err))
    return str(err) or type(err).__name__


_BEGINS: WeakKeyDictionary[AsyncEngine, dict[bool, AsyncEngine]] = WeakKeyDictionary()


def _begins(engine: AsyncEngine) -> dict[bool, AsyncEngine]:
    """The engine for reads and for writes (by `write`): on SQLite, views of it (the same
    pool) that BEGIN DEFERRED and IMMEDIATE, made once per engine rather than set on each
    connection (that costs a call per transaction)."""
    found = _BEGINS.get(engine)
    if found is None:
        if engine.dialect.name == "sqlite":
            modes = {False: "DEFERRED", True: "IMMEDIATE"}
            found = {w: engine.execution_options(**{_BEGIN: m}) for w, m in modes.items()}
        else:
            found = {False: engine, True: engine}
        _BEGINS[engine] = found
    return found


@asynccontextmanager
async def transaction(engine: AsyncEngine, *, write: bool) -> AsyncIterator[AsyncConnection]:
    """One transaction on a pooled connection: committed on success, rolled back on error
    (PostgreSQL: READ COMMITTED, SQLAlchemy's own BEGIN)."""
    async with _begins(engine)[write].connect() as conn:
        begun = await conn.begin()
        try:
            yield conn
            await begun.commit()
        except asyncio.CancelledError:
            # cut off mid-statement (a timeout, a stop): the driver may still be in the middle
            # of that operation on this connection; a rollback on it would be a second
            # operation at once (asyncpg: `another operation is in progress`), and so would
            # the next caller's. The connection is closed, never given back to the pool.
            await _discard(conn)
            raise
        except BaseException:
            # a connection the server ended is already invalidated (a disconnect, see
            # `pgengine.ENDED`): nothing to roll back on it
            if begun.is_active:
                await begun.rollback()
            raise


async def _discard(conn: AsyncConnection) -> None:
    with suppress(Exception):
        await conn.invalidate()


async def open_engine(where: StoreTarget, *, create: bool) -> AsyncEngine:
    """An engine on a checked store (a SQLite file, or PostgreSQL); with `create`, makes the
    file and tables if missing."""
    if isinstance(where, PgTarget):
        return await open_pg_engine(where, create=create)
    return await _open_sqlite(where, create=create)


async def _open_sqlite(path: Path, *, create: bool, copy: bool = True) -> AsyncEngine:
    """With `copy`, a new store is the copy of the first this process made (`fresh`)."""
    if not create and not await asyncio.to_thread(path.exists):
        raise StoreError(f"no store at {path} (has the daemon run yet?)")
    if create:
        try:
            await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"cannot open store {path}: {err.strerror or err}") from None
        if copy and not await asyncio.to_thread(path.exists):
            await fresh.place_copy(path, _make_first)
    engine = make_engine(path)
    try:
        async with transaction(engine, write=create) as conn:
            older = await _check_or_create(conn, path, create=create)
            behind = older is None and await conn.run_sync(revise.current_revision) != revise.HEAD
        if older is not None or behind:
            async with transaction(engine, write=True) as conn:
                await _bring_up(conn, older)
    except StoreError:
        await engine.dispose()
        await drivers_stopped()
        raise
    except StatementError as err:
        await engine.dispose()
        await drivers_stopped()  # a connection that failed to connect was stopped unawaited
        why = await asyncio.to_thread(unwritable, path)  # SQLite's words do not say why
        said = f" ({why})" if why else ""
        raise StoreError(f"cannot open store {path}: {reason(err)}{said}") from None
    return engine


async def _make_first(path: Path) -> None:
    """A new store at `path` made by the revisions, closed (its WAL checkpointed into it)."""
    engine = await _open_sqlite(path, create=True, copy=False)
    await engine.dispose()
    await drivers_stopped()


async def _bring_up(conn: AsyncConnection, older: int | None) -> None:
    """Inside one write transaction: every revision the store lacks runs (a store made before
    Alembic from the first, which adopts its tables: `revisions/versions/rev0001_*`), then its
    marks say so. Nothing happens twice if another process did it first."""
    version = await _pragma(conn, "user_version")
    if version in (older, schema.SCHEMA_VERSION):
        await conn.run_sync(revise.upgrade)
        await conn.exec_driver_sql(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")


async def _pragma(conn: AsyncConnection, name: str) -> int:
    return int((await conn.exec_driver_sql(f"PRAGMA {name}")).scalar_one())


async def _check_or_create(conn: AsyncConnection, path: Path, *, create: bool) -> int | None:
    """Check the file's marks (creating the tables in an empty file); returns the version of an
    older store that must be migrated, else None."""
    version = await _pragma(conn, "user_version")
    app_id = await _pragma(conn, "application_id")
    if app_id == schema.APPLICATION_ID and version == schema.SCHEMA_VERSION:
        return None
    if app_id == schema.APPLICATION_ID and 1 <= version < schema.SCHEMA_VERSION:
        return version
    if app_id == schema.APPLICATION_ID and version > schema.SCHEMA_VERSION:
        raise StoreError(
            f"store {path} has schema version {version}, newer than this fleet-supervisor "
            f"understands ({schema.SCHEMA_VERSION})"
        )
    tables = (
        await conn.exec_driver_sql("SELECT count(*) FROM sqlite_master WHERE type = 'table'")
    ).scalar_one()
    if tables == 0 and version == 0 and app_id == 0:
        if not create:
            raise StoreError(f"no store at {path} (has the daemon run yet?)")
        await conn.run_sync(revise.upgrade)
        await conn.exec_driver_sql(f"PRAGMA application_id = {schema.APPLICATION_ID}")
        await conn.exec_driver_sql(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
        return None
    raise StoreError(f"store {path} is not a fleet-supervisor database (user_version {version})")

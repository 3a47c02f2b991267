"""A PostgreSQL store: one async engine (asyncpg), the schema made on first open.

The schema is the same tables as the SQLite file's (`supervisor.record.store.schema`), with the
append-only guards as PL/pgSQL triggers. Marks live in `store_meta` (PostgreSQL has no
`user_version`). Two daemons opening an empty database at once are serialised by a
transaction-scoped advisory lock, so exactly one creates the tables.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary, WeakSet

from sqlalchemy import Column, Connection, Integer, MetaData, Table, Text, event, inspect, select
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from supervisor.record.store import revise, schema
from supervisor.record.store.dialect import schema_lock
from supervisor.record.store.errors import StoreError
from supervisor.record.store.target import PgTarget

CONNECT_TIMEOUT_S = 5.0

meta_metadata = MetaData()
store_meta = Table(
    "store_meta",
    meta_metadata,
    Column("key", Text, primary_key=True),
    Column("value", Integer, nullable=False),
)


ENDED = "another operation (2) is in progress"
"""asyncpg's words when the server ended a session while its connection sat idle (a frozen
daemon's open transaction, by the idle-in-transaction timeout; a pooled one, by a follower's
`end_stuck_sessions` or a restart). The driver reads the server's FATAL message while it expects
nothing, holds the connection in its error state (2) until it reads the connection's end, and
answers the next statement in between with `cannot switch to state N; another operation (2) is
in progress`; it then aborts the connection. No second operation shares it (one connection, no
concurrency, gives the same words: tests/test_store_pg_concurrent.py): it is a disconnect, and
SQLAlchemy drops it as one (its pre-ping connects afresh at checkout; in a transaction, the
transaction fails)."""

CLOSED = "the database server closed the connection"
"""What a person reads for a connection the server ended (`closed_words`)."""


def mend_tls_probe() -> None:
    """Workaround for asyncpg 0.32.0 (`asyncpg/connect_utils.py`), applied once per process
    before the first PostgreSQL connection. With `ssl` at `prefer` (the default) asyncpg first
    asks the server for TLS: `_create_ssl_connection` hands `loop.create_connection` a factory of
    `TLSUpgradeProto`, whose `on_data` future is to hold the answer and which fails that future in
    `connection_lost`. An attempt given up (its connect timeout, a cancelled caller) once the TCP
    connection is up but before `create_connection` returned is closed by asyncio
    (`_create_connection_transport`), which calls `connection_lost`: the future fails
    ("unexpected connection_lost() call") and nothing ever awaits it (asyncpg never got the
    protocol back), so asyncio logs "Future exception was never retrieved" at error level when
    it is collected. The mended probe reads that exception as it fails the future; whoever
    awaits the future still gets it. The socket is closed either way (asyncio closes the
    transport). Without the class (another asyncpg) nothing is mended:
    tests/test_store_pg_tls.py says whether the leak is back."""
    from asyncpg import connect_utils  # the driver, only for a PostgreSQL store

    probe = getattr(connect_utils, "TLSUpgradeProto", None)
    if probe is None or getattr(probe, "answer_read", False):
        return

    class ReadTLSProbe(connect_utils.TLSUpgradeProto):  # type: ignore[misc]  # asyncpg: no types
        answer_read = True

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            if not self.on_data.cancelled():
                self.on_data.exception()  # read: nobody may await it

    connect_utils.TLSUpgradeProto = ReadTLSProbe


_OPENED: WeakKeyDictionary[AsyncEngine, WeakSet[Any]] = WeakKeyDictionary()
"""Each PostgreSQL engine's driver connections (asyncpg's) that are still referenced, pooled or
in use: `drop_connections` ends them."""


def make_pg_engine(target: PgTarget) -> AsyncEngine:
    mend_tls_probe()
    engine = create_async_engine(
        target.sqlalchemy_url(),
        pool_pre_ping=True,  # a connection the server dropped (restart) is replaced, not used
        pool_size=4,
        connect_args={
            "timeout": CONNECT_TIMEOUT_S,
            "command_timeout": 30,
            # a frozen leader's open transaction must not hold the lease row for a follower's
            # claim (`supervisor.record.store.lease`): the server ends such a session
            "server_settings": {
                "idle_in_transaction_session_timeout": str(
                    max(1, round(target.idle_in_transaction_s * 1000))
                )
            },
        },
    )
    opened: WeakSet[Any] = WeakSet()
    _OPENED[engine] = opened
    event.listen(
        engine.sync_engine, "connect", lambda dbapi, _record: opened.add(dbapi.driver_connection)
    )
    return engine


def drop_connections(engine: AsyncEngine) -> None:
    """End every connection of `engine` at once, pooled or in use, with nothing sent to the
    server and nothing awaited (asyncpg's `terminate`); an engine not made here (SQLite's) has
    none to end.

    For a store that no longer answers us (deposed while cut off): a statement under way there
    fails at once ("connection was closed in the middle of operation"). Cut short any other way,
    it would not: asyncpg asks the server to cancel it on a new connection, which a silent
    partition holds, and the next statement on that connection (SQLAlchemy's pre-ping rolls its
    transaction back) waits for that cancel up to the statement limit (30 s), with a stopping
    daemon behind it (tests/test_store_deposed.py)."""
    for conn in list(_OPENED.get(engine, ())):
        if not conn.is_closed():
            conn.terminate()


_MIDWAY = "connection was closed in the middle of operation"


def closed_words(text: str) -> str:
    """The driver's words for a connection the server ended, as a person reads them: `CLOSED`,
    with the server's own reason when it sent one (``(terminating connection due to
    idle-in-transaction timeout)``); any other text as it is."""
    if ENDED in text:
        return CLOSED
    if text.startswith(_MIDWAY):
        said = text.removeprefix(_MIDWAY).removeprefix(":").strip()
        return f"{CLOSED} ({said})" if said else CLOSED
    return text


def pg_reason(err: BaseException) -> str:
    if isinstance(err, StatementError) and err.orig is not None:
        return closed_words(str(err.orig).strip().splitlines()[0])
    return str(err) or type(err).__name__


async def open_pg_engine(target: PgTarget, *, create: bool) -> AsyncEngine:
    engine = make_pg_engine(target)
    try:
        async with engine.begin() as conn:
            await schema_lock(conn)
            await _check_or_create(conn, target, create=create)
    except StoreError:
        await engine.dispose()
        raise
    except (DBAPIError, OSError, TimeoutError) as err:
        await engine.dispose()
        raise StoreError(f"cannot open store {target}: {pg_reason(err)}") from None
    return engine


def _tables(conn: Connection) -> list[str]:
    return inspect(conn).get_table_names()


async def _check_or_create(conn: AsyncConnection, target: PgTarget, *, create: bool) -> None:
    tables = await conn.run_sync(_tables)
    if "store_meta" not in tables:
        if tables:
            raise StoreError(f"store {target} is not a fleet-supervisor database")
        if not create:
            raise StoreError(f"no store at {target} (has the daemon run yet?)")
        await conn.run_sync(revise.upgrade)  # every table, `store_meta` too
        await conn.execute(
            store_meta.insert(),
            [
                {"key": "application_id", "value": schema.APPLICATION_ID},
                {"key": "schema_version", "value": schema.SCHEMA_VERSION},
            ],
        )
        return
    marks = dict((await conn.execute(select(store_meta.c.key, store_meta.c.value))).all())
    if marks.get("application_id") != schema.APPLICATION_ID:
        raise StoreError(f"store {target} is not a fleet-supervisor database")
    version = marks.get("schema_version", 0)
    if version > schema.SCHEMA_VERSION:
        raise StoreError(
            f"store {target} has schema version {version}, newer than this fleet-supervisor "
            f"understands ({schema.SCHEMA_VERSION})"
        )
    await conn.run_sync(revise.upgrade)  # the revisions it lacks (under the schema lock)

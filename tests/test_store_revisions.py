"""Alembic's revisions make exactly the schema the code reads and writes, on both engines, and a
store made before Alembic (schema 2, today's SQLite file) is stamped and upgraded on open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, create_engine

from supervisor.record.store import revise, schema
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget

CONTROL_AND_NOTIFY = {
    "notify_cursor",
    "outbox",
    "notify_threads",
    "notify_incidents",
    "notify_refusals",
    "control_silences",
    "control_pauses",
    "control_journal",
    "store_meta",
}


def _differences(conn: Connection) -> list[object]:
    found = compare_metadata(MigrationContext.configure(conn), schema.metadata)
    return [d for d in found if not (d[0] == "remove_table" and d[1].name in CONTROL_AND_NOTIFY)]


async def test_the_revisions_make_the_schema_the_code_uses(store_target: StoreTarget) -> None:
    async with await Store.open(store_target) as store, store.tx(write=False) as conn:
        assert await conn.run_sync(_differences) == []
        assert (
            await conn.run_sync(revise.current_revision) == revise.head() == revise.HEAD == "0004"
        )


def _schema_2_store(path: Path) -> None:
    """A store as the code before leadership made it: revision 0001's tables, the SQLite marks
    of schema 2, no Alembic table."""
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        revise.upgrade_to(conn, revise.SCHEMA_2)
        conn.exec_driver_sql("DROP TABLE alembic_version")
        conn.exec_driver_sql(f"PRAGMA application_id = {schema.APPLICATION_ID}")
        conn.exec_driver_sql("PRAGMA user_version = 2")
        conn.exec_driver_sql(
            "INSERT INTO attempts (endpoint, rule_id, started_at, finished_at, outcome)"
            " VALUES ('m', 'revive', '2025-03-01T12:00:00.000000Z',"
            " '2025-03-01T12:01:00.000000Z', 'healed')"
        )
    engine.dispose()


async def test_a_schema_2_store_is_stamped_and_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _schema_2_store(path)
    async with await Store.open(path, create=False) as store:
        [attempt] = await store.attempts("m")
        assert (attempt.rule_id, attempt.outcome, attempt.epoch) == ("revive", "healed", None)
        assert await store.snapshots(SubjectKind.ENDPOINT) == []
        async with store.tx(write=False) as conn:
            assert await conn.run_sync(_differences) == []
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA user_version").fetchone() == (3,)
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [("0004",)]
    finally:
        raw.close()

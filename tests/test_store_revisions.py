"""Alembic's revisions make exactly the schema the code reads and writes, every table of it, on
both engines, and a store made before Alembic (a schema 2 SQLite file) is adopted and upgraded on
open. (A store of each earlier release: tests/test_store_releases.py.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, MetaData, create_engine

from supervisor.control.tables import control_metadata
from supervisor.record.store import revise, schema
from supervisor.record.store.doctor import doctor_metadata
from supervisor.record.store.pgengine import meta_metadata
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget


def _code_tables(dialect: str) -> MetaData:
    """Every table the code reads and writes (`store_meta`: PostgreSQL's marks)."""
    every = MetaData()
    parts = [schema.metadata, control_metadata, doctor_metadata]
    for part in [*parts, meta_metadata] if dialect == "postgresql" else parts:
        for table in part.tables.values():
            table.to_metadata(every)
    return every


def _differences(conn: Connection) -> list[object]:
    found = compare_metadata(MigrationContext.configure(conn), _code_tables(conn.dialect.name))
    return list(found)


async def test_the_revisions_make_the_schema_the_code_uses(store_target: StoreTarget) -> None:
    async with await Store.open(store_target) as store, store.tx(write=False) as conn:
        assert await conn.run_sync(_differences) == []
        assert (
            await conn.run_sync(revise.current_revision) == revise.head() == revise.HEAD == "0006"
        )


def _schema_2_store(path: Path) -> None:
    """A store as the code before leadership made it: revision 0001's tables, the SQLite marks
    of schema 2, no Alembic table."""
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        revise.upgrade_to(conn, "0001")
        conn.exec_driver_sql("DROP TABLE alembic_version")
        conn.exec_driver_sql(f"PRAGMA application_id = {schema.APPLICATION_ID}")
        conn.exec_driver_sql("PRAGMA user_version = 2")
        conn.exec_driver_sql(
            "INSERT INTO attempts (endpoint, rule_id, started_at, finished_at, outcome)"
            " VALUES ('m', 'revive', '2025-03-01T12:00:00.000000Z',"
            " '2025-03-01T12:01:00.000000Z', 'healed')"
        )
    engine.dispose()


async def test_a_schema_2_store_is_adopted_and_upgraded(tmp_path: Path) -> None:
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
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [(revise.HEAD,)]
    finally:
        raw.close()

"""A store made by any earlier release is upgraded in one step by opening it, on SQLite and on
PostgreSQL: every table and column then as a new store's (the two reflected schemas compared,
column order aside: an added column comes last), every row that was there still there, and
Alembic's current revision the head.

Each earlier store is the statements that release's own code ran to make it, replayed
(tests/data/store_releases/: recorded from a worktree of the release's commit by `record.py`
there; its README names the releases and how each was recorded). A store is replayed whole (every
part of that daemon ran: the notifier, the control API, a `doctor` run, where the release had
them), without the notifier's statements (a daemon with no Telegram), and with only the store's
opening (a store no daemon started on). One row goes into each table it has before it is opened.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, MetaData, inspect, select, text

from supervisor.record.store import revise, schema
from supervisor.record.store.engine import make_any_engine, transaction
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget
from tests.pgserver import PgServer

DATA = Path(__file__).parent / "data" / "store_releases"

RELEASES = {
    "v1_notify": "6d991d7: schema 1, the notifier's tables (INTEGER ids)",
    "v1_control": "894fb28: schema 1, the notifier's and the control API's tables",
    "v2": "fbe1d29: schema 2 (the typed timeline), no Alembic",
    "v2_then_0002": "fbe1d29, then ea4e345 on it: stamped 0001, 0002, outbox.epoch by ALTER",
    "r0002": "ea4e345: PostgreSQL and Alembic (0002); BIGINT ids, outbox.epoch made with it",
    "r0003": "9c6ad7c: revision 0003",
    "r0004": "671c4ad: revision 0004",
    "r0004_doctor": "16ab977: revision 0004 and the doctor's runs (as up to this change)",
}

LEFT_OUT = {
    "whole": frozenset[str](),
    "no_telegram": frozenset({"notifier"}),
    "opened_only": frozenset({"notifier", "control", "doctor"}),
}
"""The steps of a release's run left out of its replay."""

T = "2025-03-01T12:00:00.000000Z"
BIG_CHAT = -1001234567890  # a Telegram supergroup id: more than 32 bits
ROWS: dict[str, dict[str, object]] = {
    "incidents": {
        "subject_kind": "endpoint",
        "subject": "m",
        "opened_at": T,
        "cause": "down",
        "last_state": "down",
    },
    "snapshots": {
        "kind": "endpoint",
        "name": "m",
        "state": "down",
        "since": T,
        "incident_id": 1,
        "fail_streak": 3,
        "degraded_streak": 0,
        "last_reason": "connection refused",
        "updated_at": T,
    },
    "timeline": {
        "incident_id": 1,
        "at": T,
        "kind": "note",
        "subject": "m",
        "summary": "n",
        "data": '{"text": "n"}',
        "type": "note",
        "version": 1,
    },
    "samples": {
        "endpoint": "m",
        "at": T,
        "tier": "health",
        "check": "health",
        "outcome": "fail",
        "reason": "connection refused",
        "latency_s": 0.25,
    },
    "attempts": {"endpoint": "m", "rule_id": "revive", "incident_id": 1, "started_at": T},
    "leader_lease": {
        "id": 1,
        "epoch": 2,
        "holder": "a",
        "host": "hub",
        "acquired_ms": 1,
        "renewed_ms": 2,
        "expires_ms": 3,
    },
    "leader_journal": {"at_ms": 1, "epoch": 2, "holder": "a", "host": "hub", "event": "took_over"},
    "journal_cursors": {"host": "forge", "cursor": "s=1", "updated_at": T},
    "state_log": {
        "subject_kind": "endpoint",
        "subject": "m",
        "state": "down",
        "at_ms": 1,
        "serving_ms": 0,
        "down_ms": 0,
        "silenced_ms": 0,
        "unsupervised_ms": 0,
    },
    "supervision": {"started_ms": 1, "seen_ms": 2},
    "notify_cursor": {"name": "composer", "last_id": 1},
    "outbox": {
        "created_at": T,
        "chat_id": BIG_CHAT,
        "incident_id": 1,
        "kind": "opened",
        "text": "<b>m</b> down",
        "message_id": 2**40,
    },
    "notify_threads": {"incident_id": 1, "chat_id": BIG_CHAT, "message_id": 77},
    "notify_incidents": {"incident_id": 1, "state": '{"said": ["opened"]}', "active": 1},
    "notify_refusals": {
        "at": T,
        "user_id": 2**33,
        "chat_id": BIG_CHAT,
        "username": "eve",
        "text": "/restart m",
    },
    "control_silences": {
        "target": "m",
        "who": "ops",
        "via": "cli",
        "why": "upgrade",
        "at": T,
        "until": T,
    },
    "control_pauses": {"scope": "m", "who": "ops", "via": "cli", "why": "upgrade", "at": T},
    "control_journal": {
        "at": T,
        "action": "pause",
        "target": "m",
        "subjects": '["m"]',
        "who": "ops",
        "via": "cli",
        "why": "upgrade",
        "code": "done",
        "answer": "paused m",
    },
    "doctor_runs": {"at": T, "ok": 1, "summary": "1 ok", "document": "{}"},
}
"""One row for each table (incidents first: the others name incident 1); the columns a table
lacks in an earlier store are left out."""

MARKS = {"alembic_version", "store_meta"}


def _cases() -> list[Any]:
    cases = []
    for name in RELEASES:
        for engine in json.loads((DATA / f"{name}.json").read_text()):
            for variant in LEFT_OUT:
                case = (name, engine, variant)
                cases.append(pytest.param(*case, id="-".join(case)))
    return cases


def test_every_release_recorded_is_specified() -> None:
    assert sorted(p.stem for p in DATA.glob("*.json")) == sorted(RELEASES)


def _target(engine: str, tmp_path: Path, request: pytest.FixtureRequest, name: str) -> StoreTarget:
    if engine == "sqlite":
        return tmp_path / name / "supervisor.db"
    server: PgServer = request.getfixturevalue("pg_server")
    return server.database()


async def _replay(
    target: StoreTarget, runs: list[dict[str, Any]], left_out: frozenset[str]
) -> None:
    if isinstance(target, Path):
        target.parent.mkdir(parents=True)
    engine = make_any_engine(target)
    try:
        async with transaction(engine, write=True) as conn:
            for run in runs:
                for step, statements in run["steps"].items():
                    if step in left_out:
                        continue
                    for sql, params in statements:
                        many = bool(params) and isinstance(params[0], list)
                        given = [tuple(p) for p in params] if many else tuple(params)
                        await conn.exec_driver_sql(sql, given)
            await conn.run_sync(_fill)
    finally:
        await engine.dispose()


def _fill(conn: Connection) -> None:
    tables = MetaData()
    tables.reflect(conn)
    for name, row in ROWS.items():
        table = tables.tables.get(name)
        # schema 1's timeline is typed on the upgrade (tests/test_timeline_migration.py)
        if table is None or (name == "timeline" and "type" not in table.c):
            continue
        conn.execute(table.insert().values({k: v for k, v in row.items() if k in table.c}))


def _rows(conn: Connection) -> dict[str, list[dict[str, object]]]:
    tables = MetaData()
    tables.reflect(conn)
    found = {}
    for name, table in tables.tables.items():
        if name not in MARKS:
            query = select(table).order_by(*table.primary_key.columns)
            found[name] = [dict(r) for r in conn.execute(query).mappings()]
    return found


def _schema(conn: Connection) -> dict[str, object]:
    """The reflected schema: each table's columns (by name), keys, indexes; the triggers."""
    found = inspect(conn)
    tables: dict[str, object] = {}
    for name in found.get_table_names():
        columns = found.get_columns(name)
        tables[name] = {
            "columns": sorted(
                (c["name"], str(c["type"].compile(conn.dialect)), c["nullable"], c["default"])
                for c in columns
            ),
            "primary key": found.get_pk_constraint(name)["constrained_columns"],
            "indexes": sorted(
                (
                    i["name"],
                    tuple(i["column_names"]),
                    i["unique"],
                    sorted((k, str(v)) for k, v in i.get("dialect_options", {}).items()),
                )
                for i in found.get_indexes(name)
            ),
            "unique": sorted(
                (u["name"] or "", tuple(u["column_names"]))
                for u in found.get_unique_constraints(name)
            ),
            "foreign keys": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
                for f in found.get_foreign_keys(name)
            ),
        }
    return {"tables": tables, "triggers": _triggers(conn)}


def _triggers(conn: Connection) -> list[tuple[str, ...]]:
    if conn.dialect.name == "sqlite":
        query = "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'"
    else:
        query = (
            "SELECT tgname, tgrelid::regclass::text, pg_get_triggerdef(oid) FROM pg_trigger"
            " WHERE NOT tgisinternal UNION ALL SELECT proname, '', prosrc FROM pg_proc"
            " WHERE pronamespace = 'public'::regnamespace"
        )
    return sorted(
        (name, table, " ".join(sql.split())) for name, table, sql in conn.exec_driver_sql(query)
    )


def _marks(conn: Connection) -> dict[str, object]:
    if conn.dialect.name == "sqlite":
        pragmas = ("application_id", "user_version")
        found = {p: conn.exec_driver_sql(f"PRAGMA {p}").scalar_one() for p in pragmas}
    else:
        found = dict(conn.execute(text("SELECT key, value FROM store_meta")).all())
    current = MigrationContext.configure(conn).get_current_revision()
    return {**found, "alembic current": current}


@pytest.mark.parametrize(("name", "engine", "variant"), _cases())
async def test_a_store_of_an_earlier_release_upgrades_in_one_step(
    name: str, engine: str, variant: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    runs = json.loads((DATA / f"{name}.json").read_text())[engine]
    earlier = _target(engine, tmp_path, request, "earlier")
    await _replay(earlier, runs, LEFT_OUT[variant])
    engine_before = make_any_engine(earlier)
    try:
        async with transaction(engine_before, write=False) as conn:
            before = await conn.run_sync(_rows)
    finally:
        await engine_before.dispose()
    assert set(before) <= set(ROWS)

    async with await Store.open(earlier, create=False) as store, store.tx(write=False) as conn:
        upgraded, after = await conn.run_sync(_schema), await conn.run_sync(_rows)
        marks = await conn.run_sync(_marks)
    new = _target(engine, tmp_path, request, "new")
    async with await Store.open(new) as store, store.tx(write=False) as conn:
        assert upgraded == await conn.run_sync(_schema)
    filled = {table: rows for table, rows in before.items() if rows}
    assert {
        t: [{k: r[k] for k in rows[0]} for r in after[t]] for t, rows in filled.items()
    } == filled
    if engine == "sqlite":
        expected = {"application_id": schema.APPLICATION_ID, "user_version": schema.SCHEMA_VERSION}
    else:
        expected = {
            "application_id": schema.APPLICATION_ID,
            "schema_version": schema.SCHEMA_VERSION,
        }
    assert marks == {**expected, "alembic current": revise.head()}

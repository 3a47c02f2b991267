"""The store on PostgreSQL: the URL and its password, errors in plain words, the database's
own guards (append-only timeline, one open incident), and the notifier's and control API's
upserts on both engines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text

from supervisor.config.errors import ConfigError
from supervisor.config.loader import parse_config
from supervisor.control.model import PauseRow
from supervisor.control.tables import ControlStore
from supervisor.judge.machine import State, Trigger
from supervisor.record.store.errors import SERVER_DOWN, StoreError, StoreRefusedError
from supervisor.record.store.listen import connect_args
from supervisor.record.store.outbox import OutboxDraft, OutboxStore
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.store.target import PgTarget, StoreTarget, store_target
from supervisor.record.timeline.control import Note
from supervisor.record.timeline.state import Transition
from tests import warmstart
from tests.pgserver import PgServer
from tests.ports import free_port

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
BIG_CHAT = -1001234567890  # a Telegram supergroup id: more than 32 bits


def _config(store: str) -> str:
    return f"store: {store}\nendpoints:\n  e: {{kind: health, url: 'http://a/h'}}\n"


@pytest.mark.parametrize(
    ("store", "message"),
    [
        (
            "{url: 'postgresql+asyncpg://fleet:secret@db/fleet'}",
            "fleet.yaml:1: store.url: must not hold a password: give it in "
            "store.password_file or PGPASSWORD",
        ),
        (
            "{url: 'postgresql://fleet@db/fleet'}",
            "fleet.yaml:1: store.url: expected postgresql+asyncpg://USER@HOST[:PORT]/DB",
        ),
        (
            "{url: 'postgresql+asyncpg://fleet@db'}",
            "fleet.yaml:1: store.url: names no database: postgresql+asyncpg://USER@HOST/DB",
        ),
    ],
)
def test_a_bad_store_url_is_refused(store: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(store), source="fleet.yaml", base_dir=Path("/etc/fleet"))
    assert str(caught.value).splitlines() == [message]


def test_the_target_takes_the_password_from_its_file(tmp_path: Path) -> None:
    (tmp_path / "pg.pass").write_text("s3cret\n")
    config = parse_config(
        _config("{url: 'postgresql+asyncpg://fleet@db:5433/fleet', password_file: pg.pass}"),
        source="fleet.yaml",
        base_dir=tmp_path,
    )
    target = store_target(config.store)
    assert target == PgTarget(url="postgresql+asyncpg://fleet@db:5433/fleet", password="s3cret")
    assert str(target) == "postgresql+asyncpg://fleet@db:5433/fleet"  # never the password
    assert "s3cret" not in repr(str(target))
    assert "s3cret" not in repr(target)
    assert target.sqlalchemy_url().password == "s3cret"
    sqlite = parse_config(_config("{path: s.db}"), source="fleet.yaml", base_dir=tmp_path)
    assert store_target(sqlite.store) == tmp_path / "s.db"


def test_an_unreadable_password_file_is_one_line(tmp_path: Path) -> None:
    config = parse_config(
        _config("{url: 'postgresql+asyncpg://fleet@db/fleet', password_file: none.pass}"),
        source="fleet.yaml",
        base_dir=tmp_path,
    )
    with pytest.raises(StoreError) as caught:
        store_target(config.store)
    assert str(caught.value) == (
        f"cannot read store.password_file {tmp_path / 'none.pass'}: No such file or directory"
    )


async def test_opening_errors_in_plain_words(pg_server: PgServer) -> None:
    port = free_port()
    nowhere = PgTarget(url=f"postgresql+asyncpg://fleet@127.0.0.1:{port}/fleet")
    with pytest.raises(StoreError) as caught:
        await Store.open(nowhere)
    assert str(caught.value) == (
        f"cannot open store {nowhere}: [Errno 111] Connect call failed ('127.0.0.1', {port})"
    )
    empty = pg_server.database()
    with pytest.raises(StoreError) as missing:
        await Store.open(empty, create=False)
    assert str(missing.value) == f"no store at {empty} (has the daemon run yet?)"
    other = pg_server.database()
    conn = await asyncpg.connect(**connect_args(other))
    await conn.execute("CREATE TABLE invoices (id int)")
    await conn.close()
    with pytest.raises(StoreError) as foreign:
        await Store.open(other)
    assert str(foreign.value) == f"store {other} is not a fleet-supervisor database"


async def test_a_stopped_server_is_named_down_by_the_errors_type(pg_server: PgServer) -> None:
    """PostgreSQL stopped (`pg_ctl stop -m fast`) under an open store: a write that fails says
    the server is down or unreachable from the driver's error's type (a refused or reset
    connection, the server's SQLSTATE), whatever its words."""
    async with await Store.open(pg_server.database()) as store:
        await store.snapshots()  # a pooled connection, which the stop ends
        pg_server.stop()
        try:
            with pytest.raises(StoreRefusedError) as caught:
                await store.save_snapshot(_down("m"))
        finally:
            pg_server.start()
    assert caught.value.cause == SERVER_DOWN
    assert str(caught.value).startswith(f"cannot write to store {store.path}: ")


@pytest.fixture
async def pg_store(pg_server: PgServer) -> AsyncIterator[Store]:
    async with await Store.open(pg_server.database()) as store:
        yield store


def _down(name: str) -> Snapshot:
    return Snapshot(kind=SubjectKind.ENDPOINT, name=name, state="down", since=T0, updated_at=T0)


async def _open(store: Store, name: str) -> int:
    entry = TimelineEntry(
        at=T0,
        subject=name,
        record=Transition(source=State.HEALTHY, dest=State.DOWN, trigger=Trigger.PASS, note="x"),
    )
    incident = await store.transition(snapshot=_down(name), entry=entry, open_cause="refused")
    assert incident is not None
    return incident


@pytest.mark.parametrize("statement", ["UPDATE timeline SET summary = 'x'", "DELETE FROM timeline"])
async def test_the_timeline_is_append_only_in_postgresql_too(
    pg_store: Store, statement: str
) -> None:
    incident = await _open(pg_store, "m")
    with pytest.raises(StoreError) as caught:
        async with pg_store.tx(write=True) as conn:
            await conn.execute(text(statement))
    assert str(caught.value).endswith("timeline is append-only")
    assert [r.summary for r in await pg_store.timeline(incident)] == ["healthy -> down: x"]
    assert (await pg_store.incident(incident)).entries == 1  # type: ignore[union-attr]


async def test_postgresql_refuses_a_second_open_incident(pg_store: Store) -> None:
    await _open(pg_store, "m")
    with pytest.raises(StoreError) as caught:
        async with pg_store.tx(write=True) as conn:
            await conn.execute(
                text(
                    "INSERT INTO incidents (subject_kind, subject, opened_at, cause, last_state)"
                    " VALUES ('endpoint', 'm', 'x', 'c', 'down')"
                )
            )
    assert "ux_incidents_open" in str(caught.value)


async def test_outbox_and_control_tables_on_both_engines(store_target: StoreTarget) -> None:
    async with await Store.open(store_target) as store:
        outbox, control = OutboxStore(store), ControlStore(store)
        incident = await _open(store, "m")
        await store.append(incident, TimelineEntry(at=T0, subject="m", record=Note(text="n")))
        assert await outbox.start_cursor() == 2
        await outbox.commit(
            drafts=[OutboxDraft(kind="opened", text="<b>m</b> down", incident_id=incident)],
            chat_ids=[BIG_CHAT],
            states={incident: ({"said": ["opened"]}, True)},
            at=T0,
            cursor=2,
        )
        await outbox.put_state(incident, {"said": ["opened", "resolved"]}, active=False)
        await outbox.start_thread(incident, BIG_CHAT, 77)
        await outbox.start_thread(incident, BIG_CHAT, 78)  # the first thread stays
        assert await outbox.thread(incident, BIG_CHAT) == 77
        assert await outbox.state(incident) == {"said": ["opened", "resolved"]}
        [row] = await outbox.pending()
        assert (row.chat_id, row.kind, row.epoch) == (BIG_CHAT, "opened", None)
        pause = PauseRow(scope="*", who="@op", via="cli", why="a", at=T0)
        await control.pause(pause)
        await control.pause(PauseRow(scope="*", who="@op2", via="http", why="b", at=T0))
        assert [(p.scope, p.who, p.why) for p in await control.pauses()] == [("*", "@op2", "b")]


def test_run_with_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "fleet.yaml"
    config.write_text(
        _config(f"{{url: 'postgresql+asyncpg://fleet@127.0.0.1:{port}/fleet'}}")
        + "http: {enabled: false}\n"
    )
    done = warmstart.run(["--config", str(config), "run"], timeout=60)
    assert (done.returncode, done.stderr) == (
        2,
        f"fleet-supervisor: cannot open store postgresql+asyncpg://fleet@127.0.0.1:{port}/fleet: "
        f"[Errno 111] Connect call failed ('127.0.0.1', {port})\n",
    )

"""The store on real SQLite files in tmp_path: round trips, incident lifecycle, invariants."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.record.store.errors import StoreError
from supervisor.record.store.records import IncidentRow, Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget
from supervisor.record.timeline.base import EntryKind, JSONValue
from supervisor.record.timeline.control import Legacy

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
CEST = timezone(timedelta(hours=2))
REPO = Path(__file__).resolve().parent.parent


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def snap(
    name: str, state: str, minutes: float, kind: SubjectKind = SubjectKind.ENDPOINT, **kw: Any
) -> Snapshot:
    return Snapshot(
        kind=kind, name=name, state=state, since=at(minutes), updated_at=at(minutes), **kw
    )


def entry(
    subject: str,
    summary: str,
    minutes: float,
    kind: EntryKind = EntryKind.TRANSITION,
    data: Mapping[str, JSONValue] | None = None,
) -> TimelineEntry:
    """An entry of any kind with any words: a `Legacy` record carries them as given."""
    record = Legacy(old_kind=kind.value, text=summary, data=data or {})
    return TimelineEntry(at=at(minutes), subject=subject, record=record)


def sample(endpoint: str, minutes: float, **kw: Any) -> ProbeResult:
    fields: dict[str, Any] = {
        "tier": Tier.DEEP,
        "check": "completion",
        "outcome": ProbeOutcome.OK,
        "reason": "",
        "latency_s": 1.25,
    }
    fields.update(kw)
    return ProbeResult(endpoint=endpoint, at=at(minutes), **fields)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "supervisor.db"


@pytest.fixture
async def store(store_target: StoreTarget) -> AsyncIterator[Store]:
    """The store of an engine-neutral spec: a SQLite file, then a PostgreSQL database."""
    async with await Store.open(store_target) as s:
        yield s


@pytest.fixture
async def file_store(db: Path) -> AsyncIterator[Store]:
    """The store of a spec about the SQLite file itself (read beside it with sqlite3)."""
    async with await Store.open(db) as s:
        yield s


async def open_incident_at(store: Store, name: str, minutes: float, cause: str = "refused") -> int:
    incident_id = await store.transition(
        snapshot=snap(name, "down", minutes),
        entry=entry(name, f"healthy -> down: {cause}", minutes),
        open_cause=cause,
    )
    assert incident_id is not None
    return incident_id


async def close_incident_at(store: Store, name: str, minutes: float) -> int | None:
    return await store.transition(
        snapshot=snap(name, "healthy", minutes),
        entry=entry(name, "down -> healthy", minutes),
        close_resolution="completion passed",
    )


# --- opening ---------------------------------------------------------------------------------


async def test_open_creates_parent_dirs_schema_and_wal(db: Path) -> None:
    async with await Store.open(db):
        pass
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert raw.execute("PRAGMA user_version").fetchone() == (3,)
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {
            "snapshots",
            "incidents",
            "timeline",
            "samples",
            "attempts",
            "leader_lease",
            "leader_journal",
            "journal_cursors",
            "state_log",
            "supervision",
            "notify_cursor",
            "outbox",
            "notify_threads",
            "notify_incidents",
            "notify_refusals",
            "control_silences",
            "control_pauses",
            "control_journal",
            "doctor_runs",
            "spill_writes",
            "alembic_version",
        }
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [("0006",)]
        indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {
            "ix_timeline_incident",
            "ix_samples_endpoint_at",
            "ix_incidents_opened_at",
        } <= indexes
    finally:
        raw.close()


async def test_connections_have_busy_timeout_and_foreign_keys(file_store: Store) -> None:
    async with file_store._engine.connect() as conn:
        assert (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar_one() == 5000
        assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar_one() == 1
        assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar_one() == "wal"


async def test_reopen_keeps_data(db: Path) -> None:
    async with await Store.open(db) as s:
        await s.save_snapshot(snap("qwen", "healthy", 0))
    async with await Store.open(db, create=False) as s:
        assert [x.name for x in await s.snapshots()] == ["qwen"]


def _other_app(path: Path, user_version: int = 0) -> None:
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE notes (body TEXT)")
    raw.execute(f"PRAGMA user_version = {user_version}")
    raw.commit()
    raw.close()


def _newer_store(path: Path) -> None:
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE future (x TEXT)")
    raw.execute(f"PRAGMA application_id = {0x46535550}")
    raw.execute("PRAGMA user_version = 4")
    raw.commit()
    raw.close()


@pytest.mark.parametrize(
    ("prepare", "name", "create", "message"),
    [
        (None, "missing.db", False, "no store at {p} (has the daemon run yet?)"),
        (None, "no/such/dir/x.db", False, "no store at {p} (has the daemon run yet?)"),
        (
            lambda p: p.write_bytes(b""),
            "empty.db",
            False,
            "no store at {p} (has the daemon run yet?)",
        ),
        (
            _other_app,
            "other.db",
            False,
            "store {p} is not a fleet-supervisor database (user_version 0)",
        ),
        (
            _other_app,
            "other.db",
            True,
            "store {p} is not a fleet-supervisor database (user_version 0)",
        ),
        (
            lambda p: _other_app(p, 7),
            "other7.db",
            True,
            "store {p} is not a fleet-supervisor database (user_version 7)",
        ),
        (
            _newer_store,
            "newer.db",
            True,
            "store {p} has schema version 4, newer than this fleet-supervisor understands (3)",
        ),
        (
            lambda p: p.write_text("hello, not a database at all\n" * 100),
            "text.db",
            False,
            "cannot open store {p}: file is not a database",
        ),
        (lambda p: p.mkdir(), "adir", True, "cannot open store {p}: unable to open database file"),
        (lambda p: p.mkdir(), "adir", False, "cannot open store {p}: unable to open database file"),
        (
            lambda p: p.parent.parent.write_text("x"),
            "afile/sub/x.db",
            True,
            "cannot open store {p}: Not a directory",
        ),
    ],
)
async def test_open_errors(
    tmp_path: Path, prepare: Any, name: str, create: bool, message: str
) -> None:
    path = tmp_path / name
    if prepare is not None:
        prepare(path)
    with pytest.raises(StoreError) as caught:
        await Store.open(path, create=create)
    assert str(caught.value) == message.format(p=path)


async def test_open_missing_with_create_false_makes_no_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        await Store.open(tmp_path / "x.db", create=False)
    assert await asyncio.to_thread(os.listdir, tmp_path) == []


# --- snapshots -------------------------------------------------------------------------------


async def test_snapshot_round_trip_all_fields_aware_utc(store: Store) -> None:
    incident_id = await open_incident_at(store, "qwen", 0)
    full = Snapshot(
        kind=SubjectKind.ENDPOINT,
        name="qwen",
        state="degraded",
        since=datetime(2025, 3, 1, 14, 0, 0, 250_000, tzinfo=CEST),
        incident_id=incident_id,
        fail_streak=3,
        degraded_streak=2,
        grace_until=at(10),
        last_ok_at=at(-5),
        last_ttft_s=0.42,
        last_tok_s=41.5,
        last_reason="no reasoning text",
        updated_at=at(1),
    )
    await store.save_snapshot(full)
    back = await store.snapshot(SubjectKind.ENDPOINT, "qwen")
    assert back == full
    assert back is not None
    for value in (back.since, back.grace_until, back.last_ok_at, back.updated_at):
        assert value is not None
        assert value.tzinfo is UTC
    assert back.since == datetime(2025, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)


async def test_save_snapshot_upserts_by_kind_and_name(store: Store) -> None:
    await store.save_snapshot(snap("spark1", "up", 0, kind=SubjectKind.HOST))
    await store.save_snapshot(snap("spark1", "healthy", 0))
    await store.save_snapshot(snap("spark1", "down", 5, fail_streak=3, last_reason="refused"))
    snapshots = await store.snapshots()
    assert [(s.kind, s.name, s.state) for s in snapshots] == [
        (SubjectKind.ENDPOINT, "spark1", "down"),
        (SubjectKind.HOST, "spark1", "up"),
    ]
    assert snapshots[0].fail_streak == 3
    assert snapshots[0].last_reason == "refused"


async def test_snapshots_ordered_by_kind_then_name_and_filtered(store: Store) -> None:
    for kind, name in [
        (SubjectKind.HOST, "spark2"),
        (SubjectKind.ENDPOINT, "qwen"),
        (SubjectKind.HOST, "spark1"),
        (SubjectKind.ENDPOINT, "deepseek"),
    ]:
        await store.save_snapshot(snap(name, "healthy", 0, kind=kind))
    assert [s.name for s in await store.snapshots()] == ["deepseek", "qwen", "spark1", "spark2"]
    assert [s.name for s in await store.snapshots(SubjectKind.HOST)] == ["spark1", "spark2"]
    assert [s.name for s in await store.snapshots(SubjectKind.ENDPOINT)] == ["deepseek", "qwen"]
    assert await store.snapshot(SubjectKind.HOST, "qwen") is None


async def test_save_snapshot_with_unknown_incident(store: Store) -> None:
    with pytest.raises(StoreError) as caught:
        await store.save_snapshot(snap("qwen", "down", 0, incident_id=7))
    assert str(caught.value) == "no incident 7"
    assert await store.snapshots() == []


async def test_saves_that_fall_due_together_share_one_transaction(store: Store) -> None:
    """A tick's burst of saves (snapshot and sample each) is one group: written in one
    transaction, a later snapshot of the same subject winning, every sample kept."""
    names = [f"e{i:02}" for i in range(50)]
    saves = [store.save_snapshot(snap(n, "healthy", 1), sample=sample(n, 1)) for n in names]
    saves.append(store.save_snapshot(snap("e00", "down", 2, last_reason="refused")))
    await asyncio.gather(*saves)
    assert store.saves.groups == 1
    stored = {s.name: (s.state, s.last_reason) for s in await store.snapshots()}
    assert stored == dict.fromkeys(names, ("healthy", "")) | {"e00": ("down", "refused")}
    assert [len(await store.samples(n)) for n in names] == [1] * 50


async def test_a_save_that_fails_in_a_group_fails_only_its_caller(store: Store) -> None:
    """The group is retried save by save: the others are written."""
    found = await asyncio.gather(
        store.save_snapshot(snap("a", "healthy", 0), sample=sample("a", 0)),
        store.save_snapshot(snap("b", "down", 0, incident_id=7), sample=sample("b", 0)),
        store.save_snapshot(snap("c", "healthy", 0)),
        return_exceptions=True,
    )
    assert [str(f) if f else None for f in found] == [None, "no incident 7", None]
    assert [s.name for s in await store.snapshots()] == ["a", "c"]
    assert (len(await store.samples("a")), len(await store.samples("b"))) == (1, 0)


async def test_a_group_the_store_refuses_is_refused_to_every_caller_once(store: Store) -> None:
    """A deposed leader's group meets the fence once (one refusal told), and every caller
    hears it."""
    store.fence_epoch = 5
    told: list[str] = []
    store.on_deposed.append(lambda err: told.append(str(err)))
    found = await asyncio.gather(
        *(store.save_snapshot(snap(n, "healthy", 0)) for n in "abc"), return_exceptions=True
    )
    refusal = "refused under stale epoch 5: nobody leads with epoch 0 (a store write)"
    assert [str(f) for f in found] == [refusal] * 3
    assert told == [refusal]
    store.fence_epoch = None
    assert await store.snapshots() == []


# --- incidents via transition ----------------------------------------------------------------


async def test_incident_lifecycle(store: Store) -> None:
    first = await open_incident_at(store, "qwen", 0, cause="connection refused")
    opened = await store.incident(first)
    assert opened == IncidentRow(
        id=first,
        subject_kind=SubjectKind.ENDPOINT,
        subject="qwen",
        opened_at=at(0),
        closed_at=None,
        symptom="connection refused",
        resolution=None,
        last_state="down",
        entries=1,
    )
    assert opened.is_open
    assert opened.duration is None
    state = await store.snapshot(SubjectKind.ENDPOINT, "qwen")
    assert state is not None
    assert state.incident_id == first

    # a transition inside the incident: appended, last_state follows, no new incident
    same = await store.transition(
        snapshot=snap("qwen", "remediating", 2), entry=entry("qwen", "down -> remediating", 2)
    )
    assert same == first
    assert await store.open_incident(SubjectKind.ENDPOINT, "qwen") == IncidentRow(
        **{**opened.__dict__, "last_state": "remediating", "entries": 2}
    )

    # close: closed_at is the entry's time, the snapshot no longer points at it
    assert await close_incident_at(store, "qwen", 7.5) == first
    closed = await store.incident(first)
    assert closed is not None
    assert closed.closed_at == at(7.5)
    assert closed.resolution == "completion passed"
    assert closed.last_state == "healthy"
    assert closed.entries == 3
    assert not closed.is_open
    assert closed.duration == timedelta(minutes=7.5)
    assert await store.open_incident(SubjectKind.ENDPOINT, "qwen") is None
    state = await store.snapshot(SubjectKind.ENDPOINT, "qwen")
    assert state is not None
    assert (state.state, state.incident_id) == ("healthy", None)
    assert [(r.kind, r.summary) for r in await store.timeline(first)] == [
        (EntryKind.TRANSITION, "healthy -> down: connection refused"),
        (EntryKind.TRANSITION, "down -> remediating"),
        (EntryKind.TRANSITION, "down -> healthy"),
    ]

    # with nothing open and no cause, the entry goes nowhere but the state is saved
    nothing = await store.transition(
        snapshot=snap("qwen", "degraded", 9), entry=entry("qwen", "healthy -> degraded", 9)
    )
    assert nothing is None
    assert len(await store.timeline(first)) == 3
    state = await store.snapshot(SubjectKind.ENDPOINT, "qwen")
    assert state is not None
    assert state.state == "degraded"

    # failing again opens a new incident
    second = await open_incident_at(store, "qwen", 10)
    assert second != first
    assert [i.id for i in await store.incidents(subject="qwen")] == [second, first]


async def test_close_without_open_incident_does_nothing(store: Store) -> None:
    assert await close_incident_at(store, "qwen", 0) is None
    assert await store.incidents() == []


async def test_open_and_close_in_one_transition(store: Store) -> None:
    incident_id = await store.transition(
        snapshot=snap("qwen", "healthy", 0),
        entry=entry("qwen", "restarted and verified", 0),
        open_cause="manual restart",
        close_resolution="completion passed",
    )
    assert incident_id is not None
    row = await store.incident(incident_id)
    assert row is not None
    assert (row.is_open, row.entries, row.duration) == (False, 1, timedelta(0))


async def test_host_and_endpoint_of_same_name_have_separate_incidents(store: Store) -> None:
    endpoint = await open_incident_at(store, "spark1", 0)
    host = await store.transition(
        snapshot=snap("spark1", "unreachable", 1, kind=SubjectKind.HOST),
        entry=entry("spark1", "up -> unreachable", 1),
        open_cause="no route to host",
    )
    assert host is not None
    assert host != endpoint
    open_host = await store.open_incident(SubjectKind.HOST, "spark1")
    assert open_host is not None
    assert (open_host.id, open_host.subject_kind) == (host, SubjectKind.HOST)


async def test_reopening_after_restart_yields_one_incident(db: Path) -> None:
    async with await Store.open(db) as first_run:
        first = await open_incident_at(first_run, "qwen", 0)
    async with await Store.open(db) as second_run:
        again = await open_incident_at(second_run, "qwen", 1, cause="still refused")
        assert again == first
        incidents = await second_run.incidents()
        assert len(incidents) == 1
        assert incidents[0].cause == "refused"  # the original symptom is kept
        assert incidents[0].entries == 2


async def test_database_refuses_a_second_open_incident(db: Path, file_store: Store) -> None:
    await open_incident_at(file_store, "qwen", 0)
    raw = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.IntegrityError) as caught:
            raw.execute(
                "INSERT INTO incidents (subject_kind, subject, opened_at, cause, last_state)"
                " VALUES ('endpoint', 'qwen', '2025-03-01T13:00:00.000000Z', 'x', 'down')"
            )
        assert str(caught.value) == (
            "UNIQUE constraint failed: incidents.subject_kind, incidents.subject"
        )
    finally:
        raw.close()


async def test_transition_is_one_transaction(store: Store) -> None:
    not_json: dict[str, Any] = {"when": {1, 2}}
    bad = entry("qwen", "healthy -> down", 0, data=not_json)
    with pytest.raises(StoreError):
        await store.transition(snapshot=snap("qwen", "down", 0), entry=bad, open_cause="refused")
    assert await store.incidents() == []
    assert await store.snapshots() == []


_KILLED_WRITER = """
import asyncio, os, signal, sys
from datetime import UTC, datetime
from pathlib import Path
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.state import Transition

async def main() -> None:
    store = await Store.open(Path(sys.argv[1]))
    t = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    await store.transition(
        snapshot=Snapshot(kind=SubjectKind.ENDPOINT, name="qwen", state="down", since=t,
                          updated_at=t),
        entry=TimelineEntry(at=t, subject="qwen", record=Transition(
            source="healthy", dest="down", trigger="confirm_down", note="refused")),
        open_cause="refused",
    )
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no dispose: the daemon just dies

asyncio.run(main())
"""


@pytest.mark.slow
async def test_sigkill_after_opening_then_restart_reuses_incident(db: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _KILLED_WRITER, str(db), cwd=REPO
    )
    assert await asyncio.wait_for(proc.wait(), timeout=30) == -signal.SIGKILL
    async with await Store.open(db) as store:
        again = await open_incident_at(store, "qwen", 1)
        incidents = await store.incidents()
        assert [(i.id, i.entries, i.is_open) for i in incidents] == [(again, 2, True)]


# --- timeline --------------------------------------------------------------------------------


async def test_append_returns_row_ids_and_keeps_order(store: Store) -> None:
    incident_id = await open_incident_at(store, "qwen", 0)
    ids = [
        await store.append(incident_id, entry("qwen", "ran systemctl show", 3, EntryKind.EVIDENCE)),
        await store.append(incident_id, entry("qwen", "restart-unit", 2, EntryKind.ACTION)),
    ]
    assert ids[0] < ids[1]
    rows = await store.timeline(incident_id)
    assert [r.id for r in rows][1:] == ids
    assert [r.kind for r in rows] == [EntryKind.TRANSITION, EntryKind.EVIDENCE, EntryKind.ACTION]
    assert [r.at for r in rows] == [at(0), at(3), at(2)]  # row order, not time order
    assert all(r.incident_id == incident_id and r.subject == "qwen" for r in rows)
    row = await store.incident(incident_id)
    assert row is not None
    assert row.entries == 3
    assert row.last_state == "down"  # append does not touch the state


async def test_append_to_closed_incident_is_allowed(store: Store) -> None:
    incident_id = await open_incident_at(store, "qwen", 0)
    await close_incident_at(store, "qwen", 1)
    await store.append(incident_id, entry("qwen", "telegram sent", 2, EntryKind.NOTIFICATION))
    assert [r.summary for r in await store.timeline(incident_id)][-1] == "telegram sent"


async def test_append_to_unknown_incident(store: Store) -> None:
    with pytest.raises(StoreError) as caught:
        await store.append(42, entry("qwen", "x", 0))
    assert str(caught.value) == "no incident 42"


async def test_timeline_of_unknown_incident_is_empty(store: Store) -> None:
    assert await store.timeline(42) == []
    assert await store.incident(42) is None


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE timeline SET summary = 'rewritten'",
        "UPDATE timeline SET incident_id = incident_id",
        "DELETE FROM timeline",
        "DELETE FROM timeline WHERE id = 1",
    ],
)
async def test_timeline_is_append_only(db: Path, file_store: Store, statement: str) -> None:
    incident_id = await open_incident_at(file_store, "qwen", 0)
    raw = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.IntegrityError) as caught:
            raw.execute(statement)
        assert str(caught.value) == "timeline is append-only"
    finally:
        raw.close()
    assert [r.summary for r in await file_store.timeline(incident_id)] == [
        "healthy -> down: refused"
    ]


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"exit_code": 127, "ok": False, "ttft_s": 0.25, "missing": None},
        {"command": "systemctl show vllm -p ExecStart", "tail": ["line 1", "ligne 2 é ✓"]},
        {"nested": {"deeper": {"list": [1, 2.5, "three", None, True, {"k": []}]}}},
        {"big": 2**62, "neg": -1.5e-9, "empty": ""},
        MappingProxyType({"frozen": MappingProxyType({"x": 1})}),
    ],
)
async def test_json_data_round_trip(store: Store, data: Mapping[str, JSONValue]) -> None:
    incident_id = await open_incident_at(store, "qwen", 0)
    await store.append(incident_id, entry("qwen", "details", 1, EntryKind.EVIDENCE, data))
    record = (await store.timeline(incident_id))[-1].record
    assert isinstance(record, Legacy)
    back = record.data
    assert back == json.loads(json.dumps(data, default=dict))
    if "big" in data:
        assert type(back["big"]) is int


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"x": float("nan")}, "Out of range float values are not JSON compliant"),
        ({"x": {1, 2}}, "set is not JSON: timeline data takes JSON values only"),
        ({"x": b"bytes"}, "bytes is not JSON: timeline data takes JSON values only"),
    ],
)
async def test_json_data_refused(
    store_target: StoreTarget, store: Store, data: dict[str, Any], message: str
) -> None:
    incident_id = await open_incident_at(store, "qwen", 0)
    with pytest.raises(StoreError) as caught:
        await store.append(incident_id, entry("qwen", "bad", 1, data=data))
    assert str(caught.value) == f"cannot write to store {store_target}: {message}"
    assert len(await store.timeline(incident_id)) == 1


async def test_naive_datetime_is_refused(db: Path, file_store: Store) -> None:
    naive = Snapshot(
        kind=SubjectKind.ENDPOINT,
        name="qwen",
        state="down",
        since=datetime(2025, 3, 1, 12, 0),
        updated_at=at(0),
    )
    with pytest.raises(StoreError) as caught:
        await file_store.save_snapshot(naive)
    assert str(caught.value) == (
        f"cannot write to store {db}: naive datetime 2025-03-01T12:00:00: "
        "the store takes aware datetimes"
    )


# --- incidents listing -----------------------------------------------------------------------


@pytest.fixture
async def history(store: Store) -> dict[str, int]:
    """Incidents by minute: qwen 0-10 and 100-open, deepseek 20-30 and 40-200, gemma 50-open."""
    ids = {"qwen-1": await open_incident_at(store, "qwen", 0)}
    await close_incident_at(store, "qwen", 10)
    ids["deepseek-1"] = await open_incident_at(store, "deepseek", 20)
    await close_incident_at(store, "deepseek", 30)
    ids["deepseek-2"] = await open_incident_at(store, "deepseek", 40)
    ids["gemma-1"] = await open_incident_at(store, "gemma", 50)
    ids["qwen-2"] = await open_incident_at(store, "qwen", 100)
    await close_incident_at(store, "deepseek", 200)
    return ids


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, ["qwen-2", "gemma-1", "deepseek-2", "deepseek-1", "qwen-1"]),
        ({"subject": "qwen"}, ["qwen-2", "qwen-1"]),
        ({"subject": "nobody"}, []),
        ({"open_only": True}, ["qwen-2", "gemma-1"]),
        ({"open_only": True, "subject": "deepseek"}, []),
        ({"limit": 2}, ["qwen-2", "gemma-1"]),
        ({"limit": 0}, []),
        ({"subject": "deepseek", "limit": 1}, ["deepseek-2"]),
        # since: opened after it, still open, or closed after it
        ({"since": at(45)}, ["qwen-2", "gemma-1", "deepseek-2"]),
        ({"since": at(30)}, ["qwen-2", "gemma-1", "deepseek-2", "deepseek-1"]),
        ({"since": at(30) + timedelta(microseconds=1)}, ["qwen-2", "gemma-1", "deepseek-2"]),
        ({"since": at(300)}, ["qwen-2", "gemma-1"]),
        ({"since": at(300), "subject": "deepseek"}, []),
        ({"since": at(-60)}, ["qwen-2", "gemma-1", "deepseek-2", "deepseek-1", "qwen-1"]),
        ({"since": at(45).astimezone(CEST)}, ["qwen-2", "gemma-1", "deepseek-2"]),
    ],
)
async def test_incidents_filters(
    store: Store, history: dict[str, int], filters: dict[str, Any], expected: list[str]
) -> None:
    names = {v: k for k, v in history.items()}
    assert [names[i.id] for i in await store.incidents(**filters)] == expected


async def test_negative_limit_is_refused(store: Store) -> None:
    for call in (store.incidents(limit=-1), store.samples("qwen", limit=-1)):
        with pytest.raises(StoreError) as caught:
            await call
        assert str(caught.value) == "limit must be 0 or more, got -1"


# --- samples ---------------------------------------------------------------------------------


async def test_sample_round_trip(store: Store) -> None:
    await store.add_sample(
        sample(
            "qwen",
            0,
            http_status=200,
            ttft_s=0.4,
            tok_s=41.0,
            tokens=64,
            detail="Okay, the user wants",
        )
    )
    await store.add_sample(
        sample(
            "qwen",
            1,
            tier=Tier.LIVENESS,
            check="health",
            outcome=ProbeOutcome.FAIL,
            reason="connection refused",
            latency_s=0.003,
        )
    )
    newest, oldest = await store.samples("qwen")
    assert (newest.at, newest.tier, newest.check, newest.outcome) == (
        at(1),
        "liveness",
        "health",
        "fail",
    )
    assert (newest.reason, newest.latency_s, newest.http_status) == (
        "connection refused",
        0.003,
        None,
    )
    assert (newest.ttft_s, newest.tok_s, newest.tokens) == (None, None, None)
    assert (oldest.tier, oldest.outcome, oldest.http_status) == ("deep", "ok", 200)
    assert (oldest.ttft_s, oldest.tok_s, oldest.tokens, oldest.reason) == (0.4, 41.0, 64, "")
    assert oldest.at.tzinfo is UTC
    assert await store.samples("gemma") == []


async def test_samples_newest_first_with_limit(store: Store) -> None:
    for minute in (3, 1, 4, 1, 5, 9, 2, 6):
        await store.add_sample(sample("qwen", minute))
    await store.add_sample(sample("gemma", 100))
    assert [s.at for s in await store.samples("qwen", limit=3)] == [at(9), at(6), at(5)]
    assert len(await store.samples("qwen")) == 8
    assert len(await store.samples("qwen", limit=0)) == 0


async def test_a_snapshot_and_the_sample_behind_it_are_one_write(store: Store) -> None:
    """A probe stores its sample with the snapshot it leads to, or neither (one transaction)."""
    await store.save_snapshot(snap("qwen", "healthy", 1), sample=sample("qwen", 1))
    assert [s.at for s in await store.samples("qwen")] == [at(1)]
    assert (await store.snapshot(SubjectKind.ENDPOINT, "qwen")) is not None
    with pytest.raises(StoreError):  # its incident does not exist: nothing is written
        await store.save_snapshot(snap("qwen", "down", 2, incident_id=99), sample=sample("qwen", 2))
    assert [s.at for s in await store.samples("qwen")] == [at(1)]


async def test_prune_samples(store: Store) -> None:
    for minute in range(10):
        await store.add_sample(sample("qwen", minute))
        await store.add_sample(sample("gemma", minute + 0.5))
    assert await store.prune_samples(at(5)) == 10  # qwen 0-4, gemma 0.5-4.5
    assert [s.at for s in await store.samples("qwen")] == [at(m) for m in range(9, 4, -1)]
    assert [s.at for s in await store.samples("gemma")][-1] == at(5.5)
    assert await store.prune_samples(at(5)) == 0
    assert await store.prune_samples(at(100).astimezone(CEST)) == 10
    assert await store.samples("qwen") == []


# --- several stores on one file --------------------------------------------------------------


async def test_second_store_reads_while_first_writes(db: Path, file_store: Store) -> None:
    incident_id = await open_incident_at(file_store, "qwen", 0)
    total = 60
    seen: list[int] = []
    done = asyncio.Event()

    async def write() -> None:
        for n in range(total):
            await file_store.append(incident_id, entry("qwen", f"step {n}", n, EntryKind.NOTE))
            await file_store.add_sample(sample("qwen", n))
        done.set()

    async def read(reader: Store) -> None:
        while not done.is_set():
            row = await reader.incident(incident_id)
            assert row is not None
            seen.append(row.entries)
            assert len(await reader.snapshots()) == 1
            await asyncio.sleep(0)

    async with await Store.open(db, create=False) as reader:
        await asyncio.wait_for(asyncio.gather(write(), read(reader)), timeout=30)
        final = await reader.incident(incident_id)
        assert final is not None
        assert final.entries == total + 1
        assert len(await reader.timeline(incident_id)) == total + 1
        assert len(await reader.samples("qwen", limit=1000)) == total
    assert len(set(seen)) > 1  # it read while the writes went on
    assert seen == sorted(seen)  # and never saw the count go back


async def test_two_writers_on_one_file_do_not_lock_each_other_out(
    db: Path, file_store: Store
) -> None:
    async with await Store.open(db) as other:
        ids = await asyncio.gather(
            *(open_incident_at(s, f"ep{n}", n) for n in range(8) for s in (file_store, other))
        )
        assert len(set(ids)) == 8  # each pair of writers shared one incident
        assert len(await file_store.incidents(open_only=True)) == 8


_READER = """
import asyncio, json, sys
from pathlib import Path
from supervisor.record.store.store import Store

async def main() -> None:
    async with await Store.open(Path(sys.argv[1]), create=False) as store:
        await store.snapshots()
        print("ready", flush=True)
        counts = []
        while True:
            incidents = await store.incidents()
            counts.append(len(incidents))
            if incidents and not incidents[0].is_open:
                break
            await asyncio.sleep(0.005)
        rows = await store.timeline(incidents[0].id)
        print(json.dumps({"counts": counts, "entries": incidents[0].entries, "rows": len(rows)}))

asyncio.run(main())
"""


@pytest.mark.slow
async def test_reader_in_another_process(db: Path, file_store: Store) -> None:
    await file_store.save_snapshot(snap("qwen", "healthy", 0))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _READER, str(db), cwd=REPO, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), timeout=30) == b"ready\n"
    incident_id = await open_incident_at(file_store, "qwen", 0)
    for n in range(100):
        await file_store.append(incident_id, entry("qwen", f"step {n}", n, EntryKind.NOTE))
    await close_incident_at(file_store, "qwen", 200)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0
    report = json.loads(out)
    assert (report["entries"], report["rows"]) == (102, 102)
    assert set(report["counts"]) <= {0, 1}


async def test_attempts_are_counted_per_endpoint_and_window(tmp_path: Path) -> None:
    t0 = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
    async with await Store.open(tmp_path / "s.db") as store:
        first = await store.start_attempt(endpoint="ds4", rule_id="ghost", incident_id=None, at=t0)
        await store.finish_attempt(first, at=t0 + timedelta(minutes=9), outcome="healed")
        await store.start_attempt(
            endpoint="ds4", rule_id="ghost", incident_id=None, at=t0 + timedelta(hours=2)
        )
        await store.start_attempt(endpoint="kimi", rule_id="x", incident_id=None, at=t0)
        window = await store.attempts("ds4", since=t0 + timedelta(hours=1))
        everything = await store.attempts()
    assert [(a.rule_id, a.outcome, a.finished_at) for a in window] == [("ghost", None, None)]
    assert [(a.endpoint, a.outcome) for a in everything] == [
        ("ds4", "healed"),
        ("ds4", None),
        ("kimi", None),
    ]
    assert everything[0].finished_at == t0 + timedelta(minutes=9)


@pytest.mark.parametrize(
    ("back_after_minutes", "same_incident"),
    [(5.0, True), (10.0, True), (10.5, False)],
    ids=["flap-within-window", "flap-at-window-edge", "a-new-problem-later"],
)
async def test_a_problem_soon_after_a_close_reopens_the_incident(
    tmp_path: Path, back_after_minutes: float, same_incident: bool
) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        first = await open_incident_at(store, "ds4", 0)
        await close_incident_at(store, "ds4", 1)
        again = await store.transition(
            snapshot=snap("ds4", "down", 1 + back_after_minutes),
            entry=entry("ds4", "healthy -> down: refused", 1 + back_after_minutes),
            open_cause="refused",
            reopen_within=timedelta(minutes=10),
        )
        incidents = await store.incidents(subject="ds4")
    assert (again == first) is same_incident
    assert [i.is_open for i in incidents] == ([True] if same_incident else [True, False])
    if same_incident:
        assert incidents[0].resolution is None
        assert incidents[0].entries == 3

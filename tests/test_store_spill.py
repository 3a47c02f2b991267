"""The spill file (issue 37): the writes a store refuses are kept on local disk as well as in
memory, replayed once by the next start when their process died, bounded by dropping the oldest
samples (never a timeline entry), and when its own disk is full the store says so once and goes
on from memory.

Real SQLite files, refused by a real write lock another connection holds (as in
tests/test_reliability_store.py), and a real tmpfs for a full disk."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog
from sqlalchemy import func, select

from supervisor.config.errors import ConfigError
from supervisor.config.loader import load_config
from supervisor.config.models import FleetConfig
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.record.store import engine as store_engine
from supervisor.record.store.lease import write_journal
from supervisor.record.store.queued import (
    AddSample,
    AppendWrite,
    OutboxMark,
    TransitionWrite,
    Write,
    decode_line,
    encode_line,
)
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.schema import spill_writes
from supervisor.record.store.spill import (
    SpillFile,
    SpillPlace,
    dead_spills,
    spill_place,
    store_key,
)
from supervisor.record.store.store import Store
from supervisor.record.timeline.control import Note

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


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

    def close(self) -> None:
        self._conn.close()


def _snapshot(state: str, incident_id: int | None = None) -> Snapshot:
    return Snapshot(
        kind=SubjectKind.ENDPOINT,
        name="m",
        state=state,
        since=NOW,
        incident_id=incident_id,
        updated_at=NOW,
    )


def _note(text: str, second: int) -> TimelineEntry:
    return TimelineEntry(at=NOW + timedelta(seconds=second), subject="m", record=Note(text=text))


def _sample(second: int) -> ProbeResult:
    return ProbeResult(
        endpoint="m",
        tier=Tier.LIVENESS,
        check="health",
        outcome=ProbeOutcome.FAIL,
        reason="connection refused",
        at=NOW + timedelta(seconds=second),
        latency_s=0.01,
    )


async def _outage_kept_on_disk(db: Path, place: SpillPlace, notes: int) -> str:
    """A store that refuses every write (locked) while an incident is opened and `notes`
    entries are appended, then is closed (what it kept stays in its spill file, unlocked, as a
    dead process leaves it); the spill file's path."""
    store = await ResilientStore.open(db, spill=place)  # made (its schema) before the lock
    store.retry_every = 3600.0  # nothing written until the spec says so
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    try:
        incident = await store.transition(
            snapshot=_snapshot("down"), entry=_note("opened", 0), open_cause="connection refused"
        )
        assert incident == -1  # a placeholder: the store has not taken it
        for n in range(1, notes + 1):
            await store.add_sample(_sample(n))
            await store.append(incident, _note(f"entry {n}", n))
        assert store.spill is not None
        path = str(store.spill.path)
        assert store.problem().endswith(
            f"{store.queued} records kept in memory and in {path}, written when it returns"
        )
        await store.close()  # still locked: kept in the spill file for the next start
    finally:
        await asyncio.to_thread(lock.release)
        lock.close()
    return path


async def _timeline(db: Path) -> list[str]:
    async with await Store.open(db, create=False) as reader:
        incidents = await reader.incidents(subject="m")
        return [r.summary for i in reversed(incidents) for r in await reader.timeline(i.id)]


async def _taken_rows(db: Path) -> int:
    async with await Store.open(db, create=False) as reader, reader.tx(write=False) as conn:
        found = await conn.execute(select(func.count()).select_from(spill_writes))
        return int(found.scalar_one())


def test_a_queued_write_is_one_line_and_reads_back_the_same() -> None:
    entry = _note("opened", 0)
    writes: list[Write] = [
        TransitionWrite(
            snapshot=_snapshot("down", -3), entry=entry, open_cause="x", placeholder=-3
        ),
        AppendWrite(incident_id=-3, entry=_note("more", 1), placeholder=-4),
        AddSample(result=_sample(2)),
        OutboxMark(row_id=-1, sent_at=NOW, parts_sent=1, failed=True),
    ]
    for seq, write in enumerate(writes, start=1):
        line = encode_line(seq, write)
        assert line.endswith(b"\n")
        assert line.count(b"\n") == 1
        assert decode_line(line) == (seq, write)


CONFIG = """\
store: {{spill_dir: {folder}, spill_max: {size}}}
endpoints:
  m: {{kind: health, url: 'http://127.0.0.1:9/h'}}
"""


@pytest.mark.parametrize(
    ("size", "error"),
    [
        ("512KiB", None),
        (
            "4MB",
            "fleet.yaml:1: store.spill_max: expected a size like 512KiB, 4MiB or 1GiB, got '4MB'",
        ),
        (
            4096,
            "fleet.yaml:1: store.spill_max: expected a size like 512KiB, 4MiB or 1GiB, got 4096",
        ),
        ("32KiB", "fleet.yaml:1: store.spill_max: must be at least 64KiB, got 32KiB"),
    ],
)
def test_the_spill_config_keys(tmp_path: Path, size: object, error: str | None) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(CONFIG.format(folder="spilled", size=size))
    if error is not None:
        with pytest.raises(ConfigError) as raised:
            load_config(path)
        assert str(raised.value) == f"{tmp_path}/{error}"
        return
    store = load_config(path).store
    assert (store.spill_dir, store.spill_max) == (tmp_path / "spilled", 512 * 1024)
    assert _default_config(tmp_path).store.spill_dir is None


def _default_config(folder: Path) -> FleetConfig:
    path = folder / "default.yaml"
    path.write_text("endpoints:\n  m: {kind: health, url: 'http://127.0.0.1:9/h'}\n")
    config = load_config(path)
    assert config.store.spill_max == 4 * 1024 * 1024
    return config


def test_the_spill_folder_is_named_else_the_state_directory_else_beside_the_config(
    tmp_path: Path,
) -> None:
    named = spill_place(tmp_path / "named", 1024, config_dir=tmp_path, environ={})
    assert (named.folder, named.max_bytes) == (tmp_path / "named", 1024)
    systemd = {"STATE_DIRECTORY": "/var/lib/fleet-supervisor:/var/lib/other"}
    assert spill_place(None, config_dir=tmp_path, environ=systemd).folder == Path(
        "/var/lib/fleet-supervisor/spill"
    )
    assert spill_place(None, config_dir=tmp_path, environ={}).folder == tmp_path / "spill"


async def test_a_dead_process_spill_is_replayed_once_on_start(tmp_path: Path) -> None:
    db, place = tmp_path / "state" / "s.db", SpillPlace(folder=tmp_path / "spill")
    path = await _outage_kept_on_disk(db, place, notes=3)
    assert await _timeline(db) == []  # nothing reached the store
    assert [p.name for p in place.folder.iterdir()] == [Path(path).name]

    store = await ResilientStore.open(db, spill=place)
    with structlog.testing.capture_logs() as logs:
        await store.recover()
    await store.close()
    assert await _timeline(db) == ["opened", "entry 1", "entry 2", "entry 3"]
    async with await Store.open(db, create=False) as reader:
        assert len(await reader.samples("m", limit=100)) == 3
    assert list(place.folder.iterdir()) == []  # the file goes once all of it is in the store
    assert await _taken_rows(db) == 0  # and so do its rows of `spill_writes`
    events = [e["event"] for e in logs]
    assert events == [
        "replaying the writes a process left in its spill file",
        "spill file replayed",
    ]
    replayed = logs[1]
    assert (replayed["written"], replayed["already_written"]) == (7, 0)

    again = await ResilientStore.open(db, spill=place)  # nothing left: nothing written twice
    await again.recover()
    await again.close()
    assert await _timeline(db) == ["opened", "entry 1", "entry 2", "entry 3"]


async def test_a_spill_partly_written_already_writes_the_rest_once(tmp_path: Path) -> None:
    """The process replaying a spill dies in the middle (here: its store refuses again after
    three entries, and it stops): the next start writes the rest, each write once."""
    db, place = tmp_path / "state" / "s.db", SpillPlace(folder=tmp_path / "spill")
    await _outage_kept_on_disk(db, place, notes=4)

    lock = WriteLock(db)
    first = await ResilientStore.open(db, spill=place)
    first.retry_every = 3600.0
    first.batch = 2  # two writes a transaction: (opened, sample 1), (entry 1, sample 2) ...
    appended: list[None] = []

    def refuse_after_three() -> None:
        appended.append(None)
        if len(appended) == 3:  # "opened", "entry 1", "entry 2" are in: the store refuses now
            lock.take()

    first.on_timeline.append(refuse_after_three)
    await first.recover()
    assert first.outage.endswith("database is locked")
    assert first.queued > 0  # the rest waits, as refused writes do
    await first.close()  # ends with the rest unwritten: the dead spill is left for the next
    lock.release()
    lock.close()
    assert await _timeline(db) == ["opened", "entry 1", "entry 2"]
    assert await _taken_rows(db) > 0  # the writes taken say so
    assert len(list(place.folder.iterdir())) == 1

    second = await ResilientStore.open(db, spill=place)
    with structlog.testing.capture_logs() as logs:
        await second.recover()
    await second.close()
    assert await _timeline(db) == ["opened", "entry 1", "entry 2", "entry 3", "entry 4"]
    replayed = next(e for e in logs if e["event"] == "spill file replayed")
    # 9 writes: the transition, 4 samples, 4 entries; 6 of them were taken before (three
    # transactions: the transition, entries 1 and 2 and the samples after each)
    assert (replayed["written"], replayed["already_written"]) == (3, 6)
    assert list(place.folder.iterdir()) == []
    assert await _taken_rows(db) == 0


async def test_a_spill_at_its_bound_drops_the_oldest_samples_never_an_entry(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state" / "s.db"
    place = SpillPlace(folder=tmp_path / "spill", max_bytes=16 * 1024)
    with structlog.testing.capture_logs() as logs:
        path = Path(await _outage_kept_on_disk(db, place, notes=60))
    assert os.stat(path).st_size <= place.max_bytes
    warned = [e for e in logs if e["event"] == "spill file full: dropping the oldest samples"]
    assert len(warned) == 1  # said once, however many go
    [dead] = dead_spills(place, store=str(db))
    entries = [
        w.entry.summary for _, w in dead.writes if isinstance(w, TransitionWrite | AppendWrite)
    ]
    samples = [w.result.at for _, w in dead.writes if isinstance(w, AddSample)]
    dead.release()
    assert entries == ["opened"] + [f"entry {n}" for n in range(1, 61)]  # every entry
    assert 0 < len(samples) < 60  # the oldest samples went
    assert samples == [_sample(n).at for n in range(61 - len(samples), 61)]  # the newest stay

    store = await ResilientStore.open(db, spill=place)
    await store.recover()
    await store.close()
    assert await _timeline(db) == ["opened"] + [f"entry {n}" for n in range(1, 61)]


def _write_forever(path: Path) -> None:
    with path.open("wb") as out:
        while True:
            out.write(b"\0" * 4096)
            out.flush()


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs, filled: the spill file's own disk, full."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts a tmpfs)")
    mount = tmp_path / "spilldisk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        filler = mount / "filler"
        with pytest.raises(OSError, match="No space left on device"):
            _write_forever(filler)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_the_spill_disk_full_says_so_once_and_keeps_the_memory_queue(
    tmp_path: Path, full_disk: Path
) -> None:
    db, place = tmp_path / "state" / "s.db", SpillPlace(folder=full_disk / "spill")
    store = await ResilientStore.open(db, spill=place)
    store.retry_every = 3600.0
    lock = WriteLock(db)
    await asyncio.to_thread(lock.take)
    try:
        with structlog.testing.capture_logs() as logs:
            incident = await store.transition(
                snapshot=_snapshot("down"),
                entry=_note("opened", 0),
                open_cause="connection refused",
            )
            assert incident is not None
            for n in range(1, 4):
                await store.append(incident, _note(f"entry {n}", n))
        refused = [e for e in logs if e["event"].startswith("spill file refused")]
        assert [(e["event"], e["log_level"]) for e in refused] == [
            ("spill file refused: the queued writes are kept in memory only", "warning")
        ]
        assert refused[0]["problem"] == (
            f"the disk holding {place.folder} is full (No space left on device)"
        )
        assert store.queued == 4  # in memory, as before
        assert store.problem() == (
            "the store cannot be written: another process holds its write lock "
            f"(cannot write to store {db}: database is locked); 4 records kept in memory only "
            f"(the spill file cannot be written either: the disk holding {place.folder} is full "
            "(No space left on device)), written when it returns"
        )
    finally:
        await asyncio.to_thread(lock.release)
        lock.close()
    await store.close()  # the store takes the memory queue
    assert await _timeline(db) == ["opened", "entry 1", "entry 2", "entry 3"]
    assert list(place.folder.glob(f"{store_key(str(db))}-*")) == []  # no file left half-made


async def test_the_spill_of_a_leader_another_instance_replaced_is_dropped(tmp_path: Path) -> None:
    """A leader (a, epoch 1) died in an outage; b led next (epoch 2) and judged afresh, so when
    a leads again (epoch 3) what its dead process kept is a deposed leader's: dropped, as a
    living deposed leader drops its queue, never written over b's newer records."""
    db, place = tmp_path / "state" / "s.db", SpillPlace(folder=tmp_path / "spill")
    async with await Store.open(db) as store, store.tx(write=True) as conn:
        for epoch, holder in ((1, "a"), (2, "b"), (3, "a")):
            await write_journal(
                conn, epoch=epoch, holder=holder, host="h", event="took_over", detail=""
            )
    spill = SpillFile(place, store=str(db), spill_id="dead")
    spill.epoch, spill.holder = 1, "a"
    opened = TransitionWrite(
        snapshot=_snapshot("down"), entry=_note("opened", 0), open_cause="x", placeholder=-1
    )
    assert spill.add(1, opened)
    spill.sync()
    spill.release()  # as its process left it

    store = await ResilientStore.open(db, spill=place)
    store.fence_epoch, store.fence_holder = 3, "a"
    with structlog.testing.capture_logs() as logs:
        await store.recover()
    store.fence_epoch = None
    await store.close()
    assert [(e["event"], e["dropped"], e["why"]) for e in logs] == [
        ("spill file of a replaced leader: dropped", 1, "b led with epoch 2 after its epoch 1")
    ]
    assert await _timeline(db) == []
    assert list(place.folder.iterdir()) == []

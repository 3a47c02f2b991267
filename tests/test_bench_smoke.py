"""Every benchmark's `--smoke` mode runs, quickly, and writes its section of a results file."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench import queries
from supervisor.record.store.engine import open_engine
from supervisor.record.store.store import Store
from supervisor.record.store.target import PgTarget
from tests.helpers import bench_smoke
from tests.pgserver import PgServer
from tests.pgserver import unavailable as pg_unavailable

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("script", "title", "header"),
    [
        ("bench/queries.py", "Incident queries", "| query | median | p95 |"),
        ("bench/fanout.py", "Probe fan-out", "| endpoints | daemon CPU | peak RSS |"),
        ("bench/notify.py", "Notification latency", "| state change | messages | median |"),
        ("bench/board.py", "Fleet page board", "| page | endpoints | server median |"),
        ("bench/spill.py", "Spill file: cost and replay", "| writes per group | append"),
    ],
)
def test_smoke(tmp_path: Path, script: str, title: str, header: str) -> None:
    text = bench_smoke(ROOT, [script], tmp_path / "RESULTS.md")
    assert f"## {title}\n\n- command: `.venv/bin/python {script} --smoke --results" in text
    assert header in text
    rows = [line for line in text.split(header, 1)[1].splitlines()[2:] if line.startswith("|")]
    assert rows, text
    assert all("nan" not in row for row in rows), rows


def test_leadership_smoke(tmp_path: Path) -> None:
    """Two kills of the leader (lease 3 s) on a real PostgreSQL, and both engines' figures."""
    why = pg_unavailable()
    if why is not None:
        pytest.skip(why)
    text = bench_smoke(ROOT, ["bench/leadership.py"], tmp_path / "RESULTS.md")
    assert "## Leadership takeover\n\n- command: `.venv/bin/python bench/leadership.py" in text
    takeover = text.split("| kills | median | p95 | max | min |\n|---|---|---|---|---|\n", 1)[1]
    kills, median = takeover.split(" | ")[:2]
    assert kills == "| 2"
    # a takeover, within two leases (3 s each): a smoke run beside the suite proves the
    # benchmark works, its figure is no measurement (3.87 s seen under load; the chaos specs
    # hold a takeover to the lease, bench/RESULTS.md the measured figures)
    assert 0 < float(median.removesuffix(" s")) <= 6.0
    assert "## Store engines: PostgreSQL beside SQLite\n" in text
    assert "| 5 | PostgreSQL |" in text


def test_handover_smoke(tmp_path: Path) -> None:
    """Two clean stops each way (lease 3 s) on a real PostgreSQL: with LISTEN/NOTIFY the
    follower leads well before its next claim would have come."""
    why = pg_unavailable()
    if why is not None:
        pytest.skip(why)
    text = bench_smoke(ROOT, ["bench/handover.py"], tmp_path / "RESULTS.md")
    head = "## Clean stop: the follower leads\n\n- command: `.venv/bin/python bench/handover.py"
    assert head in text
    rows = {
        row.split(" | ")[0]: row.split(" | ")
        for row in text.splitlines()
        if row.startswith(("| claim loop only", "| LISTEN/NOTIFY"))
    }
    assert list(rows) == ["| claim loop only (before)", "| LISTEN/NOTIFY (after)"]
    assert [r[1] for r in rows.values()] == ["2", "2"]
    after = rows["| LISTEN/NOTIFY (after)"]
    assert float(after[4].removesuffix(" s |")) < 0.5  # released -> took_over: one claim


NEWEST_50 = "SELECT * FROM incidents ORDER BY opened_at DESC, id DESC LIMIT 50"


@pytest.mark.parametrize(("settled", "most"), [(False, None), (True, 50)])
async def test_the_query_bench_measures_a_vacuumed_postgresql_store(
    pg_server: PgServer, settled: bool, most: int | None
) -> None:
    """Each timeline append bumps its incident's `entries`: right after the bulk fill the
    incidents are one row version per event, which the newest-50 query walks through, unless
    the fill ends with the vacuum autovacuum does to a live store (`bench/queries.py`)."""
    target = pg_server.database()
    with pytest.MonkeyPatch.context() as patch:
        if not settled:
            patch.setattr(queries, "settle", _no_vacuum)
            await _without_autovacuum(target)
        count = await queries.fill(target, 20_000, 1000, 5)
    assert count == 20
    buffers = await _newest_50_buffers(target)
    if most is None:
        assert buffers > 200  # 20,000 row versions of 20 incidents
    else:
        assert buffers <= most


async def test_the_vacuum_after_the_fill_waits_for_a_session_that_holds_a_snapshot(
    pg_server: PgServer,
) -> None:
    """A session of the store's database holds a snapshot from before the fill until the fill's
    rows are in (as an autovacuum worker's ANALYZE that began during the fill can): a vacuum
    then would remove none of the fill's row versions. The fill's vacuum waits for it to end."""
    target = pg_server.database()
    await (await Store.open(target)).close()  # the schema, so that the holder can read it
    # a session the server lets idle in its transaction (the store's own give up after 5 s)
    holder = await open_engine(replace(target, idle_in_transaction_s=600.0), create=False)
    try:
        async with holder.connect() as conn:
            await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
            await conn.execute(text("SELECT count(*) FROM incidents"))  # its snapshot, held
            filling = asyncio.create_task(queries.fill(target, 20_000, 1000, 5))
            while not await _rows_in(target, 20_000):
                assert not filling.done(), filling
                await asyncio.sleep(0.05)
            await conn.rollback()  # the snapshot goes; the vacuum may now remove
            assert await asyncio.wait_for(filling, 60) == 20
    finally:
        await holder.dispose()
    assert await _newest_50_buffers(target) <= 50


async def _newest_50_buffers(target: PgTarget) -> int:
    """The buffers the newest-50 query reads, by the plan a big store gets (the index)."""
    engine = await open_engine(target, create=False)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SET enable_seqscan = off"))  # the big store's plan: the index
            plan = (await conn.execute(text(f"EXPLAIN (ANALYZE, BUFFERS) {NEWEST_50}"))).all()
    finally:
        await engine.dispose()
    top = next(r[0] for r in plan if "Buffers: shared" in r[0])  # the plan's total
    return sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", top))


async def _rows_in(target: PgTarget, count: int) -> bool:
    engine = await open_engine(target, create=False)
    try:
        async with engine.connect() as conn:
            rows: int = (await conn.execute(text("SELECT count(*) FROM timeline"))).scalar_one()
    finally:
        await engine.dispose()
    return rows == count


async def _no_vacuum(_engine: AsyncEngine) -> None:
    return None


async def _without_autovacuum(target: PgTarget) -> None:
    """The store made, its `incidents` left alone by autovacuum: the fill's 20,000 updates are
    over its threshold, and the server's autovacuum (a minute's naptime) once ran between the
    fill and the query of a proof run (28 buffers)."""
    engine = await open_engine(target, create=True)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("ALTER TABLE incidents SET (autovacuum_enabled = false)"))
    finally:
        await engine.dispose()

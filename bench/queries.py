"""Incident queries on a big store: `incidents` and `timeline` with 1 million timeline events.

.venv/bin/python bench/queries.py            # 1,000,000 events, writes bench/RESULTS.md
.venv/bin/python bench/queries.py --smoke    # 5,000 events, a few seconds, writes nothing
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from bench.common import RESULTS, median, ms, percentile, write_section
from supervisor.core.aio import poll
from supervisor.record.store.engine import open_engine, transaction
from supervisor.record.store.schema import incidents, timeline
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget
from supervisor.record.timeline.codec import encode
from supervisor.record.timeline.parts import ProbeSample
from supervisor.record.timeline.state import Probe

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PROBE = Probe(
    sample=ProbeSample(
        at=T0,
        tier="liveness",
        check="models",
        outcome="fail",
        reason="connection refused",
        latency_s=0.001,
    ),
    note="2 of 3 probes failed",
)
PAYLOAD = encode(PROBE)


async def fill(path: StoreTarget, events: int, per_incident: int, subjects: int) -> int:
    """A store with `events` timeline rows over events/per_incident incidents; returns that."""
    await (await Store.open(path)).close()  # creates the schema
    engine = await open_engine(path, create=False)
    count = max(1, events // per_incident)
    try:
        async with transaction(engine, write=True) as conn:
            await conn.execute(
                insert(incidents),
                [
                    {
                        "subject_kind": "endpoint",
                        "subject": f"e{i % subjects}",
                        "opened_at": T0 + timedelta(minutes=i),
                        "closed_at": None if _open(i, count, subjects) else closed(i),
                        "cause": "connection refused",
                        "resolution": None if _open(i, count, subjects) else "completion passed",
                        "last_state": "down" if _open(i, count, subjects) else "healthy",
                    }
                    for i in range(count)
                ],
            )
        batch = 50_000
        done = 0
        while done < events:
            rows = [
                {
                    "incident_id": n // per_incident + 1,
                    "at": T0 + timedelta(minutes=n // per_incident, milliseconds=n % per_incident),
                    "kind": PROBE.kind.value,
                    "subject": f"e{(n // per_incident) % subjects}",
                    "summary": PROBE.summary,
                    "type": PROBE.tag,
                    "version": PROBE.version,
                    "data": PAYLOAD,
                }
                for n in range(done, min(events, done + batch))
            ]
            async with transaction(engine, write=True) as conn:
                await conn.execute(insert(timeline), rows)
            done += len(rows)
        await settle(engine)
    finally:
        await engine.dispose()
    return count


async def settle(engine: AsyncEngine) -> None:
    """PostgreSQL: what autovacuum does to a live store within its naptime (a minute), done
    now: VACUUM ANALYZE, once the database's other snapshots are gone. Each timeline append
    updates its incident's `entries` (a trigger), and PostgreSQL keeps every superseded row
    version until a vacuum: the bulk fill leaves `incidents` with one version per event (200,000
    events: 30 MB for 200 incidents), which a query right after the fill walks through (EXPLAIN:
    1,043 buffers for the newest 50; 55 after the vacuum). A daemon appends one entry at a time,
    so autovacuum and page pruning keep the table small. SQLite updates in place: nothing to
    do."""
    if engine.dialect.name != "postgresql":
        return
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")

        async def alone() -> bool:
            others: int = (await auto.execute(OTHER_SNAPSHOTS)).scalar_one()
            return others == 0

        await poll(alone, ALONE_WITHIN_S)  # then vacuums anyway: a measure, not a proof
        await auto.execute(text("VACUUM ANALYZE"))


#: Sessions of this database, other than this one, that hold a snapshot. A vacuum removes no row
#: version such a snapshot may still see. A proof run beside a burner once measured 782 buffers
#: for the newest 50 after this vacuum; a snapshot held from before the fill's end (an
#: autovacuum worker's ANALYZE holds one) gives exactly that (tests/test_bench_smoke.py).
#: `settle` waits for such sessions to end, as autovacuum's next round would come after them.
OTHER_SNAPSHOTS = text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL"
)
ALONE_WITHIN_S = 60.0


def _open(i: int, count: int, subjects: int) -> bool:
    """A third of the endpoints have their latest incident still open (one open per subject)."""
    return i >= count - subjects and i % 3 == 0


def closed(i: int) -> datetime:
    return T0 + timedelta(minutes=i, seconds=30)


async def timed(runs: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        out.append(time.perf_counter() - started)
    return out


async def bench(events: int, runs: int, results: Path | None) -> None:
    per_incident, subjects = 1000, 50
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        started = time.perf_counter()
        count = await fill(path, events, per_incident, subjects)
        fill_s = time.perf_counter() - started
        rng = random.Random(7)
        async with await Store.open(path, create=False) as store:
            figures = {
                "incidents (newest 50)": await timed(runs, lambda: store.incidents(limit=50)),
                "incidents --subject (one endpoint)": await timed(
                    runs, lambda: store.incidents(subject=f"e{rng.randrange(subjects)}")
                ),
                "incidents --open": await timed(runs, lambda: store.incidents(open_only=True)),
                f"timeline (one incident, {min(per_incident, events)} events)": await timed(
                    runs, lambda: store.timeline(rng.randrange(count) + 1)
                ),
            }
            size_mb = path.stat().st_size / 1e6
    lines = [
        f"{events:,} timeline events in {count:,} incidents over {subjects} endpoints "
        f"(store file {size_mb:.0f} MB, filled in {fill_s:.1f} s); {runs} runs of each query "
        "through the Store API the CLI uses.",
        "",
        "| query | median | p95 |",
        "|---|---|---|",
        *(f"| {name} | {ms(median(v))} | {ms(percentile(v, 95))} |" for name, v in figures.items()),
    ]
    write_section("Incident queries", "\n".join(lines), results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds; writes nothing")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--results", type=Path, default=None, help=f"default {RESULTS}")
    args = parser.parse_args()
    if args.smoke:
        asyncio.run(bench(5_000, 10, args.results))
    else:
        asyncio.run(bench(args.events, args.runs, args.results or RESULTS))


if __name__ == "__main__":
    main()

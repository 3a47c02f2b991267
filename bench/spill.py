"""The spill file (`supervisor/record/store/spill.py`): what keeping a refused write on disk
costs (encoding it and appending its line, per write; the fsync, per write group), and how long
the next start takes to replay N timeline entries a dead process left, into a SQLite file and
into PostgreSQL (a temporary cluster, `tests/pgserver.py`, when one can be started).

    .venv/bin/python bench/spill.py            # groups of 1, 10 and 50 writes; replay of
                                               # 1,000 and 10,000 entries; RESULTS.md
    .venv/bin/python bench/spill.py --smoke    # small, writes nothing
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, median, ms, percentile, write_section
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.judge.machine import State, Trigger
from supervisor.record.store.queued import AppendWrite, SaveSnapshot, TransitionWrite, Write
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.spill import SpillFile, SpillPlace
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget
from supervisor.record.timeline.state import Transition as TransitionRecord
from tests.pgserver import PgServer, unavailable

TITLE = "Spill file: cost and replay"
NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def _sample(n: int) -> ProbeResult:
    return ProbeResult(
        endpoint="m",
        tier=Tier.LIVENESS,
        check="health",
        outcome=ProbeOutcome.FAIL,
        reason="connection refused",
        at=NOW + timedelta(seconds=n),
        latency_s=0.01,
    )


def _snapshot(incident_id: int | None = None) -> Snapshot:
    return Snapshot(
        kind=SubjectKind.ENDPOINT,
        name="m",
        state="down",
        since=NOW,
        incident_id=incident_id,
        updated_at=NOW,
    )


def _entry(n: int) -> TimelineEntry:
    record = TransitionRecord(
        source=State.HEALTHY, dest=State.DOWN, trigger=Trigger.DOWN, note=f"probe {n} failed"
    )
    return TimelineEntry(at=NOW + timedelta(seconds=n), subject="m", record=record)


def _group(size: int, n: int) -> list[Write]:
    """What a probe round writes while the store refuses: a snapshot with its sample per
    endpoint, and one timeline entry."""
    writes: list[Write] = [AppendWrite(incident_id=-1, entry=_entry(n), placeholder=-(n + 2))]
    writes += [SaveSnapshot(snapshot=_snapshot(-1), sample=_sample(n)) for _ in range(size - 1)]
    return writes


def write_costs(folder: Path, size: int, groups: int) -> tuple[list[float], list[float]]:
    """Per write (encode and append its line) and per group (fsync), in seconds."""
    spill = SpillFile(
        SpillPlace(folder=folder, max_bytes=1 << 30), store="bench", spill_id=uuid.uuid4().hex
    )
    per_write, per_group = [], []
    seq = 0
    for n in range(groups):
        for write in _group(size, n):
            seq += 1
            began = time.perf_counter()
            spill.add(seq, write)
            per_write.append(time.perf_counter() - began)
        began = time.perf_counter()
        spill.sync()
        per_group.append(time.perf_counter() - began)
    spill.remove()
    return per_write, per_group


async def replay_time(target: StoreTarget, folder: Path, entries: int) -> float:
    """A dead process's spill of one incident opened and `entries` entries appended (and a
    sample with each), replayed by the next start: seconds."""
    async with await Store.open(target):
        pass
    place = SpillPlace(folder=folder, max_bytes=1 << 30)
    spill = SpillFile(place, store=str(target), spill_id=uuid.uuid4().hex)
    opened = TransitionWrite(
        snapshot=_snapshot(), entry=_entry(0), open_cause="connection refused", placeholder=-1
    )
    spill.add(1, opened)
    seq = 1
    for n in range(1, entries + 1):
        for write in _group(2, n):
            seq += 1
            spill.add(seq, write)
    spill.sync()
    spill.release()  # as a process that died leaves it
    store = await ResilientStore.open(target, spill=place)
    began = time.perf_counter()
    await store.recover()
    took = time.perf_counter() - began
    await store.close()
    async with await Store.open(target, create=False) as reader:
        [incident] = await reader.incidents(subject="m")
        assert incident.entries == entries + 1, incident
    return took


async def bench(args: argparse.Namespace, results: Path | None) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    with tempfile.TemporaryDirectory(prefix="spill-bench-", dir=args.folder) as scratch:
        root = Path(scratch)
        cost_rows = []
        for size in args.sizes:
            per_write, per_group = write_costs(root / f"cost{size}", size, args.groups)
            cost_rows.append(
                f"| {size} | {ms(median(per_write))} | {ms(percentile(per_write, 95))} "
                f"| {ms(median(per_group))} | {ms(percentile(per_group, 95))} |"
            )
        replay_rows = []
        server = None if unavailable() else PgServer()
        try:
            for entries in args.entries:
                sqlite = await replay_time(
                    root / f"sqlite{entries}" / "s.db", root / f"spill-sqlite{entries}", entries
                )
                pg = "-"
                if server is not None:
                    took = await replay_time(
                        server.database(), root / f"spill-pg{entries}", entries
                    )
                    pg = f"{took:.2f} s ({entries / took:,.0f} entries/s)"
                replay_rows.append(
                    f"| {entries:,} | {2 * entries + 1:,} | {sqlite:.2f} s "
                    f"({entries / sqlite:,.0f} entries/s) | {pg} |"
                )
        finally:
            if server is not None:
                server.close()
    body = (
        f"The spill file in `{args.folder}` (the machine's disk), {args.groups} write groups of "
        "each size: a probe round's writes while the store refuses them (one timeline entry, "
        "the rest snapshots with their samples). A write is encoded and appended with one "
        "`write(2)` when it is queued; each group is fsynced once, at the end of the event "
        "loop's turn that queued it.\n\n"
        "| writes per group | append, per write (median) | p95 | fsync, per group (median) "
        "| p95 |\n|---|---|---|---|---|\n" + "\n".join(cost_rows) + "\n\n"
        "Replay at the next start (`ResilientStore.recover`): a dead process's spill of one "
        "incident opened under a placeholder id, N entries appended to it and a snapshot with "
        "its sample after each (2N + 1 writes), up to 200 writes a transaction, each with its "
        "`spill_writes` row (PostgreSQL: a temporary cluster on loopback, fsync off).\n\n"
        "| entries | writes | SQLite | PostgreSQL |\n|---|---|---|---|\n" + "\n".join(replay_rows)
    )
    write_section(TITLE, body, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small; writes nothing")
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--entries", type=int, nargs="+", default=[1000, 10000])
    # the machine's disk (/tmp may be a tmpfs, whose fsync costs nothing)
    parser.add_argument("--folder", type=Path, default=Path("/var/tmp"))  # noqa: S108
    parser.add_argument("--results", type=Path, default=None, help=f"default {RESULTS}")
    args = parser.parse_args()
    if args.smoke:
        args.groups, args.sizes, args.entries = 20, [1, 10], [50]
        asyncio.run(bench(args, args.results))
    else:
        asyncio.run(bench(args, args.results or RESULTS))


if __name__ == "__main__":
    main()

"""The fleet page's board with 200 endpoints: server time to render it (the daemon's own
`Server-Timing` header) and the round trip, from a live in-process daemon whose store holds 6 h of
samples per endpoint (one a minute per tier) and a year of history (an incident every ~1.5 days
per endpoint with its ~20 timeline entries: ~1 M entries; its state changes; a 2 h silence every
10 days), a few endpoints down with open incidents; and the availability queries alone
(`supervisor.record.availability`) on that store.

.venv/bin/python bench/board.py            # 200 endpoints, 50 runs, writes bench/RESULTS.md
.venv/bin/python bench/board.py --smoke    # 20 endpoints, 5 runs, a few seconds, writes nothing
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from bench.common import RESULTS, median, percentile, until, write_section
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.core import logs
from supervisor.judge.machine import State
from supervisor.record.availability import availability, days, repairs
from supervisor.record.store.engine import make_engine, transaction
from supervisor.record.store.history import Counted, counted, ms
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.schema import incidents, samples, state_log, supervision, timeline
from supervisor.record.store.store import Store
from supervisor.record.timeline.codec import encode
from supervisor.record.timeline.control import Note

HERE = Path(__file__).resolve().parent
SIMS = 4  #: vLLM-shaped servers, in their own process (`bench/sim_pool.py`)
DOWN_EVERY = 20  #: one endpoint in this many points at a closed port
HISTORY = timedelta(hours=6)
YEAR = timedelta(days=365)
INCIDENT_EVERY = timedelta(hours=36)  #: per endpoint, over the year
ENTRIES = 20  #: timeline entries per incident
SILENCE_EVERY = timedelta(days=10)
RULES = ("restart-llm", "drop-caches", "stale-listener", "double-patch")
TIMING = re.compile(r"app;dur=([0-9.]+)")


def _endpoint(i: int, urls: list[str]) -> dict[str, object]:
    spec: dict[str, object] = {"kind": "openai", "model": "sim-model", "host": "forge"}
    if i % DOWN_EVERY != 7:
        return {**spec, "url": urls[i % len(urls)]}
    # nothing listens there: probed every second, so it is down with its incident soon
    fast = {"liveness_interval": "1s", "completion_interval": "1s", "failures_to_down": 2}
    return {**spec, "url": "http://127.0.0.1:1", "probe": fast}


def fleet(folder: Path, urls: list[str], endpoints: int) -> Path:
    """Every endpoint on the shipped probe defaults (liveness 60 s, completion 300 s, jitter
    5 s), but those that are down."""
    document = {
        "store": {"path": "state/supervisor.db"},
        "playbook": {"path": "playbooks"},
        "http": {"listen": "127.0.0.1:0"},
        "remediation": {"dry_run": True},
        "defaults": {"startup_grace": "0s"},
        "hosts": {"forge": {"local": True}},
        "endpoints": {f"e{i:03d}": _endpoint(i, urls) for i in range(endpoints)},
    }
    (folder / "playbooks").mkdir()
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def fill(path: Path, endpoints: int, now: datetime) -> int:
    """6 h of samples per endpoint, one a minute per tier; returns how many."""
    await (await Store.open(path)).close()  # creates the schema
    engine = make_engine(path)
    minutes = int(HISTORY.total_seconds() // 60)
    rows = [
        {
            "endpoint": f"e{i:03d}",
            "at": now - timedelta(minutes=minutes - m),
            "tier": tier,
            "check": "completion" if tier == "deep" else "models",
            "outcome": "ok",
            "reason": "",
            "latency_s": 0.05,
            "http_status": 200,
            "ttft_s": 0.1 + (m % 7) / 100 if tier == "deep" else None,
            "tok_s": 40.0 + (m * 13 + i) % 11 if tier == "deep" else None,
            "tokens": 32 if tier == "deep" else None,
        }
        for i in range(endpoints)
        for m in range(minutes)
        for tier in ("liveness", "deep")
    ]
    try:
        async with transaction(engine, write=True) as conn:
            for start in range(0, len(rows), 20_000):
                await conn.execute(insert(samples), rows[start : start + 20_000])
    finally:
        await engine.dispose()
    return len(rows)


async def _insert(conn: AsyncConnection, table: Table, rows: list[dict[str, object]]) -> None:
    for start in range(0, len(rows), 20_000):
        await conn.execute(insert(table), rows[start : start + 20_000])


async def fill_history(path: Path, endpoints: int, now: datetime) -> tuple[int, int, int]:
    """A year of history per endpoint: an incident every 36 h (down -> remediating -> verifying
    -> healthy over 6-66 minutes, 20 timeline entries, a rule's diagnosis), a 2 h silence every
    10 days, one run of the daemon supervising all year (seen now); returns (incidents, timeline
    entries, state changes)."""
    engine = make_engine(path)
    begin = now - YEAR
    payload = encode(Note(text="probe failed: connection refused"))
    counts = [0, 0, 0]
    try:
        for i in range(endpoints):
            name = f"e{i:03d}"
            changes: list[dict[str, object]] = [
                {
                    "subject_kind": "endpoint",
                    "subject": name,
                    "state": "healthy",
                    "at_ms": ms(begin),
                }
            ]
            opened: list[tuple[datetime, datetime, str]] = []
            at = begin + timedelta(minutes=37 * i % 600)
            n = 0
            while at < now - timedelta(hours=2):
                took = timedelta(minutes=6 + (n * 7 + i) % 60)
                rule = RULES[(n + i) % len(RULES)]
                opened.append((at, at + took, rule))
                for state, when in (
                    ("down", at),
                    ("remediating", at + took / 4),
                    ("verifying", at + took / 2),
                    ("healthy", at + took),
                ):
                    changes.append(
                        {
                            "subject_kind": "endpoint",
                            "subject": name,
                            "state": state,
                            "at_ms": ms(when),
                        }
                    )
                at += INCIDENT_EVERY
                n += 1
            quiet = begin + timedelta(hours=17, minutes=i)
            while quiet < now - timedelta(hours=3):
                for state, when in (
                    ("maintenance", quiet),
                    ("healthy", quiet + timedelta(hours=2)),
                ):
                    changes.append(
                        {
                            "subject_kind": "endpoint",
                            "subject": name,
                            "state": state,
                            "at_ms": ms(when),
                        }
                    )
                quiet += SILENCE_EVERY
            changes = _with_sums(changes)
            async with transaction(engine, write=True) as conn:
                first = (
                    (
                        await conn.execute(
                            insert(incidents).returning(incidents.c.id),
                            [
                                {
                                    "subject_kind": "endpoint",
                                    "subject": name,
                                    "opened_at": o,
                                    "closed_at": c,
                                    "cause": "connection refused",
                                    "diagnosis": f"{rule}: the server refuses connections",
                                    "resolution": "a real completion passes again",
                                    "last_state": "healthy",
                                }
                                for o, c, rule in opened
                            ],
                        )
                    )
                    .scalars()
                    .all()
                )
                entries = [
                    {
                        "incident_id": incident,
                        "at": o + (c - o) * k / ENTRIES,
                        "kind": "note",
                        "subject": name,
                        "summary": "probe failed: connection refused",
                        "data": payload,
                        "type": "note",
                        "version": 1,
                    }
                    for incident, (o, c, _) in zip(first, opened, strict=True)
                    for k in range(ENTRIES)
                ]
                await _insert(conn, timeline, entries)
                await _insert(conn, state_log, changes)
            counts[0] += len(opened)
            counts[1] += len(entries)
            counts[2] += len(changes)
        async with transaction(engine, write=True) as conn:
            await conn.execute(insert(supervision).values(started_ms=ms(begin), seen_ms=ms(now)))
    finally:
        await engine.dispose()
    return counts[0], counts[1], counts[2]


def _with_sums(changes: list[dict[str, object]]) -> list[dict[str, object]]:
    """The rows in time order with their running sums, as `supervisor.record.store.history`
    writes them."""
    ordered = sorted(changes, key=lambda c: int(str(c["at_ms"])))
    sums = {c.column: 0 for c in Counted}
    previous: dict[str, object] | None = None
    for change in ordered:
        if previous is not None:
            spent = int(str(change["at_ms"])) - int(str(previous["at_ms"]))
            sums[counted(str(previous["state"])).column] += spent
        change.update(sums)
        previous = change
    return ordered


async def measure_queries(
    store: Store, names: list[str], hosts: list[str], runs: int, where: str
) -> list[str]:
    """The availability reads alone, as the board and the endpoint page make them."""
    subjects = [(SubjectKind.ENDPOINT, n) for n in names]
    subjects += [(SubjectKind.HOST, n) for n in hosts]
    first = names[0]
    reads: dict[str, Callable[[], Awaitable[object]]] = {
        f"availability, {len(subjects)} subjects x 24h/7d/30d": lambda: availability(
            store, subjects, now=datetime.now(UTC)
        ),
        "availability, one endpoint": lambda: availability(
            store, subjects[:1], now=datetime.now(UTC)
        ),
        "MTTR per endpoint and per rule (30 d)": lambda: repairs(store, now=datetime.now(UTC)),
        "incidents per day, one endpoint (30 d)": lambda: days(store, first, now=datetime.now(UTC)),
    }
    lines = []
    for what, read in reads.items():
        took = []
        for run in range(runs + 3):
            started = time.perf_counter()
            await read()
            if run >= 3:
                took.append((time.perf_counter() - started) * 1000)
        p95 = percentile(took, 95)
        lines.append(
            f"| {what} | {where} | {median(took):.1f} ms | {p95:.1f} ms | {max(took):.1f} ms |"
        )
    return lines


async def bench(endpoints: int, runs: int, results: Path | None) -> None:
    logs.silence()
    load = os.getloadavg()[0]
    pool = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "sim_pool.py"),
        "--count",
        str(SIMS),
        "--model",
        "sim-model",
        stdout=asyncio.subprocess.PIPE,
    )
    assert pool.stdout is not None
    urls = json.loads(await asyncio.wait_for(pool.stdout.readline(), timeout=60))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = load_config(fleet(folder, urls, endpoints))
        down = {f"e{i:03d}" for i in range(endpoints) if i % DOWN_EVERY == 7}
        stored = await fill(config.store.path, endpoints, datetime.now(UTC))
        started = time.perf_counter()
        made, entries, changes = await fill_history(config.store.path, endpoints, datetime.now(UTC))
        filled = time.perf_counter() - started
        daemon = Supervisor(config)
        await daemon.start()
        try:
            await until(
                lambda: all(
                    w.state is (State.DOWN if n in down else State.HEALTHY)
                    for n, w in daemon.workers.items()
                ),
                within=120,
                what="every endpoint healthy, or down with its incident",
            )
            assert daemon.ops.server is not None
            lines = await measure(daemon.ops.server.url, runs)
            assert daemon.store is not None
            names, hosts = list(daemon.workers), list(config.hosts)
            queries = await measure_queries(
                daemon.store, names, hosts, runs, f"in the daemon's loop, probing {len(names)}"
            )
        finally:
            await daemon.stop()
            pool.terminate()
            await pool.wait()
        async with await Store.open(config.store.path) as store:
            queries += await measure_queries(store, names, hosts, runs, "alone")
    body = "\n".join(
        [
            f"{endpoints} endpoints ({len(down)} down, each with its open incident),"
            f" {stored:,} stored samples (6 h, one a minute per tier),"
            f" a year of history: {made:,} incidents, {entries:,} timeline entries,"
            f" {changes:,} state changes (filled in {filled:.0f} s),"
            f" served by {SIMS} sims in another process,"
            f" {runs} runs per page after 3 warm-ups,"
            " the daemon probing meanwhile (the shipped intervals; the down ones every second),"
            f" load average {load:.1f} on the (shared) machine when it started;"
            " server time is the daemon's own `Server-Timing` (handler start to response ready,"
            " wall time in the daemon's one event loop: a probe round of every endpoint landing"
            " during a render is in it, hence the max); the round trip adds HTTP on loopback."
            " Goal: the board under 300 ms server time, each availability read under 50 ms.",
            "",
            "| page | endpoints | server median | server p95 | server max | round trip median"
            " | HTML |",
            "|---|---|---|---|---|---|---|",
            *lines,
            "",
            "| availability read | where | median | p95 | max |",
            "|---|---|---|---|---|",
            *queries,
        ]
    )
    write_section("Fleet page board", body, results)


async def measure(url: str, runs: int) -> list[str]:
    lines = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for page in ("/", "/fragments/board"):
            server, trip, size = [], [], 0
            for run in range(runs + 3):
                started = time.perf_counter()
                response = await client.get(page)
                elapsed = time.perf_counter() - started
                response.raise_for_status()
                found = TIMING.search(response.headers.get("Server-Timing", ""))
                if found is None:
                    raise SystemExit(f"{page}: no Server-Timing header")
                if run >= 3:
                    server.append(float(found.group(1)))
                    trip.append(elapsed * 1000)
                size = len(response.content)
            endpoints = response.text.count('<tr id="ep-')
            lines.append(
                f"| `{page}` | {endpoints} | {median(server):.1f} ms"
                f" | {percentile(server, 95):.1f} ms | {max(server):.1f} ms"
                f" | {median(trip):.1f} ms | {size / 1024:.0f} KiB |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds; writes nothing")
    parser.add_argument("--endpoints", type=int, default=200)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--results", type=Path, default=None, help=f"default {RESULTS}")
    args = parser.parse_args()
    if args.smoke:
        asyncio.run(bench(20, 5, args.results))
    else:
        asyncio.run(bench(args.endpoints, args.runs, args.results or RESULTS))


if __name__ == "__main__":
    main()

"""Two instances on one PostgreSQL store: how long a takeover takes after the leader is
SIGKILLed (20 kills), and the store's figures on PostgreSQL beside SQLite (incident queries,
probe fan-out). A temporary PostgreSQL cluster is started for the run (`tests/pgserver.py`).

    .venv/bin/python bench/leadership.py            # 20 kills, queries, fan-out; RESULTS.md
    .venv/bin/python bench/leadership.py --smoke    # 2 kills (lease 3 s), small figures
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fanout, queries
from bench.common import RESULTS, instance_config, median, ms, percentile, write_section
from supervisor.record.store.errors import StoreError
from supervisor.record.store.lease import db_now_ms, lease_journal
from supervisor.record.store.store import Store
from supervisor.record.store.target import PgTarget, StoreTarget
from tests.pgserver import PgServer, unavailable

ROOT = Path(__file__).resolve().parent.parent


async def _spawn(config: Path) -> asyncio.subprocess.Process:
    log = (config.parent / "daemon.log").open("ab")
    return await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "supervisor", "--config", str(config), "run"),
        *("--log-format", "json"),
        cwd=ROOT,
        env=fanout.ENV,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log,
    )


async def _holder(target: PgTarget, after_epoch: int) -> tuple[str, int, int] | None:
    """The (holder, epoch, at_ms) of the first takeover past `after_epoch`."""
    try:
        async with (
            await Store.open(target, create=False) as store,
            store.tx(write=False) as conn,
        ):
            for e in await lease_journal(conn):
                if e.event == "took_over" and e.epoch > after_epoch:
                    return e.holder, e.epoch, e.at_ms
    except StoreError:
        return None
    return None


async def _now_ms(target: PgTarget) -> int:
    async with await Store.open(target, create=False) as store, store.tx(write=False) as conn:
        return await db_now_ms(conn)


async def _wait(target: PgTarget, after_epoch: int, within: float) -> tuple[str, int, int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await _holder(target, after_epoch)
        if found is not None:
            return found
        await asyncio.sleep(0.05)
    raise RuntimeError(f"no takeover past epoch {after_epoch} within {within:g} s")


async def takeovers(server: PgServer, kills: int, lease_s: float) -> list[float]:
    """Seconds from each SIGKILL of the leader to the follower's takeover (database clock)."""
    target = server.database()
    out: list[float] = []
    rng = random.Random(14)
    with tempfile.TemporaryDirectory() as tmp:
        configs = {
            name: instance_config(Path(tmp) / name, target, name, f"{lease_s:g}s") for name in "ab"
        }
        procs = {"a": await _spawn(configs["a"])}
        holder, epoch, _ = await _wait(target, 0, 60)
        procs["b"] = await _spawn(configs["b"])
        try:
            for round_ in range(kills):
                await asyncio.sleep(1 + rng.uniform(0, lease_s / 3))  # any phase of renewal
                killed = await _now_ms(target)
                procs[holder].send_signal(signal.SIGKILL)
                await procs[holder].wait()
                dead = holder
                holder, epoch, at_ms = await _wait(target, epoch, lease_s * 3)
                out.append((at_ms - killed) / 1000)
                if round_ < kills - 1:  # back, as the follower the next round needs
                    procs[dead] = await _spawn(configs[dead])
        finally:
            for proc in procs.values():
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    return out


async def query_figures(
    target: StoreTarget, events: int, runs: int
) -> tuple[float, dict[str, list[float]]]:
    per_incident, subjects = 1000, 50
    started = time.perf_counter()
    count = await queries.fill(target, events, per_incident, subjects)
    fill_s = time.perf_counter() - started
    rng = random.Random(7)
    async with await Store.open(target, create=False) as store:
        figures = {
            "incidents (newest 50)": await queries.timed(runs, lambda: store.incidents(limit=50)),
            "incidents --subject": await queries.timed(
                runs, lambda: store.incidents(subject=f"e{rng.randrange(subjects)}")
            ),
            "incidents --open": await queries.timed(runs, lambda: store.incidents(open_only=True)),
            "timeline (one incident)": await queries.timed(
                runs, lambda: store.timeline(rng.randrange(count) + 1)
            ),
        }
    return fill_s, figures


async def bench(args: argparse.Namespace, results: Path | None) -> None:
    why = unavailable()
    if why is not None:
        raise SystemExit(f"bench/leadership.py: {why}")
    server = PgServer()
    try:
        times = await takeovers(server, args.kills, args.lease)
        write_section("Leadership takeover", _takeover_body(times, args.lease), results)
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = await query_figures(Path(tmp) / "q.db", args.events, args.runs)
        pg = await query_figures(server.database(), args.events, args.runs)
        fan: dict[str, dict[int, dict[str, float]]] = {"SQLite": {}, "PostgreSQL": {}}
        for n in args.sizes:
            fan["SQLite"][n] = await fanout.one(n, 4, args.interval, args.duration)
            fan["PostgreSQL"][n] = await fanout.one(
                n, 4, args.interval, args.duration, server.database()
            )
        write_section("Store engines: PostgreSQL beside SQLite", _engines_body(
            args, sqlite, pg, fan), results)  # fmt: skip
    finally:
        server.close()


def _takeover_body(times: list[float], lease_s: float) -> str:
    return "\n".join(
        [
            f"Two `supervisor run` processes on one PostgreSQL store (a temporary local "
            f"cluster), lease {lease_s:g} s (renewed every {lease_s / 3:g} s). The leader is "
            f"SIGKILLed {len(times)} times at a random phase of its renewal; the time is from "
            "the kill to the follower's `took_over` in the leadership journal, both on the "
            "database's clock. The killed instance is started again as the follower, and the "
            "next round kills the new leader.",
            "",
            "| kills | median | p95 | max | min |",
            "|---|---|---|---|---|",
            f"| {len(times)} | {median(times):.2f} s | {percentile(times, 95):.2f} s | "
            f"{max(times):.2f} s | {min(times):.2f} s |",
            "",
            "A takeover waits out the lease from the leader's last renewal, so it lands between "
            f"lease - renewal interval ({lease_s * 2 / 3:g} s) and the lease ({lease_s:g} s) "
            "after the kill, plus the claim's own transaction.",
        ]
    )


VACUUMED = (
    "Why PostgreSQL is vacuumed after the fill: each timeline append bumps its incident's "
    "`entries` (a trigger), and PostgreSQL keeps every superseded row version until a vacuum. "
    "Right after the bulk fill the 200 incidents are 200,000 row versions (30 MB): the newest-50 "
    "query (an index scan backward on `ix_incidents_opened_at`, then an incremental sort on id; "
    "one statement, no missing index) reads 1,043 buffers in 6.5 ms by EXPLAIN ANALYZE, 61 "
    "buffers in 0.35 ms once vacuumed; through the Store API the first run took 7.8 ms and "
    "the median of 100 was 1.84 ms (1.39 ms vacuumed). A live daemon appends one entry per "
    "transaction, so page pruning and autovacuum (every minute) keep the table at its size: "
    "the vacuum measures that state. Most of a call is then the transaction around the "
    "statement (on PostgreSQL the pool's pre-ping, BEGIN, the statement and COMMIT over TCP: "
    "1.1 ms for a query that returns nothing). The 8.9 ms measured before this (p95 23 ms) "
    "was that bloat plus a loaded machine: the same unvacuumed fill gave medians of 1.65 to "
    "3.94 ms since."
)


def _engines_body(
    args: argparse.Namespace,
    sqlite: tuple[float, dict[str, list[float]]],
    pg: tuple[float, dict[str, list[float]]],
    fan: dict[str, dict[int, dict[str, Any]]],
) -> str:
    rows = [
        f"| {name} | {ms(median(sqlite[1][name]))} | {ms(percentile(sqlite[1][name], 95))} | "
        f"{ms(median(pg[1][name]))} | {ms(percentile(pg[1][name], 95))} |"
        for name in sqlite[1]
    ]
    fan_rows = [
        f"| {n} | {engine} | {f['cpu']:.1f}% | {f['rss']:.0f} MB | {int(f['probes'])} of "
        f"{int(f['scheduled'])} | {int(f['failed'])} | {f['late_med'] * 1000:.0f} ms | "
        f"{f['late_p95'] * 1000:.0f} ms |"
        for n in args.sizes
        for engine, f in ((e, fan[e][n]) for e in ("SQLite", "PostgreSQL"))
    ]
    return "\n".join(
        [
            f"Incident queries through the Store API on {args.events:,} timeline events "
            f"(filled in {sqlite[0]:.1f} s on SQLite, {pg[0]:.1f} s on PostgreSQL over "
            f"loopback TCP, then vacuumed as autovacuum would: `bench/queries.py`'s `settle`), "
            f"{args.runs} runs each.",
            "",
            "| query | SQLite median | SQLite p95 | PostgreSQL median | PostgreSQL p95 |",
            "|---|---|---|---|---|",
            *rows,
            "",
            VACUUMED,
            "",
            f"Probe fan-out (`bench/fanout.py`'s measure): the daemon as a real process, "
            f"probes every {args.interval:g} s, {args.duration:g} s measured, its store a SQLite "
            "file or the PostgreSQL database (every probe writes a snapshot and a sample, and "
            "every write of a leader first passes the fence: one more read of the lease row).",
            "",
            "| endpoints | store | daemon CPU | peak RSS | probes | failed | late (median) | "
            "late (p95) |",
            "|---|---|---|---|---|---|---|---|",
            *fan_rows,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a minute; writes nothing")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--lease", type=float, default=15.0)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--sizes", default="10,100")
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--results", type=Path, default=None, help=f"default {RESULTS}")
    args = parser.parse_args()
    args.sizes = [int(n) for n in args.sizes.split(",")]
    if args.smoke:
        args.kills, args.lease, args.events, args.runs = 2, 3.0, 2_000, 5
        args.sizes, args.interval, args.duration = [5], 1.0, 3.0
        asyncio.run(bench(args, args.results))
    else:
        asyncio.run(bench(args, args.results or RESULTS))


if __name__ == "__main__":
    main()

"""A clean stop on PostgreSQL: how long from the leader's stop to the follower leading, with the
store's notifications (LISTEN/NOTIFY, `supervisor/record/store/listen.py`) and without them (the
follower's claim loop alone, as before). Two leadership Gates in one process on a temporary
PostgreSQL cluster (`tests/pgserver.py`); the leader is stopped at a random phase of the
follower's claims, the stopped one comes back as the follower, and the next round stops the new
leader.

    .venv/bin/python bench/handover.py            # 10 stops each way, lease 15 s; RESULTS.md
    .venv/bin/python bench/handover.py --smoke    # 2 stops each way (lease 3 s), writes nothing
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, instance_config, median, until, write_section
from supervisor.app.leader.gate import LeaderGate
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.record.store.lease import lease_journal
from supervisor.record.store.store import Store
from tests.pgserver import PgServer, unavailable

TITLE = "Clean stop: the follower leads"


class Instance:
    def __init__(self, config: Path, *, listen: bool) -> None:
        loaded = load_config(config)
        self.gate = LeaderGate(loaded, lambda: Supervisor(loaded), listen=listen)
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.gate.run(self.stop))

    def leading(self) -> bool:
        return self.gate.supervisor is not None

    def following(self) -> bool:
        elector = self.gate.elector
        listening = self.gate.listener.target is None or self.gate.listener.connected.is_set()
        return elector is not None and elector.seen is not None and listening

    async def end(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 60)


async def handovers(
    server: PgServer, *, listen: bool, stops: int, lease: float
) -> tuple[list[float], list[float]]:
    """(stop -> the follower leads, on this process's clock; released -> taken over, on the
    database's) for each clean stop."""
    target = server.database()
    rng = random.Random(14)
    walls: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        configs = {n: instance_config(Path(tmp) / n, target, n, f"{lease:g}s") for n in "ab"}
        leader = Instance(configs["a"], listen=listen)
        await until(leader.leading, within=60, what="a leading")
        follower = Instance(configs["b"], listen=listen)
        try:
            for _ in range(stops):
                await until(follower.following, within=60, what="a follower")
                await asyncio.sleep(rng.uniform(0, lease / 3))  # any phase of its claims
                started = time.monotonic()
                stopping = asyncio.create_task(leader.end())
                await until(follower.leading, within=lease * 2, what="the follower leading")
                walls.append(time.monotonic() - started)
                await stopping
                name = leader.gate.me.holder
                leader, follower = follower, Instance(configs[name], listen=listen)
        finally:
            for one in (leader, follower):
                if not one.task.done():
                    await one.end()
    async with await Store.open(target, create=False) as store, store.tx(write=False) as conn:
        entries = await lease_journal(conn)
    released = {e.epoch: e.at_ms for e in entries if e.event == "released"}
    taken = [
        (e.at_ms - released[e.epoch - 1]) / 1000
        for e in entries
        if e.event == "took_over" and e.epoch - 1 in released
    ]
    return walls, taken


def _row(how: str, walls: list[float], db: list[float]) -> str:
    return (
        f"| {how} | {len(walls)} | {median(walls):.2f} s | {min(walls):.2f} / {max(walls):.2f} s "
        f"| {median(db):.3f} s |"
    )


async def bench(args: argparse.Namespace, results: Path | None) -> None:
    why = unavailable()
    if why is not None:
        raise SystemExit(f"bench/handover.py: {why}")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    server = PgServer()
    try:
        before = await handovers(server, listen=False, stops=args.stops, lease=args.lease)
        after = await handovers(server, listen=True, stops=args.stops, lease=args.lease)
    finally:
        server.close()
    body = "\n".join(
        [
            f"Two leadership Gates in one process on one PostgreSQL store (a temporary local "
            f"cluster), lease {args.lease:g} s (a follower claims every {args.lease / 3:g} s). "
            "The leader is stopped cleanly (what SIGTERM does: its supervisor stops, then the "
            "lease is released) at a random phase of the follower's claims; the time is from "
            "the stop to the follower leading (this process's clock, polled every 20 ms), and "
            "from the `released` "
            "to the `took_over` entry of the leadership journal (the database's clock). Before: "
            "the follower's claim loop alone (`Gate(listen=False)`); after: the release is "
            "announced (LISTEN/NOTIFY) and the follower claims at once.",
            "",
            "| follower | stops | stop -> leads (median) | min / max | released -> "
            "took_over (median) |",
            "|---|---|---|---|---|",
            _row("claim loop only (before)", *before),
            _row("LISTEN/NOTIFY (after)", *after),
            "",
            "Before, the follower notices at its next claim: between 0 and a third of the lease "
            "after the release. After, the stop costs the supervisor's own step-down and the "
            "follower's one claim transaction.",
        ]
    )
    write_section(TITLE, body, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="seconds; writes nothing")
    parser.add_argument("--stops", type=int, default=10)
    parser.add_argument("--lease", type=float, default=15.0)
    parser.add_argument("--results", type=Path, default=None, help=f"default {RESULTS}")
    args = parser.parse_args()
    if args.smoke:
        args.stops, args.lease = 2, 3.0
        asyncio.run(bench(args, args.results))
    else:
        asyncio.run(bench(args, args.results or RESULTS))


if __name__ == "__main__":
    main()

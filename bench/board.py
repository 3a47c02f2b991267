"""The fleet page's board with 200 endpoints: server time to render it (the daemon's own
`Server-Timing` header) and the round trip, from a live in-process daemon whose store holds 6 h of
samples per endpoint (one a minute per tier), a few endpoints down with open incidents.

.venv/bin/python bench/board.py            # 200 endpoints, 50 runs, writes bench/RESULTS.md
.venv/bin/python bench/board.py --smoke    # 20 endpoints, 5 runs, a few seconds, writes nothing
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import insert

from bench.common import RESULTS, median, percentile, until, write_section
from fleet_lab.vllm_sim import SimBehaviour, VllmSim
from supervisor import logs
from supervisor.app import Supervisor
from supervisor.config import load_config
from supervisor.machine import State
from supervisor.store import Store
from supervisor.store.engine import make_engine, transaction
from supervisor.store.schema import samples

SIMS = 4
DOWN_EVERY = 20  #: one endpoint in this many points at a closed port
HISTORY = timedelta(hours=6)
TIMING = re.compile(r"app;dur=([0-9.]+)")


def fleet(folder: Path, sims: list[VllmSim], endpoints: int, every: str) -> Path:
    document = {
        "store": {"path": "state/supervisor.db"},
        "playbook": {"path": "playbooks"},
        "http": {"listen": "127.0.0.1:0"},
        "remediation": {"dry_run": True},
        "defaults": {
            "probe": {
                "liveness_interval": every,
                "completion_interval": every,
                "failures_to_down": 2,
                "jitter": "0s",
            },
            "startup_grace": "0s",
        },
        "hosts": {"forge": {"local": True}},
        "endpoints": {
            f"e{i:03d}": {
                "kind": "openai",
                "url": "http://127.0.0.1:1" if i % DOWN_EVERY == 7 else sims[i % len(sims)].url,
                "model": "sim-model",
                "host": "forge",
            }
            for i in range(endpoints)
        },
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


async def bench(endpoints: int, runs: int, results: Path | None, every: str) -> None:
    logs.silence()
    sims = [VllmSim(SimBehaviour(tok_s=0)) for _ in range(SIMS)]
    for sim in sims:
        await sim.start("127.0.0.1", 0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = load_config(fleet(folder, sims, endpoints, every))
        stored = await fill(config.store.path, endpoints, datetime.now(UTC))
        daemon = Supervisor(config)
        await daemon.start()
        try:
            await until(
                lambda: all(w.state is not State.UNKNOWN for w in daemon.workers.values()),
                within=120,
                what="every endpoint probed once",
            )
            assert daemon.ops.server is not None
            lines = await measure(daemon.ops.server.url, runs)
        finally:
            await daemon.stop()
            for sim in sims:
                await sim.stop()
    down = sum(1 for i in range(endpoints) if i % DOWN_EVERY == 7)
    body = "\n".join(
        [
            f"{endpoints} endpoints ({down} down, each with its open incident), {stored:,} stored"
            f" samples (6 h, one a minute per tier), {runs} runs per page after 3 warm-ups,"
            f" the daemon probing every {every} meanwhile;"
            " server time is the daemon's own `Server-Timing` (handler start to response ready);"
            " the round trip adds HTTP on loopback. Goal: the board under 300 ms server time.",
            "",
            "| page | endpoints | server median | server p95 | server max | round trip median"
            " | HTML |",
            "|---|---|---|---|---|---|---|",
            *lines,
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
        asyncio.run(bench(20, 5, args.results, "1s"))
    else:
        asyncio.run(bench(args.endpoints, args.runs, args.results or RESULTS, "10s"))


if __name__ == "__main__":
    main()

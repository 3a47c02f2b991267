"""Probe fan-out: the daemon (a real `supervisor run` process) supervising 10, 100 and 500
vLLM-shaped endpoints served by a few sim processes, at a 10 s interval: its CPU share, its peak
RSS and how late probes start against their schedule.

    .venv/bin/python bench/fanout.py                 # 10/100/500 endpoints, 60 s each
    .venv/bin/python bench/fanout.py --smoke         # 5 endpoints, 1 s interval, 4 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, median, percentile, write_section
from supervisor.store import Store

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


async def start_pools(
    endpoints: int, pools: int
) -> tuple[list[asyncio.subprocess.Process], list[str]]:
    procs, urls = [], []
    share = [endpoints // pools + (1 if i < endpoints % pools else 0) for i in range(pools)]
    for count in (c for c in share if c):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "sim_pool.py"),
            "--count",
            str(count),
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
        urls.extend(json.loads(line))
        procs.append(proc)
    return procs, urls


def fleet(folder: Path, urls: list[str], interval: str) -> Path:
    (folder / "playbooks").mkdir(exist_ok=True)
    probe = {
        "liveness_interval": interval,
        "completion_interval": interval,
        "timeout": "5s",
        "jitter": "0s",
    }
    document = {
        "store": {"path": "state/supervisor.db"},
        "playbook": {"path": "playbooks"},
        "remediation": {"dry_run": True},
        "defaults": {"probe": probe, "startup_grace": "0s"},
        "hosts": {"forge": {"local": True}},
        "endpoints": {
            f"e{i:03d}": {"kind": "openai", "url": url, "model": "m", "host": "forge"}
            for i, url in enumerate(urls)
        },
    }
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def lateness(db: Path, interval_s: float) -> list[float]:
    """How late each probe started against its endpoint's 10 s grid (the first probe of all)."""
    async with await Store.open(db, create=False) as store:
        names = [s.name for s in await store.snapshots()]
        samples = [row for name in names for row in await store.samples(name, limit=100_000)]
    late: list[float] = []
    for tier in ("liveness", "deep"):
        times = [s.at.timestamp() for s in samples if s.tier == tier]
        if not times:
            continue
        t0 = min(times)
        for t in times:
            k = round((t - t0) / interval_s)
            late.append(max(0.0, t - (t0 + k * interval_s)))
    return late


async def one(endpoints: int, pools: int, interval_s: float, duration_s: float) -> dict[str, float]:
    procs, urls = await start_pools(endpoints, pools)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            config = fleet(folder, urls, f"{interval_s:g}s")
            log = (folder / "daemon.log").open("wb")
            daemon = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "supervisor",
                "--config",
                str(config),
                "run",
                "--log-format",
                "json",
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
            )
            try:
                await asyncio.sleep(min(2.0, interval_s))  # start-up is not what is measured
                cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
                await asyncio.sleep(duration_s)
                cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
                rss = peak_rss_mb(daemon.pid)
            finally:
                daemon.terminate()
                await asyncio.wait_for(daemon.wait(), timeout=30)
                log.close()
            late = await lateness(folder / "state" / "supervisor.db", interval_s)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await proc.wait()
    return {
        "cpu": 100 * (cpu1 - cpu0) / (t1 - t0),
        "rss": rss,
        "probes": len(late),
        "late_med": median(late),
        "late_p95": percentile(late, 95),
        "late_max": max(late) if late else float("nan"),
    }


async def bench(
    sizes: list[int], pools: int, interval_s: float, duration_s: float, results: Path | None
) -> None:
    rows = []
    for n in sizes:
        f = await one(n, pools, interval_s, duration_s)
        rows.append(
            f"| {n} | {f['cpu']:.1f}% | {f['rss']:.0f} MB | {int(f['probes'])} | "
            f"{f['late_med'] * 1000:.0f} ms | {f['late_p95'] * 1000:.0f} ms | "
            f"{f['late_max'] * 1000:.0f} ms |"
        )
    body = "\n".join(
        [
            f"The daemon as a real process, liveness and real completion probes every "
            f"{interval_s:g} s (no jitter), endpoints served by {pools} sim processes "
            f"(`bench/sim_pool.py`), measured over {duration_s:g} s after start-up. "
            "CPU share is of "
            "one core; lateness is how long after its slot on the schedule each probe started "
            "(queueing included).",
            "",
            "| endpoints | daemon CPU | peak RSS | probes | late (median) | late (p95) "
            "| late (max) |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    write_section("Probe fan-out", body, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds; writes nothing")
    parser.add_argument("--sizes", default="10,100,500")
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--results", type=Path, default=None, help=f"default {RESULTS}")
    args = parser.parse_args()
    if args.smoke:
        asyncio.run(bench([5], 2, 1.0, 3.0, args.results))
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
        asyncio.run(bench(sizes, args.pools, args.interval, args.duration, args.results or RESULTS))


if __name__ == "__main__":
    main()

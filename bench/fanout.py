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
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, median, percentile, write_section
from supervisor.record.store.store import Store
from supervisor.record.store.target import PgTarget, StoreTarget

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TICK = os.sysconf("SC_CLK_TCK")
#: the daemon is not a systemd service here: no sd_notify, no watchdog
ENV = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}


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
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
        urls.extend(json.loads(line))
        procs.append(proc)
    return procs, urls


def fleet(folder: Path, urls: list[str], interval: str, store_url: str | None = None) -> Path:
    (folder / "playbooks").mkdir(exist_ok=True)
    probe = {
        "liveness_interval": interval,
        "completion_interval": interval,
        "timeout": "5s",
        "jitter": "0s",
    }
    document = {
        "store": {"url": store_url} if store_url else {"path": "state/supervisor.db"},
        "playbook": {"path": "playbooks"},
        "http": {"enabled": False},  # the default 127.0.0.1:9464 may be another daemon's
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


@dataclass(frozen=True, kw_only=True)
class Lateness:
    late: list[float]  #: seconds after its slot each probe in the window started
    scheduled: int  #: slots in the window (endpoints x tiers)
    failed: int  #: probes in the window that did not pass


async def lateness(db: StoreTarget, interval_s: float, window: tuple[float, float]) -> Lateness:
    """How late each probe started against its slot, for the slots inside `window` (epoch s).

    Every job is on one grid: the schedule starts liveness at its start time T and the deep
    probes at T + interval, then every interval after (APScheduler's interval trigger does not
    drift). T is taken as the first liveness probe's start; a probe belongs to the last slot at
    or before it (with a tenth of an interval of slack for T's own error), so a probe up to
    nine tenths of an interval late still counts against its own slot.
    """
    async with await Store.open(db, create=False) as store:
        names = [s.name for s in await store.snapshots()]
        samples = [row for name in names for row in await store.samples(name, limit=1_000_000)]
    live = [s.at.timestamp() for s in samples if s.tier == "liveness"]
    if not live:
        return Lateness(late=[], scheduled=0, failed=0)
    origin, slack = min(live), interval_s / 10
    late: list[float] = []
    failed = 0
    for s in samples:
        t = s.at.timestamp()
        k = math.floor((t - origin + slack) / interval_s)
        slot = origin + k * interval_s
        if window[0] <= slot < window[1]:
            late.append(max(0.0, t - slot))
            failed += s.outcome != "ok"
    first = math.ceil((window[0] - origin) / interval_s)
    end = math.ceil((window[1] - origin) / interval_s)  # slots k in [first, end)
    slots = max(0, end - max(first, 0)) + max(0, end - max(first, 1))  # liveness k>=0, deep k>=1
    return Lateness(late=late, scheduled=len(names) * slots, failed=failed)


async def started(daemon: asyncio.subprocess.Process, log: Path) -> None:
    """The daemon has scheduled its probes (its `started` log line), or a clear error."""
    deadline = time.monotonic() + 120
    while True:
        text = await asyncio.to_thread(log.read_text, errors="replace")
        if '"event": "started"' in text:
            return
        if daemon.returncode is not None:
            raise RuntimeError(f"the daemon exited ({daemon.returncode}):\n{text[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not start within 120 s:\n{text[-2000:]}")
        await asyncio.sleep(0.05)


def alive(daemon: asyncio.subprocess.Process, log: Path) -> None:
    if daemon.returncode is not None:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the daemon exited ({daemon.returncode}) during the run:\n{tail}")


async def one(
    endpoints: int,
    pools: int,
    interval_s: float,
    duration_s: float,
    store: PgTarget | None = None,  # PostgreSQL (bench/leadership.py) instead of the file
) -> dict[str, float]:
    procs, urls = await start_pools(endpoints, pools)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            config = fleet(folder, urls, f"{interval_s:g}s", store.url if store else None)
            if store is None:
                # the daemon starts on its store, as at every start but the first (making one
                # runs Alembic's revisions: ~4 MB more, bench/RESULTS.md)
                async with await Store.open(folder / "state" / "supervisor.db"):
                    pass
            log = folder / "daemon.log"
            with log.open("wb") as err:
                daemon = await asyncio.create_subprocess_exec(
                    *(sys.executable, "-m", "supervisor", "--config", str(config)),
                    *("run", "--log-format", "json"),
                    cwd=ROOT,
                    env=ENV,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=err,
                )
            try:
                await started(daemon, log)
                # start-up and the first liveness burst are not what is measured: the window
                # opens half an interval in, before the first deep round
                await asyncio.sleep(interval_s / 2)
                alive(daemon, log)
                cpu0, t0, w0 = cpu_seconds(daemon.pid), time.monotonic(), time.time()
                await asyncio.sleep(duration_s)
                alive(daemon, log)
                cpu1, t1, w1 = cpu_seconds(daemon.pid), time.monotonic(), time.time()
                rss = peak_rss_mb(daemon.pid)
            finally:
                if daemon.returncode is None:
                    daemon.terminate()
                await asyncio.wait_for(daemon.wait(), timeout=60)
            db = store or folder / "state" / "supervisor.db"
            found = await lateness(db, interval_s, (w0, w1))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            await proc.wait()
    late = found.late
    return {
        "cpu": 100 * (cpu1 - cpu0) / (t1 - t0),
        "rss": rss,
        "probes": len(late),
        "scheduled": found.scheduled,
        "failed": found.failed,
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
            f"| {n} | {f['cpu']:.1f}% | {f['rss']:.0f} MB | {int(f['probes'])} of "
            f"{int(f['scheduled'])} | {int(f['failed'])} | "
            f"{f['late_med'] * 1000:.0f} ms | {f['late_p95'] * 1000:.0f} ms | "
            f"{f['late_max'] * 1000:.0f} ms |"
        )
    body = "\n".join(
        [
            f"The daemon as a real process, liveness and real completion probes every "
            f"{interval_s:g} s with no jitter (every endpoint's probes fall due at the same "
            f"instant: the worst case), endpoints served by {pools} sim processes "
            f"(`bench/sim_pool.py`) on the same machine, measured over {duration_s:g} s after "
            "start-up. CPU share is the daemon's own (user + system) as a share of one core; "
            "peak RSS is its high-water mark. Probes: those that started in the window, of "
            "those scheduled in it (fewer: ticks were dropped while the worker was still busy); "
            "failed: probes that did not pass (there should be none). Lateness is how long "
            "after its slot on the schedule each probe started (queueing included; waiting "
            "for an HTTP connection is part of the probe, not of its lateness).",
            "",
            "| endpoints | daemon CPU | peak RSS | probes | failed | late (median) | late (p95) "
            "| late (max) |",
            "|---|---|---|---|---|---|---|---|",
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
    try:
        if args.smoke:
            asyncio.run(bench([5], 2, 1.0, 3.0, args.results))
        else:
            sizes = [int(s) for s in args.sizes.split(",")]
            results = args.results or RESULTS
            asyncio.run(bench(sizes, args.pools, args.interval, args.duration, results))
    except RuntimeError as exc:
        sys.exit(f"fanout: {exc}")


if __name__ == "__main__":
    main()

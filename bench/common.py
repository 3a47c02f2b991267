"""What every bench shares: timing figures, the machine it ran on, and writing its section of
`bench/RESULTS.md` (each bench owns one `## ` section and replaces only that one)."""

from __future__ import annotations

import os
import platform
import shlex
import statistics
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import yaml

from supervisor.core.aio import poll
from supervisor.record.store.target import PgTarget

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} CPUs{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def until(
    predicate: Callable[[], bool | Awaitable[bool]], *, within: float, what: str
) -> None:
    """Poll `predicate` every 20 ms until it holds; raise TimeoutError naming `what`."""
    if not await poll(predicate, within):
        raise TimeoutError(f"no {what} within {within:g} s")


def command() -> str:
    return ".venv/bin/python " + shlex.join([os.path.relpath(sys.argv[0]), *sys.argv[1:]])


def write_section(title: str, body: str, results: Path | None) -> None:
    """Print the section; with `results`, put it in that file in place of its older version."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"## {title}\n\n- command: `{command()}`\n- machine: {machine()}\n- run: {stamp}\n\n"
        f"{body.strip()}\n"
    )
    print(section)
    if results is None:
        return
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    parts = text.split("\n## ")
    head, sections = parts[0], [f"## {p}" for p in parts[1:]]
    kept = [s for s in sections if not s.startswith(f"## {title}\n")]
    kept.append(section)
    results.write_text(head.rstrip() + "\n\n" + "\n".join(s.rstrip() + "\n" for s in kept))


def instance_config(folder: Path, target: PgTarget, instance: str, lease: str) -> Path:
    """One instance's config on the shared PostgreSQL store: a dry-run supervisor of one
    health endpoint, no HTTP (the leadership benches run two of them)."""
    folder.mkdir(parents=True)
    (folder / "playbooks").mkdir()
    document = {
        "store": {"url": target.url, "instance": instance, "lease": lease},
        "playbook": {"path": "playbooks"},
        "http": {"enabled": False},
        "remediation": {"dry_run": True},
        "defaults": {"probe": {"liveness_interval": "1s", "jitter": "0s"}},
        "hosts": {"forge": {"local": True}},
        "endpoints": {"m": {"kind": "health", "url": "http://127.0.0.1:9/h"}},
    }
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path

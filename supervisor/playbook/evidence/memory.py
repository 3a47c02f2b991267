"""The `meminfo` collector: how much memory a host has free, and how much the page cache holds.

On a GB10 (unified memory) `nvidia-smi` cannot say; `/proc/meminfo` can: a starved box shows
MemFree of a few GiB while Cached holds ~100 GiB left over from earlier model loads.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
)
from supervisor.playbook.evidence.declare import collector, failed, failure, found, run_read

KIB_PER_GIB = 1024 * 1024
#: /proc/meminfo field -> fact
FIELDS = {
    "MemTotal": "mem_total_gib",
    "MemFree": "mem_free_gib",
    "MemAvailable": "mem_available_gib",
    "Cached": "cached_gib",
    "Buffers": "buffers_gib",
}


class MeminfoParams(CollectorParams):
    path: Annotated[str, Field(strict=True, min_length=1)] = "/proc/meminfo"


def meminfo_kib(text: str) -> dict[str, int]:
    """`Name:   1234 kB` lines -> {Name: KiB}; lines that are not numbers are skipped."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        words = rest.split()
        if sep and words and words[0].isascii() and words[0].isdigit():
            values[name.strip()] = int(words[0])
    return values


def gib(kib: int) -> float:
    return round(kib / KIB_PER_GIB, 1)


def parse_meminfo(text: str) -> dict[str, FactValue]:
    """The `meminfo` facts in GiB (one decimal); a field the file lacks is absent."""
    kib = meminfo_kib(text)
    facts: dict[str, FactValue] = {
        fact: gib(kib[name]) for name, fact in FIELDS.items() if name in kib
    }
    if "Cached" in kib and "Buffers" in kib:
        facts["cache_gib"] = gib(kib["Cached"] + kib["Buffers"])
    return facts


@collector(
    "meminfo",
    params=MeminfoParams,
    doc="memory free and held by the page cache: `cat /proc/meminfo` (no root)",
    facts={
        "mem_total_gib": "MemTotal, GiB",
        "mem_free_gib": "MemFree, GiB (tiny on a starved GB10)",
        "mem_available_gib": "MemAvailable, GiB",
        "cached_gib": "Cached, GiB",
        "buffers_gib": "Buffers, GiB",
        "cache_gib": "Cached + Buffers, GiB: what `drop_caches` can give back",
    },
)
async def meminfo(ctx: CollectContext, params: MeminfoParams) -> CollectedEvidence:
    result = await run_read(ctx, ["cat", "--", params.path])
    if not result.ok:
        return failed(failure("cat", result), result)
    facts = parse_meminfo(result.stdout)
    if not facts:
        return failed(f"{params.path} has no meminfo fields", result)
    return found(facts, result)

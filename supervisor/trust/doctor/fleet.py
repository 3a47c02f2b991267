"""Fleet checks: free space for the store on this box."""

from __future__ import annotations

import shutil

from supervisor.trust.doctor.context import DoctorContext
from supervisor.trust.doctor.model import Finding, fail, ok, warn
from supervisor.trust.doctor.registry import Over, check

GIB = 1024**3
WARN_BYTES = 1 * GIB
FAIL_BYTES = 100 * 1024**2


@check("store", over=Over.FLEET, doc="free space for the store (SQLite) on this box")
async def store(ctx: DoctorContext) -> list[Finding]:
    config = ctx.config.store
    if config.url is not None:
        return [ok("store", "space", "on PostgreSQL: its server keeps the space")]
    folder = config.path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    shown = f"{free / GIB:.1f} GiB free for {config.path}"
    fix = f"free space on the disk of {folder} (or move store.path)"
    if free < FAIL_BYTES:
        return [fail("store", "space", shown, fix)]
    if free < WARN_BYTES:
        return [warn("store", "space", shown, fix)]
    return [ok("store", "space", shown)]

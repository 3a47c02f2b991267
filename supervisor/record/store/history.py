"""The state log's writes: a subject entered a state (inside the transition's transaction), and
a run of the daemon starts (each subject's state stated again, after an `unsupervised` row where
the previous run was last seen) or is seen alive. Times are Unix milliseconds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.record.store.records import SubjectKind
from supervisor.record.store.schema import state_log, supervision

UNSUPERVISED = "unsupervised"
"""The state of every subject between two runs of the daemon (nobody watched)."""

Subject = tuple[SubjectKind, str, str]
"""(kind, name, state)"""


def ms(at: datetime) -> int:
    return round(at.timestamp() * 1000)


async def entered(
    conn: AsyncConnection, kind: SubjectKind, name: str, state: str, at: datetime
) -> None:
    await conn.execute(
        insert(state_log).values(subject_kind=kind.value, subject=name, state=state, at_ms=ms(at))
    )


async def run_started(
    conn: AsyncConnection, started: datetime, subjects: Sequence[Subject]
) -> None:
    start = ms(started)
    last_seen = (
        await conn.execute(
            select(func.max(supervision.c.seen_ms)).where(supervision.c.started_ms < start)
        )
    ).scalar()
    rows = []
    if last_seen is not None and last_seen < start:
        rows += [
            {"subject_kind": k.value, "subject": n, "state": UNSUPERVISED, "at_ms": last_seen}
            for k, n, _ in subjects
        ]
    rows += [
        {"subject_kind": k.value, "subject": n, "state": s, "at_ms": start} for k, n, s in subjects
    ]
    if rows:
        await conn.execute(insert(state_log), rows)
    await conn.execute(insert(supervision).values(started_ms=start, seen_ms=start))


async def seen(conn: AsyncConnection, started: datetime, at: datetime) -> None:
    await conn.execute(
        update(supervision).where(supervision.c.started_ms == ms(started)).values(seen_ms=ms(at))
    )

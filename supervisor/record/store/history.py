"""The state log's writes: a subject entered a state (inside the transition's transaction), and
a run of the daemon starts (each subject's state stated again, after an `unsupervised` row where
the previous run was last seen) or is seen alive. Times are Unix milliseconds.

Each row carries the time its subject had spent in each count (serving, down, silenced,
unsupervised) before it: the previous row's sums plus the previous state's span. A row never
goes back in time: one stamped before its subject's latest row (a wall clock set back) is
stamped at that row's time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.judge.machine import State
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.schema import state_log, supervision

UNSUPERVISED = "unsupervised"
"""The state of every subject between two runs of the daemon (nobody watched)."""


class Counted(StrEnum):
    """What a state's time counts as (each a running-sum column of `state_log`)."""

    SERVING = "serving"
    DOWN = "down"
    SILENCED = "silenced"
    UNSUPERVISED = "unsupervised"

    @property
    def column(self) -> str:
        return f"{self.value}_ms"


COUNTS: Mapping[str, Counted] = {
    State.HEALTHY: Counted.SERVING,
    State.IDLE: Counted.SERVING,  # answers; its model loads on demand
    State.BUSY: Counted.SERVING,  # answers, under load
    State.DEGRADED: Counted.SERVING,  # answers, badly (the board shows it apart)
    State.STARTING: Counted.DOWN,  # failing inside its startup grace
    State.DOWN: Counted.DOWN,
    State.UNREACHABLE: Counted.DOWN,
    State.REMEDIATING: Counted.DOWN,
    State.VERIFYING: Counted.DOWN,
    State.ESCALATED: Counted.DOWN,
    State.MAINTENANCE: Counted.SILENCED,
    State.UNKNOWN: Counted.UNSUPERVISED,
    UNSUPERVISED: Counted.UNSUPERVISED,
    "reachable": Counted.SERVING,  # a host's (`supervisor.hear.reachability`)
    "unreachable": Counted.DOWN,
}
"""state -> what its time counts as (a state not listed: unsupervised)."""

SUMS = tuple(state_log.c[c.column] for c in Counted)

Subject = tuple[SubjectKind, str, str]
"""(kind, name, state)"""


def counted(state: str) -> Counted:
    return COUNTS.get(state, Counted.UNSUPERVISED)


def ms(at: datetime) -> int:
    return round(at.timestamp() * 1000)


async def _enter(conn: AsyncConnection, kind: SubjectKind, name: str, state: str, at: int) -> None:
    last = (
        await conn.execute(
            select(state_log.c.state, state_log.c.at_ms, *SUMS)
            .where(state_log.c.subject_kind == kind.value, state_log.c.subject == name)
            .order_by(state_log.c.at_ms.desc(), state_log.c.id.desc())
            .limit(1)
        )
    ).first()
    sums = {c.column: 0 for c in Counted}
    if last is not None:
        at = max(at, last.at_ms)
        sums = {c.column: getattr(last, c.column) for c in Counted}
        sums[counted(last.state).column] += at - last.at_ms
    await conn.execute(
        insert(state_log).values(
            subject_kind=kind.value, subject=name, state=state, at_ms=at, **sums
        )
    )


async def entered(
    conn: AsyncConnection, kind: SubjectKind, name: str, state: str, at: datetime
) -> None:
    await _enter(conn, kind, name, state, ms(at))


async def run_started(
    conn: AsyncConnection, started: datetime, subjects: Sequence[Subject]
) -> None:
    start = ms(started)
    last_seen = (
        await conn.execute(
            select(func.max(supervision.c.seen_ms)).where(supervision.c.started_ms < start)
        )
    ).scalar()
    for kind, name, state in subjects:
        if last_seen is not None and last_seen < start:
            await _enter(conn, kind, name, UNSUPERVISED, last_seen)
        await _enter(conn, kind, name, state, start)
    await conn.execute(insert(supervision).values(started_ms=start, seen_ms=start))


async def seen(conn: AsyncConnection, started: datetime, at: datetime) -> None:
    await conn.execute(
        update(supervision).where(supervision.c.started_ms == ms(started)).values(seen_ms=ms(at))
    )

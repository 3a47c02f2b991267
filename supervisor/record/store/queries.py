"""The read side: rows to records. Every function runs inside a transaction the caller holds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Executable, RowMapping, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.record.store.records import (
    IncidentRow,
    SampleRow,
    Snapshot,
    SubjectKind,
    TimelineRow,
)
from supervisor.record.store.schema import incidents, samples, snapshots, timeline
from supervisor.record.timeline.base import kind_of


def to_snapshot(m: RowMapping) -> Snapshot:
    return Snapshot(**{**m, "kind": SubjectKind(m["kind"])})


def to_incident(m: RowMapping) -> IncidentRow:
    return IncidentRow(
        id=m["id"],
        subject_kind=SubjectKind(m["subject_kind"]),
        subject=m["subject"],
        opened_at=m["opened_at"],
        closed_at=m["closed_at"],
        symptom=m["cause"],
        diagnosis=m["diagnosis"] or "",
        resolution=m["resolution"],
        last_state=m["last_state"],
        entries=m["entries"],
    )


def to_timeline_row(m: RowMapping) -> TimelineRow:
    return TimelineRow(**{**m, "kind": kind_of(m["kind"])})


async def _mappings(conn: AsyncConnection, query: Executable) -> Sequence[RowMapping]:
    return (await conn.execute(query)).mappings().all()


async def _first(conn: AsyncConnection, query: Executable) -> RowMapping | None:
    return (await conn.execute(query)).mappings().first()


async def snapshot_list(conn: AsyncConnection, kind: SubjectKind | None) -> list[Snapshot]:
    query = select(snapshots).order_by(snapshots.c.kind, snapshots.c.name)
    if kind is not None:
        query = query.where(snapshots.c.kind == kind.value)
    return [to_snapshot(m) for m in await _mappings(conn, query)]


async def snapshot_one(conn: AsyncConnection, kind: SubjectKind, name: str) -> Snapshot | None:
    query = select(snapshots).where(snapshots.c.kind == kind.value, snapshots.c.name == name)
    m = await _first(conn, query)
    return None if m is None else to_snapshot(m)


def _is_open(kind: SubjectKind, name: str) -> ColumnElement[bool]:
    """The subject's open incident (served by the partial unique index)."""
    return and_(
        incidents.c.subject_kind == kind.value,
        incidents.c.subject == name,
        incidents.c.closed_at.is_(None),
    )


async def open_incident_id(conn: AsyncConnection, kind: SubjectKind, name: str) -> int | None:
    found = await conn.execute(select(incidents.c.id).where(_is_open(kind, name)))
    return found.scalar_one_or_none()


async def recently_closed_id(
    conn: AsyncConnection, kind: SubjectKind, name: str, since: datetime
) -> int | None:
    """The subject's latest incident if it closed at or after `since` (a flap reopens it)."""
    found = await conn.execute(
        select(incidents.c.id)
        .where(
            incidents.c.subject_kind == kind.value,
            incidents.c.subject == name,
            incidents.c.closed_at >= since,
        )
        .order_by(incidents.c.id.desc())
        .limit(1)
    )
    return found.scalar_one_or_none()


async def open_incident(conn: AsyncConnection, kind: SubjectKind, name: str) -> IncidentRow | None:
    m = await _first(conn, select(incidents).where(_is_open(kind, name)))
    return None if m is None else to_incident(m)


async def incident_one(conn: AsyncConnection, incident_id: int) -> IncidentRow | None:
    m = await _first(conn, select(incidents).where(incidents.c.id == incident_id))
    return None if m is None else to_incident(m)


async def incident_list(
    conn: AsyncConnection,
    *,
    subject: str | None,
    since: datetime | None,
    open_only: bool,
    limit: int | None,
) -> list[IncidentRow]:
    """Newest first; `since` keeps those opened or closed at/after it, and those still open."""
    query = select(incidents).order_by(incidents.c.opened_at.desc(), incidents.c.id.desc())
    if subject is not None:
        query = query.where(incidents.c.subject == subject)
    if open_only:
        query = query.where(incidents.c.closed_at.is_(None))
    if since is not None:
        query = query.where(
            or_(
                incidents.c.opened_at >= since,
                incidents.c.closed_at.is_(None),
                incidents.c.closed_at >= since,
            )
        )
    if limit is not None:
        query = query.limit(limit)
    return [to_incident(m) for m in await _mappings(conn, query)]


async def timeline_of(conn: AsyncConnection, incident_id: int) -> list[TimelineRow]:
    query = select(timeline).where(timeline.c.incident_id == incident_id).order_by(timeline.c.id)
    return [to_timeline_row(m) for m in await _mappings(conn, query)]


async def samples_of(conn: AsyncConnection, endpoint: str, limit: int) -> list[SampleRow]:
    query = (
        select(samples)
        .where(samples.c.endpoint == endpoint)
        .order_by(samples.c.at.desc(), samples.c.id.desc())
        .limit(limit)
    )
    return [SampleRow(**m) for m in await _mappings(conn, query)]


async def timeline_end(conn: AsyncConnection) -> int:
    """The timeline's last id (0 when empty)."""
    last = (await conn.execute(select(func.max(timeline.c.id)))).scalar_one()
    return int(last or 0)

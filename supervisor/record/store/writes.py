"""The store's write statements: rows of incidents, timeline entries, snapshots and samples,
each run inside a transaction the `Store` opened (the reads are
`supervisor.record.store.queries`). Each write of the `Store` is one call here, so a queued
write replayed later (`supervisor.record.store.apply`) runs the very same statements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import delete, insert, update
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.core.events import ProbeResult
from supervisor.record.store import history, queries
from supervisor.record.store.dialect import Upsert, upsert_for
from supervisor.record.store.errors import StoreError
from supervisor.record.store.listen import TIMELINE, notify
from supervisor.record.store.records import Snapshot, TimelineEntry
from supervisor.record.store.schema import attempts, incidents, samples, snapshots, timeline
from supervisor.record.timeline.codec import encode
from supervisor.record.timeline.repair import Diagnosis


async def require_incident(conn: AsyncConnection, incident_id: int) -> None:
    if await queries.incident_one(conn, incident_id) is None:
        raise StoreError(f"no incident {incident_id}")


def new_id(key: Any) -> int:
    return int(key[0])


async def insert_entry(conn: AsyncConnection, incident_id: int, entry: TimelineEntry) -> int:
    """Append the entry's record (tag, version, payload, rendered summary); a diagnosis that
    matched a rule becomes its incident's `diagnosis` (what `cause` shows from then on)."""
    record = entry.record
    result = await conn.execute(
        insert(timeline).values(
            incident_id=incident_id,
            at=entry.at,
            kind=record.kind.value,
            subject=entry.subject,
            summary=record.summary,
            data=encode(record),
            type=record.tag,
            version=record.version,
        )
    )
    if isinstance(record, Diagnosis) and record.cause:
        await conn.execute(
            update(incidents).where(incidents.c.id == incident_id).values(diagnosis=record.cause)
        )
    entry_id = new_id(result.inserted_primary_key)
    await notify(conn, TIMELINE, str(entry_id))  # on commit: followers' pages stream it
    return entry_id


async def transition(
    conn: AsyncConnection,
    *,
    snapshot: Snapshot,
    entry: TimelineEntry,
    open_cause: str | None,
    close_resolution: str | None,
    reopen_within: timedelta | None,
) -> int | None:
    """`Store.transition`'s statements: the incident's id (None: no incident)."""
    incident_id = await queries.open_incident_id(conn, snapshot.kind, snapshot.name)
    if incident_id is None and open_cause is not None and reopen_within is not None:
        since = entry.at - reopen_within
        incident_id = await queries.recently_closed_id(conn, snapshot.kind, snapshot.name, since)
        if incident_id is not None:
            await conn.execute(
                update(incidents)
                .where(incidents.c.id == incident_id)
                .values(closed_at=None, resolution=None)
            )
    if incident_id is None and open_cause is not None:
        created = await conn.execute(
            insert(incidents).values(
                subject_kind=snapshot.kind.value,
                subject=snapshot.name,
                opened_at=entry.at,
                cause=open_cause,
                last_state=snapshot.state,
            )
        )
        incident_id = new_id(created.inserted_primary_key)
    still_open = incident_id
    if incident_id is not None:
        await insert_entry(conn, incident_id, entry)
        changes: dict[str, Any] = {"last_state": snapshot.state}
        if close_resolution is not None:
            changes |= {"closed_at": entry.at, "resolution": close_resolution}
            still_open = None
        await conn.execute(update(incidents).where(incidents.c.id == incident_id).values(**changes))
    await upsert_snapshot(conn, replace(snapshot, incident_id=still_open))
    await history.entered(conn, snapshot.kind, snapshot.name, snapshot.state, entry.at)
    return incident_id


async def append(conn: AsyncConnection, incident_id: int, entry: TimelineEntry) -> int:
    """`Store.append`'s statements: the new row's id."""
    await require_incident(conn, incident_id)
    return await insert_entry(conn, incident_id, entry)


async def save_snapshots(
    conn: AsyncConnection, saves: Sequence[tuple[Snapshot, ProbeResult | None]]
) -> None:
    """Snapshots (each with the sample that led to it, if any), in order."""
    for incident_id in dict.fromkeys(snapshot.incident_id for snapshot, _ in saves):
        if incident_id is not None:
            await require_incident(conn, incident_id)
    await upsert_snapshots(conn, [snapshot for snapshot, _ in saves])
    found = [sample for _, sample in saves if sample is not None]
    if found:
        await insert_samples(conn, found)


async def prune_samples(conn: AsyncConnection, older_than: datetime) -> int:
    result = await conn.execute(delete(samples).where(samples.c.at < older_than))
    return result.rowcount


async def start_attempt(
    conn: AsyncConnection,
    *,
    endpoint: str,
    rule_id: str,
    incident_id: int | None,
    at: datetime,
    epoch: int | None,
) -> int:
    created = await conn.execute(
        insert(attempts).values(
            endpoint=endpoint, rule_id=rule_id, incident_id=incident_id, started_at=at, epoch=epoch
        )
    )
    return new_id(created.inserted_primary_key)


async def finish_attempt(
    conn: AsyncConnection, attempt_id: int, *, at: datetime, outcome: str
) -> None:
    await conn.execute(
        update(attempts).where(attempts.c.id == attempt_id).values(finished_at=at, outcome=outcome)
    )


#: the snapshot's columns, in the order the upsert names them; (kind, name) is its key
_SNAPSHOT_KEY = ("kind", "name")
_SNAPSHOT_COLUMNS = (
    *_SNAPSHOT_KEY,
    "state",
    "since",
    "incident_id",
    "fail_streak",
    "degraded_streak",
    "grace_until",
    "last_ok_at",
    "last_ttft_s",
    "last_tok_s",
    "last_reason",
    "updated_at",
)


@cache
def _snapshot_upsert(dialect: str) -> Upsert:
    """Built once per dialect and executed with each snapshot's values as parameters: a
    statement built per call costs more CPU than SQLite spends writing the row (its
    `excluded` columns and cache key are made anew each time)."""
    statement = upsert_for(dialect, snapshots)
    return statement.on_conflict_do_update(
        index_elements=[snapshots.c.kind, snapshots.c.name],
        set_={k: statement.excluded[k] for k in _SNAPSHOT_COLUMNS if k not in _SNAPSHOT_KEY},
    )


async def upsert_snapshot(conn: AsyncConnection, snapshot: Snapshot) -> None:
    await upsert_snapshots(conn, [snapshot])


async def upsert_snapshots(conn: AsyncConnection, snapshots: Sequence[Snapshot]) -> None:
    """One statement for all (executed once per row by the driver, in order: a later snapshot
    of the same subject wins)."""
    await conn.execute(
        _snapshot_upsert(conn.dialect.name), [_snapshot_values(s) for s in snapshots]
    )


def _snapshot_values(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "kind": snapshot.kind.value,
        "name": snapshot.name,
        "state": snapshot.state,
        "since": snapshot.since,
        "incident_id": snapshot.incident_id,
        "fail_streak": snapshot.fail_streak,
        "degraded_streak": snapshot.degraded_streak,
        "grace_until": snapshot.grace_until,
        "last_ok_at": snapshot.last_ok_at,
        "last_ttft_s": snapshot.last_ttft_s,
        "last_tok_s": snapshot.last_tok_s,
        "last_reason": snapshot.last_reason,
        "updated_at": snapshot.updated_at,
    }


#: built once (see `_snapshot_upsert`)
_INSERT_SAMPLE = insert(samples)


async def insert_sample(conn: AsyncConnection, result: ProbeResult) -> None:
    await insert_samples(conn, [result])


async def insert_samples(conn: AsyncConnection, results: Sequence[ProbeResult]) -> None:
    await conn.execute(_INSERT_SAMPLE, [_sample_values(r) for r in results])


def _sample_values(result: ProbeResult) -> dict[str, Any]:
    return {
        "endpoint": result.endpoint,
        "at": result.at,
        "tier": result.tier.value,
        "check": result.check,
        "outcome": result.outcome.value,
        "reason": result.reason,
        "latency_s": result.latency_s,
        "http_status": result.http_status,
        "ttft_s": result.ttft_s,
        "tok_s": result.tok_s,
        "tokens": result.tokens,
    }

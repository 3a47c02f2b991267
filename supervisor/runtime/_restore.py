"""What the last run left in the store: its unfinished repairs closed as `interrupted`, and each
subject's snapshot with its open incident reattached. Read when the daemon starts and when a
reload adds an endpoint or a host."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import structlog

from supervisor.record.store.records import AttemptRow, Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.repair import INTERRUPTED, AttemptFinished

log = structlog.get_logger("supervisor.daemon")


STOPPED = "the daemon stopped"


async def close_interrupted(store: Store, now: datetime, *, why: str = STOPPED) -> list[AttemptRow]:
    """Repairs a killed (or deposed) daemon left unfinished: marked `interrupted`, in their
    incident too, with `why` (`the daemon stopped`, `deposed: b leads with epoch 3`). Every
    step that started has its `step_started` entry (written before it ran), its outcome unknown.

    They still count against the budgets; their steps are never resumed half-way: the endpoint is
    judged afresh, and a new attempt (if the budget allows) starts from a fresh diagnosis.
    """
    interrupted = [a for a in await store.attempts() if a.finished_at is None]
    for attempt in interrupted:
        await store.finish_attempt(attempt.id, at=now, outcome=INTERRUPTED)
        if attempt.incident_id is None:
            continue
        record = AttemptFinished(
            attempt=attempt.id, rule=attempt.rule_id, outcome=INTERRUPTED, why=why
        )
        entry = TimelineEntry(at=now, subject=attempt.endpoint, record=record)
        await store.append(attempt.incident_id, entry)
        log.warning("attempt interrupted", endpoint=attempt.endpoint, attempt=attempt.id, why=why)
    return interrupted


async def stored_snapshot(store: Store, kind: SubjectKind, name: str) -> Snapshot | None:
    """The stored snapshot, with its incident reattached if the store still has one open."""
    snapshot = await store.snapshot(kind, name)
    incident = await store.open_incident(kind, name)
    if snapshot is None:
        return None
    incident_id = incident.id if incident is not None else None
    return replace(snapshot, incident_id=incident_id)

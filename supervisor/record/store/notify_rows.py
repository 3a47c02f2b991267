"""The notifier's write statements (the composer's cursor and memories, outbox rows and their
marks, threads), each run inside a transaction its caller opened: `OutboxStore`
(`supervisor.record.store.outbox`) and a queued write replayed later
(`supervisor.record.store.apply`) run the very same ones."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.record.store.dialect import upsert
from supervisor.record.store.records import OutboxRow
from supervisor.record.store.schema import (
    notify_cursor,
    notify_incidents,
    notify_threads,
    outbox,
)
from supervisor.record.store.writes import new_id
from supervisor.record.timeline.base import JSONValue

State = Mapping[str, JSONValue]
"""What the composer remembers about one incident (JSON)."""

CURSOR = "composer"


async def cursor(conn: AsyncConnection) -> int | None:
    found = await conn.execute(
        select(notify_cursor.c.last_id).where(notify_cursor.c.name == CURSOR)
    )
    value = found.scalar_one_or_none()
    return None if value is None else int(value)


async def set_cursor(conn: AsyncConnection, last_id: int) -> None:
    statement = upsert(conn, notify_cursor).values(name=CURSOR, last_id=last_id)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[notify_cursor.c.name], set_={"last_id": last_id}
        )
    )


async def states(conn: AsyncConnection, ids: Iterable[int]) -> dict[int, State]:
    found = await conn.execute(
        select(notify_incidents).where(notify_incidents.c.incident_id.in_(list(ids)))
    )
    return {m["incident_id"]: dict(m["state"]) for m in found.mappings().all()}


async def put_state(conn: AsyncConnection, incident_id: int, state: State, active: bool) -> None:
    statement = upsert(conn, notify_incidents).values(
        incident_id=incident_id, state=dict(state), active=int(active)
    )
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[notify_incidents.c.incident_id],
            set_={"state": statement.excluded.state, "active": statement.excluded.active},
        )
    )


async def insert_row(conn: AsyncConnection, row: OutboxRow, incident_id: int | None) -> int:
    """A message to send: composed now, or kept in memory as it stands (sent, failed, given up),
    under its incident's real id; the id the store gave it (its own is not written)."""
    values = asdict(row) | {"incident_id": incident_id, "given_up": int(row.given_up)}
    del values["id"]
    created = await conn.execute(insert(outbox).values(**values))
    return new_id(created.inserted_primary_key)


async def update_row(conn: AsyncConnection, row_id: int, values: Mapping[str, object]) -> None:
    """Set `values` on a stored row; `attempts` in them counts one more failed try."""
    changes = dict(values)
    if "attempts" in changes:
        changes["attempts"] = outbox.c.attempts + 1
    await conn.execute(update(outbox).where(outbox.c.id == row_id).values(**changes))


async def start_thread(
    conn: AsyncConnection, incident_id: int, chat_id: int, message_id: int
) -> None:
    await conn.execute(
        upsert(conn, notify_threads)
        .values(incident_id=incident_id, chat_id=chat_id, message_id=message_id)
        .on_conflict_do_nothing()
    )

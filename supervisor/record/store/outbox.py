"""The notifier's tables: the composer's cursor over the timeline, the outbox of messages to
send (in order, each marked when sent), one Telegram thread per incident and chat, what the
composer remembers about each incident, and refused chat users.

A thin layer over `Store.tx`: every call is one transaction, so the cursor and the messages it
produced are written together (a restart neither loses nor repeats one).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, insert, inspect, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.record.store import queries
from supervisor.record.store.dialect import schema_lock, upsert
from supervisor.record.store.records import IncidentRow, JSONValue, TimelineRow
from supervisor.record.store.schema import (
    NOTIFY_TABLES,
    incidents,
    notify_cursor,
    notify_incidents,
    notify_metadata,
    notify_refusals,
    notify_threads,
    outbox,
    timeline,
)
from supervisor.record.store.store import Store

State = Mapping[str, JSONValue]
"""What the composer remembers about one incident (JSON)."""

_CURSOR = "composer"


@dataclass(frozen=True, kw_only=True)
class Draft:
    """A message to queue for every chat."""

    kind: str  #: opened, diagnosis, plan, repair, escalated, resolved, flapping, reminder, test
    text: str  #: Telegram HTML
    incident_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class OutboxRow:
    id: int
    created_at: datetime
    chat_id: int
    incident_id: int | None
    kind: str
    text: str
    parts_sent: int  #: parts of a long text already delivered
    attempts: int  #: failed tries so far
    last_error: str
    sent_at: datetime | None
    message_id: int | None  #: Telegram's id of the first part
    given_up: bool  #: Telegram refused it for good (e.g. chat not found)
    epoch: int | None = None  #: the leader's epoch it was composed under (None: unfenced)


@dataclass(frozen=True, kw_only=True)
class Refusal:
    id: int
    at: datetime
    user_id: int | None
    chat_id: int | None
    username: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Batch:
    """Timeline rows after the cursor, with their incidents and the composer's memory of them."""

    rows: list[TimelineRow]
    incidents: dict[int, IncidentRow]
    states: dict[int, State]


def _create(conn: Connection) -> None:
    notify_metadata.create_all(conn, tables=list(NOTIFY_TABLES), checkfirst=True)
    if "epoch" not in {c["name"] for c in inspect(conn).get_columns("outbox")}:
        conn.exec_driver_sql("ALTER TABLE outbox ADD COLUMN epoch INTEGER")  # before leadership


class OutboxStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def ensure(self) -> None:
        """Create the notifier's tables if this store predates them."""
        async with self.store.tx(write=True) as conn:
            await schema_lock(conn)
            await conn.run_sync(_create)

    # -- the composer ----------------------------------------------------------------------

    async def cursor(self) -> int | None:
        async with self.store.tx(write=False) as conn:
            return await _cursor(conn)

    async def start_cursor(self) -> int:
        """The cursor; on first use, the timeline's end (history is not announced)."""
        async with self.store.tx(write=True) as conn:
            current = await _cursor(conn)
            if current is not None:
                return current
            last = (await conn.execute(select(func.max(timeline.c.id)))).scalar_one()
            await _set_cursor(conn, int(last or 0))
            return int(last or 0)

    async def batch(self, after: int, *, limit: int = 200) -> Batch:
        async with self.store.tx(write=False) as conn:
            result = await conn.execute(
                select(timeline).where(timeline.c.id > after).order_by(timeline.c.id).limit(limit)
            )
            rows = [queries.to_timeline_row(m) for m in result.mappings().all()]
            ids = sorted({r.incident_id for r in rows})
            found = await conn.execute(select(incidents).where(incidents.c.id.in_(ids)))
            incident_rows = {m["id"]: queries.to_incident(m) for m in found.mappings().all()}
            states = await _states(conn, ids)
        return Batch(rows=rows, incidents=incident_rows, states=states)

    async def active(self) -> tuple[dict[int, State], dict[int, IncidentRow]]:
        """Incidents with something timed pending (a reminder, a held 'resolved')."""
        async with self.store.tx(write=False) as conn:
            found = await conn.execute(
                select(notify_incidents).where(notify_incidents.c.active == 1)
            )
            states: dict[int, State] = {
                m["incident_id"]: dict(m["state"]) for m in found.mappings().all()
            }
            rows = await conn.execute(select(incidents).where(incidents.c.id.in_(list(states))))
            return states, {m["id"]: queries.to_incident(m) for m in rows.mappings().all()}

    async def commit(
        self,
        *,
        drafts: Sequence[Draft],
        chat_ids: Sequence[int],
        states: Mapping[int, tuple[State, bool]],
        at: datetime,
        cursor: int | None = None,
    ) -> None:
        """Queue `drafts` for every chat, save states (with their `active` flag) and the cursor,
        all in one transaction."""
        async with self.store.tx(write=True) as conn:
            for draft in drafts:
                for chat_id in chat_ids:
                    await conn.execute(
                        insert(outbox).values(
                            created_at=at,
                            chat_id=chat_id,
                            incident_id=draft.incident_id,
                            kind=draft.kind,
                            text=draft.text,
                            epoch=self.store.fence_epoch,
                        )
                    )
            for incident_id, (state, active) in states.items():
                await _put_state(conn, incident_id, state, active)
            if cursor is not None:
                await _set_cursor(conn, cursor)

    async def state(self, incident_id: int) -> State | None:
        async with self.store.tx(write=False) as conn:
            return (await _states(conn, [incident_id])).get(incident_id)

    async def put_state(self, incident_id: int, state: State, *, active: bool) -> None:
        async with self.store.tx(write=True) as conn:
            await _put_state(conn, incident_id, state, active)

    # -- the sender ------------------------------------------------------------------------

    async def pending(self, *, limit: int = 50) -> list[OutboxRow]:
        """Unsent messages, oldest first."""
        query = (
            select(outbox)
            .where(outbox.c.sent_at.is_(None), outbox.c.given_up == 0)
            .order_by(outbox.c.id)
            .limit(limit)
        )
        return await self._rows(query)

    async def messages(self) -> list[OutboxRow]:
        """Every queued message, sent or not, oldest first."""
        return await self._rows(select(outbox).order_by(outbox.c.id))

    async def _rows(self, query: object) -> list[OutboxRow]:
        async with self.store.tx(write=False) as conn:
            result = await conn.execute(query)  # type: ignore[call-overload]
            return [_outbox_row(m) for m in result.mappings().all()]

    async def part_sent(
        self, row_id: int, *, parts: int, message_id: int | None, at: datetime, done: bool
    ) -> None:
        """`parts` parts are delivered; `done` marks the row sent."""
        values: dict[str, object] = {"parts_sent": parts}
        if message_id is not None:
            values["message_id"] = message_id
        if done:
            values["sent_at"] = at
        async with self.store.tx(write=True) as conn:
            await conn.execute(update(outbox).where(outbox.c.id == row_id).values(**values))

    async def failed(self, row_id: int, *, error: str, give_up: bool) -> None:
        async with self.store.tx(write=True) as conn:
            await conn.execute(
                update(outbox)
                .where(outbox.c.id == row_id)
                .values(attempts=outbox.c.attempts + 1, last_error=error, given_up=int(give_up))
            )

    async def thread(self, incident_id: int, chat_id: int) -> int | None:
        """The Telegram message the incident's thread replies to in that chat."""
        async with self.store.tx(write=False) as conn:
            found = await conn.execute(
                select(notify_threads.c.message_id).where(
                    notify_threads.c.incident_id == incident_id,
                    notify_threads.c.chat_id == chat_id,
                )
            )
            value = found.scalar_one_or_none()
            return None if value is None else int(value)

    async def start_thread(self, incident_id: int, chat_id: int, message_id: int) -> None:
        async with self.store.tx(write=True) as conn:
            await conn.execute(
                upsert(conn, notify_threads)
                .values(incident_id=incident_id, chat_id=chat_id, message_id=message_id)
                .on_conflict_do_nothing()
            )

    # -- who may speak ---------------------------------------------------------------------

    async def refuse(
        self, *, at: datetime, user_id: int | None, chat_id: int | None, username: str, text: str
    ) -> None:
        async with self.store.tx(write=True) as conn:
            await conn.execute(
                insert(notify_refusals).values(
                    at=at, user_id=user_id, chat_id=chat_id, username=username, text=text
                )
            )

    async def refusals(self) -> list[Refusal]:
        async with self.store.tx(write=False) as conn:
            found = await conn.execute(select(notify_refusals).order_by(notify_refusals.c.id))
            return [Refusal(**m) for m in found.mappings().all()]


async def _cursor(conn: AsyncConnection) -> int | None:
    found = await conn.execute(
        select(notify_cursor.c.last_id).where(notify_cursor.c.name == _CURSOR)
    )
    value = found.scalar_one_or_none()
    return None if value is None else int(value)


async def _set_cursor(conn: AsyncConnection, last_id: int) -> None:
    statement = upsert(conn, notify_cursor).values(name=_CURSOR, last_id=last_id)
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[notify_cursor.c.name], set_={"last_id": last_id}
        )
    )


async def _states(conn: AsyncConnection, ids: Iterable[int]) -> dict[int, State]:
    found = await conn.execute(
        select(notify_incidents).where(notify_incidents.c.incident_id.in_(list(ids)))
    )
    return {m["incident_id"]: dict(m["state"]) for m in found.mappings().all()}


async def _put_state(conn: AsyncConnection, incident_id: int, state: State, active: bool) -> None:
    statement = upsert(conn, notify_incidents).values(
        incident_id=incident_id, state=dict(state), active=int(active)
    )
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[notify_incidents.c.incident_id],
            set_={"state": statement.excluded.state, "active": statement.excluded.active},
        )
    )


def _outbox_row(m: Mapping[str, object]) -> OutboxRow:
    values = dict(m)
    values["given_up"] = bool(values["given_up"])
    return OutboxRow(**values)  # type: ignore[arg-type]

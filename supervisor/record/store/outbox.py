"""The notifier's tables: the composer's cursor over the timeline, the outbox of messages to
send (in order, each marked when sent), one Telegram thread per incident and chat, what the
composer remembers about each incident, and refused chat users.

A thin layer over `Store.tx`: every call is one transaction, so the cursor and the messages it
produced are written together (a restart neither loses nor repeats one). While a
`ResilientStore` cannot take writes, what would be written is kept in memory and queued behind
its other writes (`supervisor.record.store.held_outbox`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import insert, select

from supervisor.record.store import notify_rows, queries
from supervisor.record.store.apply import Ids, Result, apply
from supervisor.record.store.errors import StoreRefusedError
from supervisor.record.store.held_outbox import MemoryOutbox
from supervisor.record.store.notify_rows import State
from supervisor.record.store.queued import (
    KeptState,
    OutboxCursor,
    OutboxMark,
    OutboxRows,
    OutboxThread,
    Write,
)
from supervisor.record.store.records import IncidentRow, OutboxRow, TimelineRow
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.schema import (
    incidents,
    notify_incidents,
    notify_refusals,
    notify_threads,
    outbox,
    timeline,
)
from supervisor.record.store.store import Store


@dataclass(frozen=True, kw_only=True)
class OutboxDraft:
    """A message to queue for every chat."""

    kind: str  #: opened, diagnosis, plan, repair, escalated, resolved, flapping, reminder, test
    text: str  #: Telegram HTML
    incident_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class OutboxRefusal:
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


class OutboxStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.memory = MemoryOutbox()
        self._refusal = ""  #: the last refusal of the store (for an outage it begins)
        self._row_ids = store.row_ids if isinstance(store, ResilientStore) else {}  #: its map
        if isinstance(store, ResilientStore):
            store.on_outage.append(self._outage)
            store.after_apply.append(self._applied)

    def _outage(self, error: str) -> None:
        if not error:
            self.memory.cleared()

    def _applied(self, write: Write, result: Result) -> None:
        """The store took a round of messages kept in memory: they are its rows now (those
        sent or given up meanwhile marked so, until their marks, queued behind, are taken)."""
        if not isinstance(write, OutboxRows) or result is None:
            return
        memory = self.memory
        ids, moved = result.get("ids"), result.get("cursor")
        for row, real in zip(write.rows, ids if isinstance(ids, list) else [], strict=False):
            if not isinstance(real, int):
                continue
            kept = memory.rows.pop(row.id, None)
            if kept is not None and (kept.sent_at is not None or kept.given_up):
                memory.done.add(real)
        if write.past_held and isinstance(moved, int):
            memory.floor = max(memory.floor, moved)

    def _queueing(self) -> ResilientStore | None:
        """The store, while its writes are queued (the notifier's go to memory meanwhile)."""
        store = self.store
        return store if isinstance(store, ResilientStore) and store.queued else None

    def _resilient(self, err: StoreRefusedError) -> ResilientStore:
        """After a refused call: the store that queues, or the error again."""
        if isinstance(self.store, ResilientStore):
            self._refusal = str(err)
            return self.store
        raise err

    # -- the composer ----------------------------------------------------------------------

    async def cursor(self) -> int | None:
        async with self.store.tx(write=False) as conn:
            return await notify_rows.cursor(conn)

    async def start_cursor(self) -> int:
        """The cursor; on first use, the timeline's end (history is not announced). While the
        store takes reads but not writes (a full disk), a first use's cursor is read and its
        write queued behind the store's others."""
        async with self.store.tx(write=False) as conn:
            current = await notify_rows.cursor(conn)
            if current is not None:
                return current
            write = OutboxCursor(last=await queries.timeline_end(conn))
        try:
            async with self.store.tx(write=True) as conn:
                await apply(conn, write, Ids())  # unless one was set meanwhile
        except StoreRefusedError as err:
            self._resilient(err).queue(write, error=self._refusal)
        return write.last

    async def batch(self, after: int, *, limit: int = 200) -> Batch:
        """The timeline rows after `after` (the stored ones, then those the store has not
        taken yet: negative ids), their incidents and the composer's memories of them."""
        after = max(after, self.memory.floor)
        queueing = self._queueing()
        if queueing is not None and queueing.flushing:
            # the held entries being written: read from the table they would be composed again
            # (the composer's write that moves its cursor past them is queued behind them)
            return self._with_held(queueing, [], {}, {}, limit)
        landed = queueing.landed if queueing is not None else None
        try:
            async with self.store.tx(write=False) as conn:
                result = await conn.execute(
                    select(timeline)
                    .where(timeline.c.id > after)
                    .order_by(timeline.c.id)
                    .limit(limit)
                )
                rows = [queries.to_timeline_row(m) for m in result.mappings().all()]
                ids = sorted({r.incident_id for r in rows})
                found = await conn.execute(select(incidents).where(incidents.c.id.in_(ids)))
                incident_rows = {m["id"]: queries.to_incident(m) for m in found.mappings().all()}
                states = await notify_rows.states(conn, ids)
        except StoreRefusedError as err:
            self._resilient(err)
            rows, incident_rows, states = [], {}, {}
        if queueing is not None and queueing.landed != landed:
            # a flush began while we read: what we read may be held entries already composed
            rows, incident_rows, states = [], {}, {}
        return self._with_held(self._queueing(), rows, incident_rows, states, limit)

    def _with_held(
        self,
        queueing: ResilientStore | None,
        rows: list[TimelineRow],
        incident_rows: dict[int, IncidentRow],
        states: dict[int, State],
        limit: int,
    ) -> Batch:
        """The stored rows, then the held ones not composed yet, with the composer's memories."""
        self.memory.held_batch, self.memory.held_whole = 0, False
        if queueing is not None and len(rows) < limit:
            unseen = [h for h in queueing.held if h.row.id < self.memory.held_seen]
            held = unseen[: limit - len(rows)]
            for h in held:
                rows.append(h.row)
                incident_rows[h.incident.id] = queueing.held_incident(h.incident.id) or h.incident
            if held:
                self.memory.held_batch = held[-1].row.id
                self.memory.held_whole = len(held) == len(unseen)
        for incident_id in {r.incident_id for r in rows}:
            if incident_id in self.memory.states:
                states[incident_id] = self.memory.states[incident_id][0]
        return Batch(rows=rows, incidents=incident_rows, states=states)

    async def active(self) -> tuple[dict[int, State], dict[int, IncidentRow]]:
        """Incidents with something timed pending (a reminder, a held 'resolved')."""
        memory = self.memory.states
        try:
            async with self.store.tx(write=False) as conn:
                found = await conn.execute(
                    select(notify_incidents).where(notify_incidents.c.active == 1)
                )
                states: dict[int, State] = {
                    m["incident_id"]: dict(m["state"]) for m in found.mappings().all()
                }
                wanted = [i for i in {*states, *memory} if i >= 0]
                rows = await conn.execute(select(incidents).where(incidents.c.id.in_(wanted)))
                found_incidents = {m["id"]: queries.to_incident(m) for m in rows.mappings().all()}
        except StoreRefusedError as err:
            self._resilient(err)
            states, found_incidents = {}, {}
        for incident_id, (state, active) in memory.items():
            states.pop(incident_id, None)
            if active:
                states[incident_id] = state
        store = self.store
        if isinstance(store, ResilientStore):
            for incident_id in states:
                held = store.held_incident(incident_id)
                if held is not None:
                    found_incidents[incident_id] = held
        return states, found_incidents

    async def commit(
        self,
        *,
        drafts: Sequence[OutboxDraft],
        chat_ids: Sequence[int],
        states: Mapping[int, tuple[State, bool]],
        at: datetime,
        cursor: int | None = None,
    ) -> None:
        """Queue `drafts` for every chat, save states (with their `active` flag) and the cursor,
        all in one transaction (kept in memory and queued while the store cannot take it)."""
        queueing = self._queueing()
        if queueing is None:
            landed = self._landed_meanwhile()
            if landed:  # past them, or they would be composed again from the table
                cursor = max(cursor or 0, landed)
            try:
                await self._commit(drafts, chat_ids, states, at, cursor)
            except StoreRefusedError as err:
                queueing = self._resilient(err)
            else:
                self.memory.floor = max(self.memory.floor, landed)
                return
        self._commit_in_memory(queueing, drafts, chat_ids, states, at, cursor)

    def _landed_meanwhile(self) -> int:
        """When this round composed held entries and the store has taken every queued write
        since (so they are in its table now, past the cursor): the timeline's last id when it
        took the last, at or past each of them; else 0."""
        composed, whole = self.memory.held_batch, self.memory.held_whole
        self.memory.held_batch, self.memory.held_whole = 0, False
        store = self.store
        if not (composed and whole and isinstance(store, ResilientStore)):
            return 0  # (some held ones were not composed: the table says them, once)
        return store.flushed_to

    def _commit_in_memory(
        self,
        store: ResilientStore,
        drafts: Sequence[OutboxDraft],
        chat_ids: Sequence[int],
        states: Mapping[int, tuple[State, bool]],
        at: datetime,
        cursor: int | None,
    ) -> None:
        memory = self.memory
        made = memory.add(
            at=at,
            chat_ids=chat_ids,
            drafts=[(d.kind, d.text, d.incident_id) for d in drafts],
            epoch=store.fence_epoch,
        )
        memory.states.update(states)
        composed_held = memory.held_batch
        if composed_held:
            memory.held_seen = composed_held
            memory.held_batch = 0
        write = OutboxRows(
            rows=tuple(memory.rows[i] for i in made),
            states=tuple(
                KeptState(incident_id=incident_id, state=dict(state), active=active)
                for incident_id, (state, active) in states.items()
            ),
            cursor=cursor,
            past_held=bool(composed_held),
        )
        store.queue(write, error=self._refusal)

    async def _commit(
        self,
        drafts: Sequence[OutboxDraft],
        chat_ids: Sequence[int],
        states: Mapping[int, tuple[State, bool]],
        at: datetime,
        cursor: int | None,
    ) -> None:
        async with self.store.tx(write=True) as conn:
            for draft in drafts:
                for chat_id in chat_ids:
                    row = OutboxRow(
                        id=0,  # (the store gives it one)
                        created_at=at,
                        chat_id=chat_id,
                        incident_id=draft.incident_id,
                        kind=draft.kind,
                        text=draft.text,
                        epoch=self.store.fence_epoch,
                    )
                    await notify_rows.insert_row(conn, row, draft.incident_id)
            for incident_id, (state, active) in states.items():
                await notify_rows.put_state(conn, incident_id, state, active)
            if cursor is not None:
                await notify_rows.set_cursor(conn, cursor)

    async def state(self, incident_id: int) -> State | None:
        async with self.store.tx(write=False) as conn:
            return (await notify_rows.states(conn, [incident_id])).get(incident_id)

    async def put_state(self, incident_id: int, state: State, *, active: bool) -> None:
        async with self.store.tx(write=True) as conn:
            await notify_rows.put_state(conn, incident_id, state, active)

    # -- the sender ------------------------------------------------------------------------

    async def pending(self, *, limit: int = 50) -> list[OutboxRow]:
        """Unsent messages, oldest first."""
        query = (
            select(outbox)
            .where(outbox.c.sent_at.is_(None), outbox.c.given_up == 0)
            .order_by(outbox.c.id)
            .limit(limit)
        )
        try:
            stored = await self._rows(query)
        except StoreRefusedError as err:
            self._resilient(err)
            stored = []
        return self.memory.besides(stored) + self.memory.pending()

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
        await self._mark(
            OutboxMark(
                row_id=row_id, parts_sent=parts, message_id=message_id, sent_at=at if done else None
            )
        )

    async def failed(self, row_id: int, *, error: str, give_up: bool) -> None:
        await self._mark(OutboxMark(row_id=row_id, last_error=error, given_up=give_up, failed=True))

    async def _mark(self, mark: OutboxMark) -> None:
        """Update an outbox row: in memory (a row the store has not taken; the mark is queued
        behind it, so a spill replayed after a crash has it too), in the store, or, while the
        store cannot take it, remembered and queued."""
        row_id = self._row_ids.get(mark.row_id, mark.row_id)
        if row_id < 0:
            self._mark_in_memory(row_id, mark)
            return
        mark = replace(mark, row_id=row_id)
        queueing = self._queueing()
        if queueing is None:
            try:
                await self._update(row_id, mark.values())
                return
            except StoreRefusedError as err:
                queueing = self._resilient(err)
        if mark.finished:
            self.memory.done.add(row_id)
        queueing.queue(mark, error=self._refusal)

    def _mark_in_memory(self, row_id: int, mark: OutboxMark) -> None:
        row = self.memory.rows.get(row_id)
        if row is None:
            return
        values = mark.values()
        values["given_up"] = bool(values.get("given_up", row.given_up))
        if mark.failed:
            values["attempts"] = row.attempts + 1
        self.memory.update(row_id, **values)
        queueing = self._queueing()
        if queueing is not None:
            queueing.queue(replace(mark, row_id=row_id), error=self._refusal)

    async def _update(self, row_id: int, values: Mapping[str, object]) -> None:
        async with self.store.tx(write=True) as conn:
            await notify_rows.update_row(conn, row_id, values)

    async def thread(self, incident_id: int, chat_id: int) -> int | None:
        """The Telegram message the incident's thread replies to in that chat."""
        kept = self.memory.threads.get((incident_id, chat_id))
        if kept is not None or incident_id < 0:
            return kept
        try:
            async with self.store.tx(write=False) as conn:
                found = await conn.execute(
                    select(notify_threads.c.message_id).where(
                        notify_threads.c.incident_id == incident_id,
                        notify_threads.c.chat_id == chat_id,
                    )
                )
                value = found.scalar_one_or_none()
        except StoreRefusedError as err:
            self._resilient(err)
            return None
        return None if value is None else int(value)

    async def start_thread(self, incident_id: int, chat_id: int, message_id: int) -> None:
        queueing = self._queueing()
        if queueing is None and incident_id >= 0:
            try:
                await self._start_thread(incident_id, chat_id, message_id)
                return
            except StoreRefusedError as err:
                queueing = self._resilient(err)
        if queueing is None:  # a placeholder incident the store has taken since: map it
            real = (
                self.store.real_id(incident_id) if isinstance(self.store, ResilientStore) else None
            )
            if real is not None and real >= 0:
                await self._start_thread(real, chat_id, message_id)
            return
        self.memory.threads[(incident_id, chat_id)] = message_id
        write = OutboxThread(incident_id=incident_id, chat_id=chat_id, message_id=message_id)
        queueing.queue(write, error=self._refusal)

    async def _start_thread(self, incident_id: int, chat_id: int, message_id: int) -> None:
        async with self.store.tx(write=True) as conn:
            await notify_rows.start_thread(conn, incident_id, chat_id, message_id)

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

    async def refusals(self) -> list[OutboxRefusal]:
        async with self.store.tx(write=False) as conn:
            found = await conn.execute(select(notify_refusals).order_by(notify_refusals.c.id))
            return [OutboxRefusal(**m) for m in found.mappings().all()]


def _outbox_row(m: Mapping[str, object]) -> OutboxRow:
    values = dict(m)
    values["given_up"] = bool(values["given_up"])
    return OutboxRow(**values)  # type: ignore[arg-type]

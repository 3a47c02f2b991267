"""One queued write's statements (`supervisor.record.store.queued`), run inside a transaction
its caller opened: the same statements the `Store` and the outbox run when they can write at
once (`writes`, `history`, `notify_rows`), with each placeholder the write names mapped to the
id the store gave it (`Ids`). What a write returns is kept as JSON (`Result`): an id, or an
outbox round's row ids and cursor, so that a write found taken already (a spill replayed after
a crash) reads its result back and the writes after it still find their ids.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field, replace

from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.record.store import history, notify_rows, queries, writes
from supervisor.record.store.errors import StoreError
from supervisor.record.store.queued import (
    AddSample,
    AppendWrite,
    FinishAttempt,
    OutboxCursor,
    OutboxMark,
    OutboxRows,
    OutboxThread,
    PruneSamples,
    SaveSnapshot,
    StartAttempt,
    Supervised,
    Supervising,
    TransitionWrite,
    Write,
)
from supervisor.record.timeline.base import JSONValue

Result = Mapping[str, JSONValue] | None
"""What a write returned: ``{"id": 42}``, ``{"ids": [...], "cursor": 17}`` or None."""


@dataclass
class Ids:
    """The placeholders of one process's queued writes, mapped as the store takes them."""

    store: MutableMapping[int, int | None] = field(default_factory=dict)  #: incidents, entries
    rows: MutableMapping[int, int] = field(default_factory=dict)  #: outbox rows kept in memory

    def real(self, value: int | None) -> int | None:
        """The store's id for `value` (itself unless it is a mapped placeholder)."""
        if value is None or value >= 0:
            return value
        return self.store.get(value, value)

    def stored(self, value: int | None) -> int | None:
        """The store's id for `value`; None when its write never reached the store."""
        real = self.real(value)
        return real if real is not None and real >= 0 else None

    def learn(self, write: Write, result: Result) -> None:
        """What the write's result says about its placeholders."""
        if (
            isinstance(write, TransitionWrite | AppendWrite | StartAttempt)
            and write.placeholder is not None
        ):
            self.store[write.placeholder] = result_id(result)
        elif isinstance(write, OutboxRows) and result is not None:
            ids = result.get("ids")
            if isinstance(ids, list):
                for row, real in zip(write.rows, ids, strict=False):
                    if isinstance(real, int):
                        self.rows[row.id] = real

    def draft(self) -> Ids:
        """These ids, and what a transaction under way learns on top of them (`adopt` once it
        committed): until then nobody else reads a placeholder as taken (a message sent
        meanwhile marked on a row that a refused commit never made, and sent again)."""
        return Ids(store=ChainMap({}, self.store), rows=ChainMap({}, self.rows))

    def adopt(self, draft: Ids) -> None:
        """What `draft` (from `draft()`) learned, now that its transaction committed."""
        assert isinstance(draft.store, ChainMap)
        assert isinstance(draft.rows, ChainMap)
        self.store.update(draft.store.maps[0])
        self.rows.update(draft.rows.maps[0])


def result_id(result: Result) -> int | None:
    found = None if result is None else result.get("id")
    return found if isinstance(found, int) else None


def appends_entry(write: Write, result: Result) -> bool:
    """Whether the write added a timeline entry (the composer is woken)."""
    return isinstance(write, AppendWrite) or (
        isinstance(write, TransitionWrite) and result is not None
    )


async def apply(conn: AsyncConnection, write: Write, ids: Ids) -> Result:
    """Run `write` on `conn`; its result."""
    if isinstance(write, SaveSnapshot):
        snapshot = replace(write.snapshot, incident_id=ids.real(write.snapshot.incident_id))
        await writes.save_snapshots(conn, [(snapshot, write.sample)])
        return None
    if isinstance(write, TransitionWrite):
        found = await writes.transition(
            conn,
            snapshot=replace(write.snapshot, incident_id=ids.real(write.snapshot.incident_id)),
            entry=write.entry,
            open_cause=write.open_cause,
            close_resolution=write.close_resolution,
            reopen_within=write.reopen_within,
        )
        return None if found is None else {"id": found}
    if isinstance(write, AppendWrite):
        target = ids.stored(write.incident_id)
        if target is None:  # its incident was never opened
            raise StoreError(f"no incident {write.incident_id}")
        return {"id": await writes.append(conn, target, write.entry)}
    if isinstance(write, Supervising):
        await history.run_started(conn, write.started, write.subjects)
        return None
    if isinstance(write, Supervised):
        await history.seen(conn, write.started, write.at)
        return None
    if isinstance(write, AddSample):
        await writes.insert_sample(conn, write.result)
        return None
    if isinstance(write, PruneSamples):
        await writes.prune_samples(conn, write.older_than)
        return None
    if isinstance(write, StartAttempt):
        made = await writes.start_attempt(
            conn,
            endpoint=write.endpoint,
            rule_id=write.rule_id,
            incident_id=ids.stored(write.incident_id),
            at=write.at,
            epoch=write.epoch,
        )
        return {"id": made}
    if isinstance(write, FinishAttempt):
        attempt = ids.stored(write.attempt_id)
        if attempt is not None:
            await writes.finish_attempt(conn, attempt, at=write.at, outcome=write.outcome)
        return None
    return await _apply_outbox(conn, write, ids)


async def _apply_outbox(conn: AsyncConnection, write: Write, ids: Ids) -> Result:
    if isinstance(write, OutboxCursor):
        if await notify_rows.cursor(conn) is None:
            await notify_rows.set_cursor(conn, write.last)
        return None
    if isinstance(write, OutboxRows):
        made: list[JSONValue] = []
        for row in write.rows:
            made.append(await notify_rows.insert_row(conn, row, ids.stored(row.incident_id)))
        for kept in write.states:
            incident = ids.stored(kept.incident_id)
            if incident is not None:
                await notify_rows.put_state(conn, incident, kept.state, kept.active)
        moved = write.cursor
        if write.past_held:  # past the held entries composed: they are in the table now
            moved = await queries.timeline_end(conn)
        if moved is not None:
            await notify_rows.set_cursor(conn, moved)
        return {"ids": made, "cursor": moved}
    if isinstance(write, OutboxMark):
        row_id = ids.rows.get(write.row_id) if write.row_id < 0 else write.row_id
        if row_id is not None:
            await notify_rows.update_row(conn, row_id, write.values())
        return None
    if isinstance(write, OutboxThread):
        incident = ids.stored(write.incident_id)
        if incident is not None:
            await notify_rows.start_thread(conn, incident, write.chat_id, write.message_id)
        return None
    raise AssertionError(f"no statements for {write!r}")

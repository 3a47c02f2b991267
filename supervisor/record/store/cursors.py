"""Each host's journal cursor and event-stream status, in the store (`journal_cursors`).

The leader writes them (under its fence, like every store write: a deposed leader cannot put
its older cursor over the new leader's), every few seconds when they moved and at stop; the next
leader reads them when it starts and resumes each host's stream there, and `status` reads the
status column (a `StreamStatus` as JSON; an older release's words are kept as words). A host
whose stream has not read an entry yet has no cursor (None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from supervisor.core.streamstatus import StreamStatus
from supervisor.record.store.dialect import upsert
from supervisor.record.store.schema import journal_cursors
from supervisor.record.store.store import Store


@dataclass(frozen=True, kw_only=True)
class Streams:
    """What the store holds: each host's cursor (hosts that have one) and stream status."""

    cursors: dict[str, str]
    status: dict[str, StreamStatus]


async def read_streams(store: Store) -> Streams:
    async with store.tx(write=False) as conn:
        rows = (await conn.execute(select(journal_cursors))).all()
    return Streams(
        cursors={r.host: r.cursor for r in rows if r.cursor is not None},
        status={r.host: StreamStatus.loads(r.status) for r in rows if r.status},
    )


async def save_streams(
    store: Store, cursors: Mapping[str, str], status: Mapping[str, StreamStatus], *, at: datetime
) -> None:
    """Upsert every named host's row in one transaction. A host without a cursor keeps the one
    stored (a stream that has read nothing yet must not forget where the last leader was)."""
    hosts = sorted(set(cursors) | set(status))
    if not hosts:
        return
    async with store.tx(write=True) as conn:
        for host in hosts:
            said = status.get(host)
            values = {"status": said.dumps() if said is not None else "", "updated_at": at}
            if host in cursors:
                values["cursor"] = cursors[host]
            statement = upsert(conn, journal_cursors).values(host=host, **values)
            await conn.execute(
                statement.on_conflict_do_update(index_elements=["host"], set_=values)
            )

"""The control API's tables: silences, pauses, and the journal of every control action (done or
refused), made by the store's revisions (`supervisor.record.store.revise`). A thin layer over
`Store.tx`: every call is one transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    delete,
    insert,
    select,
    update,
)

from supervisor.control.model import JournalRow, PauseRow, SilenceRow
from supervisor.record.store.coltypes import UTCDateTime
from supervisor.record.store.dialect import upsert
from supervisor.record.store.store import Store

control_metadata = MetaData()

silences = Table(
    "control_silences",
    control_metadata,
    Column("id", Integer, primary_key=True),
    Column("target", Text, nullable=False),
    Column("who", Text, nullable=False),
    Column("via", Text, nullable=False),
    Column("why", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("until", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime, nullable=True),
    Column("ended_by", Text, nullable=False, server_default=""),
)

pauses = Table(
    "control_pauses",
    control_metadata,
    Column("scope", Text, primary_key=True),
    Column("who", Text, nullable=False),
    Column("via", Text, nullable=False),
    Column("why", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
)

journal = Table(
    "control_journal",
    control_metadata,
    Column("id", Integer, primary_key=True),
    Column("at", UTCDateTime, nullable=False),
    Column("action", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("subjects", Text, nullable=False),  #: a JSON list of endpoint names
    Column("who", Text, nullable=False),
    Column("via", Text, nullable=False),
    Column("why", Text, nullable=False),
    Column("until", UTCDateTime, nullable=True),
    Column("code", Text, nullable=False),
    Column("answer", Text, nullable=False),
)
Index("ix_control_journal_at", journal.c.at)


def _id(key: Any) -> int:
    return int(key[0])


class ControlStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    # silences

    async def add_silence(
        self, *, target: str, who: str, via: str, why: str, at: datetime, until: datetime
    ) -> int:
        async with self.store.tx(write=True) as conn:
            created = await conn.execute(
                insert(silences).values(
                    target=target, who=who, via=via, why=why, at=at, until=until
                )
            )
            return _id(created.inserted_primary_key)

    async def end_silences(self, ids: Sequence[int], *, at: datetime, by: str) -> None:
        async with self.store.tx(write=True) as conn:
            await conn.execute(
                update(silences)
                .where(silences.c.id.in_(list(ids)))
                .values(ended_at=at, ended_by=by)
            )

    async def change_silence(self, silence_id: int, *, until: datetime, why: str) -> None:
        async with self.store.tx(write=True) as conn:
            await conn.execute(
                update(silences).where(silences.c.id == silence_id).values(until=until, why=why)
            )

    async def silences(self, *, active_at: datetime | None = None) -> list[SilenceRow]:
        """Every silence, oldest first; with `active_at`, only those in force then."""
        query = select(silences).order_by(silences.c.id)
        if active_at is not None:
            query = query.where(silences.c.ended_at.is_(None), silences.c.until > active_at)
        async with self.store.tx(write=False) as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [SilenceRow(**row) for row in rows]

    # pauses

    async def pause(self, row: PauseRow) -> None:
        values = {"scope": row.scope, "who": row.who, "via": row.via, "why": row.why, "at": row.at}
        async with self.store.tx(write=True) as conn:
            statement = upsert(conn, pauses).values(values)
            await conn.execute(
                statement.on_conflict_do_update(
                    index_elements=[pauses.c.scope],
                    set_={k: statement.excluded[k] for k in values if k != "scope"},
                )
            )

    async def resume(self, scope: str) -> bool:
        """End the pause of `scope`; False when there was none."""
        async with self.store.tx(write=True) as conn:
            result = await conn.execute(delete(pauses).where(pauses.c.scope == scope))
            return bool(result.rowcount)

    async def pauses(self) -> list[PauseRow]:
        async with self.store.tx(write=False) as conn:
            rows = (await conn.execute(select(pauses).order_by(pauses.c.scope))).mappings().all()
        return [PauseRow(**row) for row in rows]

    # the journal

    async def log(self, row: JournalRow) -> int:
        async with self.store.tx(write=True) as conn:
            created = await conn.execute(
                insert(journal).values(
                    at=row.at,
                    action=row.action,
                    target=row.target,
                    subjects=json.dumps(list(row.subjects)),
                    who=row.who,
                    via=row.via,
                    why=row.why,
                    until=row.until,
                    code=row.code,
                    answer=row.answer,
                )
            )
            return _id(created.inserted_primary_key)

    async def journal(
        self, subject: str | None = None, *, latest: int | None = None
    ) -> list[JournalRow]:
        """Control actions, oldest first; with `subject`, those that named or concerned it; with
        `latest` (and no subject), only the latest that many."""
        query = select(journal).order_by(journal.c.id)
        if latest is not None and subject is None:
            query = select(journal).order_by(journal.c.id.desc()).limit(latest)
        async with self.store.tx(write=False) as conn:
            rows = (await conn.execute(query)).mappings().all()
        found = [
            JournalRow(**{**row, "subjects": tuple(str(s) for s in json.loads(row["subjects"]))})
            for row in rows
        ]
        if latest is not None and subject is None:
            found.reverse()
        if subject is None:
            return found
        return [r for r in found if subject == r.target or subject in r.subjects]

"""What the page reads from the store beyond its public calls, in one query each (a board of 200
endpoints must not cost 200 queries): recent samples of every endpoint, timeline entries after an
id (the live feed), the latest diagnoses (the rules' last matches). Read through `Store.tx`, the
door the store keeps for add-ons."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from sqlalchemy import bindparam, func, or_, select, union_all
from sqlalchemy.sql.expression import Executable

from supervisor.record.store.queries import to_timeline_row
from supervisor.record.store.records import TimelineRow
from supervisor.record.store.schema import samples, timeline
from supervisor.record.store.store import Store

SPARK_POINTS = 24
"""Samples per endpoint the board's sparklines show."""


COMPOUND = 100
"""Endpoints per statement: SQLite allows 500 terms in a compound SELECT."""


@dataclass(frozen=True, kw_only=True)
class Point:
    """One measured completion of an endpoint, for its sparklines."""

    ttft_s: float | None
    tok_s: float | None


@lru_cache(maxsize=8)
def _statements(names: tuple[str, ...], per_endpoint: int) -> tuple[Executable, ...]:
    """For each endpoint a LIMIT read backwards on the samples' (endpoint, at) index, a hundred
    endpoints per statement (UNION ALL); built once per set of names (`since` is bound)."""
    since = bindparam("since", type_=samples.c.at.type)
    measured = or_(samples.c.tok_s.is_not(None), samples.c.ttft_s.is_not(None))
    columns = (samples.c.id, samples.c.endpoint, samples.c.ttft_s, samples.c.tok_s)
    statements: list[Executable] = []
    for start in range(0, len(names), COMPOUND):
        parts = [
            select(*columns)
            .where(samples.c.endpoint == name, samples.c.at >= since, measured)
            .order_by(samples.c.at.desc(), samples.c.id.desc())
            .limit(per_endpoint)
            .subquery()
            .select()
            for name in names[start : start + COMPOUND]
        ]
        statements.append(parts[0] if len(parts) == 1 else union_all(*parts))
    return tuple(statements)


async def recent_points(
    store: Store, names: Sequence[str], *, since: datetime, per_endpoint: int = SPARK_POINTS
) -> dict[str, list[Point]]:
    """endpoint -> its latest `per_endpoint` samples since `since` that measured a completion
    (TTFT or tok/s), oldest first (by id: samples are written as they are taken), in one read
    transaction. Only the numbers are read: no timestamps to decode."""
    found: dict[str, list[tuple[int, Point]]] = {name: [] for name in names}
    async with store.tx(write=False) as conn:
        for statement in _statements(tuple(names), per_endpoint):
            for row in (await conn.execute(statement, {"since": since})).all():
                found[row.endpoint].append((row.id, Point(ttft_s=row.ttft_s, tok_s=row.tok_s)))
    return {name: [point for _, point in sorted(rows, key=_first)] for name, rows in found.items()}


def _first(pair: tuple[int, Point]) -> int:
    return pair[0]


async def entries_after(store: Store, after: int, *, limit: int = 200) -> list[TimelineRow]:
    """Timeline entries with an id above `after`, oldest first."""
    query = select(timeline).where(timeline.c.id > after).order_by(timeline.c.id).limit(limit)
    async with store.tx(write=False) as conn:
        return [to_timeline_row(m) for m in (await conn.execute(query)).mappings().all()]


async def last_entry_id(store: Store) -> int:
    async with store.tx(write=False) as conn:
        value = (await conn.execute(select(func.max(timeline.c.id)))).scalar()
    return int(value or 0)

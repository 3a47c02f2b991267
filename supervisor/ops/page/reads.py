"""What the page reads from the store beyond its public calls, in one query each (a board of 200
endpoints must not cost 200 queries): recent samples of every endpoint, timeline entries after an
id (the live feed), the latest diagnoses (the rules' last matches). Read through `Store.tx`, the
door the store keeps for add-ons."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, or_, select, union_all

from supervisor.store import SampleRow, Store, TimelineRow
from supervisor.store.queries import to_sample, to_timeline_row
from supervisor.store.schema import samples, timeline

SPARK_POINTS = 24
"""Samples per endpoint the board's sparklines show."""


COMPOUND = 100
"""Endpoints per statement: SQLite allows 500 terms in a compound SELECT."""


async def recent_samples(
    store: Store, names: Sequence[str], *, since: datetime, per_endpoint: int = SPARK_POINTS
) -> dict[str, list[SampleRow]]:
    """endpoint -> its latest `per_endpoint` samples since `since` that measured a completion
    (TTFT or tok/s), oldest first: for each endpoint a LIMIT read backwards on the samples'
    (endpoint, at) index, a hundred endpoints per statement (UNION ALL), in one transaction."""
    measured = or_(samples.c.tok_s.is_not(None), samples.c.ttft_s.is_not(None))
    found: dict[str, list[SampleRow]] = {name: [] for name in names}
    async with store.tx(write=False) as conn:
        for start in range(0, len(names), COMPOUND):
            parts = [
                select(samples)
                .where(samples.c.endpoint == name, samples.c.at >= since, measured)
                .order_by(samples.c.at.desc(), samples.c.id.desc())
                .limit(per_endpoint)
                .subquery()
                .select()
                for name in names[start : start + COMPOUND]
            ]
            query = parts[0] if len(parts) == 1 else union_all(*parts)
            for row in (await conn.execute(query)).mappings().all():
                sample = to_sample(row)
                found[sample.endpoint].append(sample)
    for rows in found.values():
        rows.sort(key=lambda sample: (sample.at, sample.id))
    return found


async def entries_after(store: Store, after: int, *, limit: int = 200) -> list[TimelineRow]:
    """Timeline entries with an id above `after`, oldest first."""
    query = select(timeline).where(timeline.c.id > after).order_by(timeline.c.id).limit(limit)
    async with store.tx(write=False) as conn:
        return [to_timeline_row(m) for m in (await conn.execute(query)).mappings().all()]


async def last_entry_id(store: Store) -> int:
    async with store.tx(write=False) as conn:
        value = (await conn.execute(select(func.max(timeline.c.id)))).scalar()
    return int(value or 0)


async def latest_diagnoses(store: Store, *, limit: int = 500) -> Sequence[TimelineRow]:
    """The latest diagnosis entries, newest first."""
    query = (
        select(timeline)
        .where(timeline.c.type == "diagnosis")
        .order_by(timeline.c.id.desc())
        .limit(limit)
    )
    async with store.tx(write=False) as conn:
        return [to_timeline_row(m) for m in (await conn.execute(query)).mappings().all()]

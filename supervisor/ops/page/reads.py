"""What the page reads from the store beyond its public calls, in one query each (a board of 200
endpoints must not cost 200 queries): recent samples of every endpoint, timeline entries after an
id (the live feed), the latest diagnoses (the rules' last matches). Read through `Store.tx`, the
door the store keeps for add-ons."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from sqlalchemy import func, select

from supervisor.store import SampleRow, Store, TimelineRow
from supervisor.store.queries import to_sample, to_timeline_row
from supervisor.store.schema import samples, timeline

SPARK_POINTS = 24
"""Samples per endpoint the board's sparklines show."""


async def recent_samples(
    store: Store, *, per_endpoint: int = SPARK_POINTS
) -> dict[str, list[SampleRow]]:
    """endpoint -> its latest `per_endpoint` samples, oldest first."""
    rank = (
        func.row_number()
        .over(partition_by=samples.c.endpoint, order_by=(samples.c.at.desc(), samples.c.id.desc()))
        .label("rank")
    )
    ranked = select(samples, rank).subquery()
    query = (
        select(*(ranked.c[c.name] for c in samples.columns))
        .where(ranked.c.rank <= per_endpoint)
        .order_by(ranked.c.endpoint, ranked.c.at, ranked.c.id)
    )
    found: dict[str, list[SampleRow]] = defaultdict(list)
    async with store.tx(write=False) as conn:
        for row in (await conn.execute(query)).mappings().all():
            sample = to_sample(row)
            found[sample.endpoint].append(sample)
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

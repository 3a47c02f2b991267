"""No two operations ever share one asyncpg connection (issue 24: `cannot switch to state 12;
another operation (2) is in progress`, seen when a deposed leader's parts were cancelled in the
middle of a statement). The composer's reads and commits, the page's reads and a worker's
transitions run at once against a real PostgreSQL store, and some of them are cut off mid-way
(a timeout, a stop cancelling a task): every call either completes or is cancelled, none fails,
and a connection cut off is never used again."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from supervisor.record.store import Snapshot, Store, SubjectKind, TimelineEntry
from supervisor.record.store.outbox import OutboxDraft, OutboxStore
from supervisor.record.timeline import Note
from tests.pgserver import PgServer

pytestmark = pytest.mark.slow

ROUNDS = 60


@pytest.fixture
async def store(pg_server: PgServer) -> AsyncIterator[Store]:
    async with await Store.open(pg_server.database()) as opened:
        yield opened


async def _worker(store: Store, name: str, count: itertools.count[int]) -> None:
    now = datetime.now(UTC)
    snapshot = Snapshot(
        kind=SubjectKind.ENDPOINT, name=name, state="down", since=now, updated_at=now
    )
    incident = await store.transition(
        snapshot=snapshot,
        entry=TimelineEntry(at=now, subject=name, record=Note(text=f"n{next(count)}")),
        open_cause="connection refused",
    )
    assert incident is not None
    await store.append(incident, TimelineEntry(at=now, subject=name, record=Note(text="more")))


async def _composer(outbox: OutboxStore) -> None:
    batch = await outbox.batch(0)
    drafts = [OutboxDraft(kind="opened", text=f"{len(batch.rows)} rows")]
    await outbox.commit(drafts=drafts, chat_ids=[1], states={}, at=datetime.now(UTC), cursor=0)
    await outbox.pending()


async def _page(store: Store) -> None:
    await store.incidents(limit=20)
    await store.snapshots()


async def test_the_composer_the_page_and_a_worker_at_once_some_cut_off(store: Store) -> None:
    outbox = OutboxStore(store)
    await outbox.ensure()
    count = itertools.count()
    failures: list[BaseException] = []
    cut = 0
    for round_ in range(ROUNDS):
        calls = [
            _worker(store, f"m{round_ % 3}", count),
            _composer(outbox),
            _page(store),
            _worker(store, f"n{round_ % 2}", count),
            _page(store),
        ]
        tasks = [asyncio.create_task(c) for c in calls]
        await asyncio.sleep(0.001 * (round_ % 7))  # cut some off mid-statement, others not
        victim = tasks[round_ % len(tasks)]
        if not victim.done():
            victim.cancel()
            cut += 1
        for result in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                failures.append(result)
    assert cut > ROUNDS // 2  # most rounds cut one call off while it ran
    assert [str(f) for f in failures] == []
    # the store is whole and usable afterwards
    await _page(store)
    assert len(await store.incidents()) == 5

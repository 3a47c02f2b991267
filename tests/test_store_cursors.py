"""Each host's journal cursor and stream status in the store (`journal_cursors`), on both
engines (a SQLite file, a real PostgreSQL): saved and read back, a host without a cursor keeps
the stored one, and a deposed leader's save is refused by the fence."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import insert

from supervisor.core.streamstatus import STREAMING, StreamPhase, StreamStatus
from supervisor.record.store.cursors import Streams, read_streams, save_streams
from supervisor.record.store.lease import StaleEpochError, claim
from supervisor.record.store.schema import journal_cursors
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
C1 = "s=7f1c;i=2a;b=9d0e;m=1f;t=62a;x=11"
C2 = "s=7f1c;i=2b;b=9d0e;m=20;t=62b;x=12"


@pytest.fixture
async def store(store_target: StoreTarget) -> AsyncIterator[Store]:
    async with await Store.open(store_target) as s:
        yield s


async def test_an_empty_store_has_no_cursors(store: Store) -> None:
    assert await read_streams(store) == Streams(cursors={}, status={})


BACKING_OFF = StreamStatus(
    phase=StreamPhase.RECONNECTING, reason="connection lost", attempt=1, next_in_s=1.0
)
POLLING = StreamStatus(phase=StreamPhase.POLLING, reason="journalctl failed: x")


async def test_cursors_and_status_are_saved_and_replaced(store: Store) -> None:
    await save_streams(store, {"spark1": C1}, {"spark1": STREAMING, "spark2": BACKING_OFF}, at=T0)
    assert await read_streams(store) == Streams(
        cursors={"spark1": C1}, status={"spark1": STREAMING, "spark2": BACKING_OFF}
    )
    assert [s.text for s in (await read_streams(store)).status.values()] == [
        "streaming",
        "reconnecting (attempt 1, next in 1.0s)",
    ]
    # spark2 has no cursor yet, spark1 moved on; then a stream that read nothing keeps spark1's
    await save_streams(store, {"spark1": C2}, {"spark1": STREAMING, "spark2": STREAMING}, at=T0)
    await save_streams(store, {}, {"spark1": POLLING}, at=T0)
    assert await read_streams(store) == Streams(
        cursors={"spark1": C2}, status={"spark1": POLLING, "spark2": STREAMING}
    )


async def test_an_older_releases_status_words_are_shown_as_they_were(store: Store) -> None:
    async with store.tx(write=True) as conn:
        await conn.execute(
            insert(journal_cursors).values(
                host="spark1", cursor=C1, status="polling: journalctl failed: x", updated_at=T0
            )
        )
    (status,) = (await read_streams(store)).status.values()
    assert status == StreamStatus(phase=StreamPhase.OLD, said="polling: journalctl failed: x")
    assert status.text == "polling: journalctl failed: x"


async def test_a_deposed_leader_cannot_save_over_the_new_leaders_cursor(
    store_target: StoreTarget,
) -> None:
    async with await Store.open(store_target) as old, await Store.open(store_target) as new:
        async with old.tx(write=True) as conn:
            await claim(conn, holder="a", host="a-box", epoch=None, lease_ms=0)  # runs out
        async with new.tx(write=True) as conn:
            taken = await claim(conn, holder="b", host="b-box", epoch=None, lease_ms=60_000)
        old.fence_epoch, new.fence_epoch = 1, taken.epoch
        await save_streams(new, {"spark1": C2}, {"spark1": STREAMING}, at=T0)
        with pytest.raises(StaleEpochError) as refused:
            await save_streams(old, {"spark1": C1}, {"spark1": STREAMING}, at=T0)
        assert (
            str(refused.value)
            == "refused under stale epoch 1: b leads with epoch 2 (a store write)"
        )
        assert (await read_streams(new)).cursors == {"spark1": C2}

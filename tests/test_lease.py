"""The lease, its epoch and the fence, on both engines (a SQLite file, a real PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from supervisor.app.leader.elector import Elector, Me
from supervisor.record.store.errors import StoreError
from supervisor.record.store.lease import (
    Lease,
    StaleEpochError,
    claim,
    current_lease,
    lease_journal,
    release,
)
from supervisor.record.store.records import Snapshot, SubjectKind
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget
from tests.pgserver import PgServer

LONG = 60_000
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def store(store_target: StoreTarget) -> AsyncIterator[Store]:
    async with await Store.open(store_target) as s:
        yield s


async def _claim(store: Store, holder: str, epoch: int | None, lease_ms: int = LONG) -> Lease:
    async with store.tx(write=True) as conn:
        return await claim(
            conn, holder=holder, host=f"{holder}-host", epoch=epoch, lease_ms=lease_ms
        )


def _snap(name: str) -> Snapshot:
    return Snapshot(kind=SubjectKind.ENDPOINT, name=name, state="healthy", since=T0, updated_at=T0)


async def _events(store: Store) -> list[tuple[int, str, str, str]]:
    async with store.tx(write=False) as conn:
        return [(e.epoch, e.holder, e.event, e.detail) for e in await lease_journal(conn)]


async def test_one_holder_renews_and_the_other_follows(store: Store) -> None:
    first = await _claim(store, "a", None)
    assert (first.epoch, first.holder, first.mine, first.took_over) == (1, "a", True, True)
    other = await _claim(store, "b", None)
    assert (other.epoch, other.holder, other.mine) == (1, "a", False)
    renewed = await _claim(store, "a", 1)
    assert (renewed.epoch, renewed.mine, renewed.took_over) == (1, True, False)
    assert renewed.expires_ms >= first.expires_ms
    assert await _events(store) == [(1, "a", "took_over", "first lease")]


async def test_an_expired_lease_is_taken_with_the_next_epoch(store: Store) -> None:
    await _claim(store, "a", None, lease_ms=0)  # runs out at once
    taken = await _claim(store, "b", None)
    assert (taken.epoch, taken.holder, taken.took_over) == (2, "b", True)
    assert taken.previous is not None
    assert (taken.previous.holder, taken.previous.epoch) == ("a", 1)
    late = await _claim(store, "a", 1)  # the old holder wakes up: it follows b
    assert (late.epoch, late.holder, late.mine) == (2, "b", False)
    assert await _events(store) == [
        (1, "a", "took_over", "first lease"),
        (2, "b", "took_over", "from a on a-host (epoch 1, expired)"),
    ]


async def test_a_stale_epoch_cannot_write_or_act_and_is_recorded(store_target: StoreTarget) -> None:
    async with await Store.open(store_target) as old, await Store.open(store_target) as new:
        await _claim(old, "a", None, lease_ms=0)
        old.fence_epoch, old.fence_holder, old.fence_host = 1, "a", "a-host"
        await old.save_snapshot(_snap("before"))  # epoch 1 is still the lease's
        await _claim(new, "b", None)
        new.fence_epoch = 2
        deposed: list[StaleEpochError] = []
        old.on_deposed.append(deposed.append)
        with pytest.raises(StaleEpochError) as caught:
            await old.save_snapshot(_snap("after"))
        assert str(caught.value) == (
            "refused under stale epoch 1: b leads with epoch 2 (a store write)"
        )
        with pytest.raises(StaleEpochError) as step:
            await old.check_fence("step restart_unit vllm on spark1")
        assert step.value.what == "step restart_unit vllm on spark1"
        await new.save_snapshot(_snap("by-b"))
        assert [s.name for s in await new.snapshots()] == ["before", "by-b"]
        assert len(deposed) == 2
        assert (await _events(new))[2:] == [
            (1, "a", "refused", "a store write: b leads with epoch 2"),
            (1, "a", "refused", "step restart_unit vllm on spark1: b leads with epoch 2"),
        ]


async def test_release_frees_the_lease_at_once(store: Store) -> None:
    await _claim(store, "a", None)
    async with store.tx(write=True) as conn:
        assert await release(conn, holder="a", epoch=1)
    async with store.tx(write=True) as conn:
        assert not await release(conn, holder="a", epoch=1)  # once
    taken = await _claim(store, "b", None)
    assert (taken.epoch, taken.holder) == (2, "b")
    assert taken.previous is not None
    assert taken.previous.released


async def test_no_lease_before_anyone_claimed(store: Store) -> None:
    async with store.tx(write=False) as conn:
        assert await current_lease(conn) is None


async def test_many_claimants_at_once_give_one_holder(store_target: StoreTarget) -> None:
    stores = [await Store.open(store_target) for _ in range(6)]
    try:
        leases = await asyncio.gather(*(_claim(s, f"n{i}", None) for i, s in enumerate(stores)))
        assert sum(lease.mine for lease in leases) == 1
        assert {lease.epoch for lease in leases} == {1}
        assert len({lease.holder for lease in leases}) == 1
    finally:
        for s in stores:
            await s.close()


async def _pid_of_a_finished_process() -> int:
    proc = await asyncio.create_subprocess_exec("true")
    await proc.wait()
    return proc.pid


async def test_the_same_instance_restarted_takes_its_lease_at_once(store: Store) -> None:
    dead = await _pid_of_a_finished_process()
    async with store.tx(write=True) as conn:
        await claim(conn, holder="a", host="forge", epoch=None, lease_ms=LONG, pid=dead)
    async with store.tx(write=True) as conn:  # a second a, on another host: waits
        other_host = await claim(conn, holder="a", host="mac", epoch=None, lease_ms=LONG, pid=5)
    assert (other_host.mine, other_host.epoch) == (False, 1)
    async with store.tx(write=True) as conn:  # a, again on forge, its old process gone
        again = await claim(
            conn, holder="a", host="forge", epoch=None, lease_ms=LONG, pid=os.getpid()
        )
    assert (again.mine, again.epoch, again.took_over) == (True, 2, True)
    async with store.tx(write=True) as conn:  # another a on forge while that one runs: waits
        twin = await claim(conn, holder="a", host="forge", epoch=None, lease_ms=LONG, pid=dead)
    assert (twin.mine, twin.epoch) == (False, 2)
    assert (await _events(store))[1] == (
        2,
        "a",
        "took_over",
        "from a on forge (epoch 1, restarted)",
    )


# short, so the frozen transaction is ended soon; not so short that a loaded machine's pause
# between two statements of a transaction ends it (0.3 s ended a store's opening once)
@pytest.mark.parametrize(("idle_s", "taken_over"), [(1.0, True), (60.0, False)])
async def test_a_leader_frozen_inside_a_transaction_does_not_hold_off_the_takeover(
    pg_server: PgServer, idle_s: float, taken_over: bool
) -> None:
    """A leader frozen (SIGSTOP) in the middle of a fenced write holds the lease row FOR SHARE
    on an open session: the server ends that session once it sat idle in its transaction for a
    third of the lease, so the follower's claim is not blocked for the whole freeze (with a
    limit longer than the freeze, the claim still waits 3 s later)."""
    plain = pg_server.database()
    async with await Store.open(plain):  # the schema, made under the default timeout
        pass
    target = replace(plain, idle_in_transaction_s=idle_s)
    async with await Store.open(target) as frozen, await Store.open(target) as follower:
        await _claim(frozen, "a", None, lease_ms=0)  # run out, not yet taken over
        frozen.fence_epoch, frozen.fence_holder, frozen.fence_host = 1, "a", "a-host"
        inside, never = asyncio.Event(), asyncio.Event()

        async def write_then_freeze() -> None:
            async with frozen.tx(write=True):  # the fence's FOR SHARE read is done here
                inside.set()
                await never.wait()  # the process stopped: its session idles in the transaction

        stuck = asyncio.create_task(write_then_freeze())
        await inside.wait()
        if not taken_over:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(3):
                    await _claim(follower, "b", None)
            never.set()
            await stuck  # woken within the limit: its write commits under its epoch
            return
        async with asyncio.timeout(5):
            taken = await _claim(follower, "b", None)
        assert (taken.epoch, taken.holder, taken.took_over) == (2, "b", True)
        never.set()  # the frozen leader wakes: its session is gone, its write never lands
        with pytest.raises(StoreError, match=r"^cannot write to store "):
            await stuck


async def test_a_stuck_transaction_of_a_leader_whose_lease_ran_out_is_ended_by_the_follower(
    pg_server: PgServer,
) -> None:
    """Frozen where no server timeout runs (between two messages of one statement: its session
    `active`, waiting on its client; here an idle transaction with a limit far off stands in
    for it) inside a fenced write: once the lease ran out, the follower's elector ends that
    session and takes over, instead of waiting on its lock (`supervisor.record.store.stuck`)."""
    target = replace(pg_server.database(), idle_in_transaction_s=60)
    async with await Store.open(target) as frozen, await Store.open(target) as follower:
        await _claim(frozen, "a", None, lease_ms=0)  # run out, not yet taken over
        frozen.fence_epoch, frozen.fence_holder, frozen.fence_host = 1, "a", "a-host"
        inside, never = asyncio.Event(), asyncio.Event()

        async def write_then_freeze() -> None:
            async with frozen.tx(write=True):  # the fence's FOR SHARE read is done here
                inside.set()
                await never.wait()

        stuck = asyncio.create_task(write_then_freeze())
        try:
            await inside.wait()
            elector = Elector(follower, Me(holder="b", host="b-host"), timedelta(seconds=0.3))
            async with asyncio.timeout(5):
                while not elector.is_leading:  # its transaction gets older than lease / 3
                    await elector.step()
            assert elector.epoch == 2
            never.set()
            with pytest.raises(StoreError, match=r"^cannot write to store "):
                await stuck  # its session was ended: the write never lands
        finally:
            never.set()
            await asyncio.gather(stuck, return_exceptions=True)
        assert await _events(follower) == [
            (1, "a", "took_over", "first lease"),
            (2, "b", "took_over", "from a on a-host (epoch 1, expired)"),
        ]

"""The claim loop: every third of the lease, renew it (leading) or try to take it (following),
and at once when `wake` is called (the store announced a release or a takeover:
`supervisor.record.store.listen`; the loop's own pace stays the fallback).

A leader that cannot renew steps down on its own once its lease is over by its monotonic clock,
measured from *before* the last renewal that succeeded: a follower can only take over once the
lease ran out on the database's clock, which is later. A renewal never outlives the lease it
protects (it is cut off at the lease's end).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta

import structlog

from supervisor.record.store import Store, StoreError
from supervisor.record.store.lease import Lease, claim, current, release
from supervisor.record.store.stuck import end_stuck_sessions

log = structlog.get_logger("supervisor.leader")

FOLLOW_SLACK_S = 0.05


@dataclass(frozen=True, kw_only=True)
class Me:
    """Who this instance is, in the lease and the journal."""

    holder: str
    host: str


class Elector:
    def __init__(
        self,
        store: Store,
        me: Me,
        lease: timedelta,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.me = me
        self.lease_s = lease.total_seconds()
        self._monotonic = monotonic
        self.epoch: int | None = None  #: ours while leading
        self.seen: Lease | None = None  #: the lease as last read
        self.won: Lease | None = None  #: the lease as we took it (its `previous` says from whom)
        self.leading = asyncio.Event()
        self.claimed = asyncio.Event()  #: the first claim decided (or the store did not answer)
        self.lost = asyncio.Event()
        self.lost_why = ""
        self._valid_until = 0.0
        self.errors = 0  #: claims the store did not answer
        self._woken = asyncio.Event()

    @property
    def is_leading(self) -> bool:
        return self.leading.is_set() and not self.lost.is_set()

    def _lose(self, why: str) -> None:
        if self.is_leading:
            log.warning("leadership lost", epoch=self.epoch, why=why)
            self.lost_why = why
            self.lost.set()

    async def step(self) -> None:
        """One claim (or renewal)."""
        started = self._monotonic()
        leading = self.is_leading
        if leading and started >= self._valid_until:
            self._lose("lease not renewed in time")
            return
        try:
            async with asyncio.timeout(self._valid_until - started if leading else self.lease_s):
                seen = None if leading else await self._peek()
                if seen is None:
                    async with self.store.tx(write=True) as conn:
                        seen = await claim(
                            conn,
                            holder=self.me.holder,
                            host=self.me.host,
                            epoch=self.epoch if leading else None,
                            lease_ms=int(self.lease_s * 1000),
                            pid=os.getpid(),
                        )
        except (StoreError, TimeoutError) as err:
            self.errors += 1
            why = str(err) or "timed out"
            log.warning("lease: the store did not answer", error=why)
            if leading and self._monotonic() >= self._valid_until:
                self._lose(f"lease not renewed: {why}")
            return
        if not seen.mine and (self.seen is None or self.seen.epoch != seen.epoch):
            log.info("following", leader=seen.holder, host=seen.host, epoch=seen.epoch)
        self.seen = seen
        if not seen.mine:
            if leading:
                self._lose(f"{seen.holder} on {seen.host} leads with epoch {seen.epoch}")
            return
        self._valid_until = started + self.lease_s
        if not leading and not self.lost.is_set():
            self.epoch, self.won = seen.epoch, seen
            log.info("leading", epoch=seen.epoch, took_over=seen.took_over)
            self.leading.set()

    async def _peek(self) -> Lease | None:
        """A follower's look at the lease, taking no lock (so a frozen leader's lock cannot hold
        it up): the lease when another instance holds it and it is current (nothing to claim);
        else None, once a frozen leader's stuck transaction is ended if the lease ran out
        (`supervisor.record.store.stuck`), and the caller claims."""
        async with self.store.tx(write=False) as conn:
            lease = await current(conn)
            if lease is not None and not lease.expired and lease.holder != self.me.holder:
                return lease
            ended = await end_stuck_sessions(conn, stuck_s=self.lease_s / 3)
        if ended:
            log.warning("ended a frozen leader's stuck transaction", pids=ended)
        return None

    async def run(self) -> None:
        while not self.lost.is_set():
            await self.step()
            self.claimed.set()
            with suppress(TimeoutError):
                async with asyncio.timeout(self.next_wait()):
                    await self._woken.wait()
            self._woken.clear()

    def wake(self, _payload: str = "") -> None:
        """Claim now, not at the next third of the lease (a `LEASE` notification)."""
        self._woken.set()

    def next_wait(self) -> float:
        """A third of the lease; a leader never sleeps past its lease, a follower wakes just
        after the lease it saw runs out (so a takeover comes within the lease of the leader's
        last heartbeat, not a third of a lease later)."""
        wait = self.lease_s / 3
        if self.is_leading:
            return max(0.0, min(wait, self._valid_until - self._monotonic()))
        seen = self.seen
        if seen is not None and not seen.mine and not seen.expired:
            wait = min(wait, (seen.expires_ms - seen.now_ms) / 1000 + FOLLOW_SLACK_S)
        return max(FOLLOW_SLACK_S, wait)

    async def release(self) -> None:
        """A clean stop: free the lease at once (best effort)."""
        if self.epoch is None or self.lost.is_set():
            return
        try:
            async with self.store.tx(write=True) as conn:
                await release(conn, holder=self.me.holder, epoch=self.epoch)
        except StoreError as err:
            log.warning("lease: could not release", error=str(err))

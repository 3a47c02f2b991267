"""The claim loop: every third of the lease, renew it (leading) or try to take it (following),
and at once when `wake` is called (the store announced a release or a takeover:
`supervisor.record.store.listen`; the loop's own pace stays the fallback).

A leader whose renewal is *answered* by another holder steps down. A leader whose lease ran out
by its monotonic clock (measured from *before* the last renewal that succeeded: a follower can
only take over once the lease ran out on the database's clock, which is later) without it having
seen the store fail was frozen (SIGSTOP, a hung VM): it steps down, and `holds` told every part
that reaches the outside to stop the moment the deadline passed, before any store round trip.

The store failing is not losing the lead. A renewal the store *refuses* (a full disk, a file
made read-only, the PostgreSQL server down or unreachable) while the lease still held puts the
leader in `store_down`: it keeps leading, probing and telling people (nobody else can take a
SQLite file's lease; on PostgreSQL, if no instance reaches the store, nobody can), while its
repairs meet the fence (which needs the store) and wait. It keeps trying every third of the
lease; each failed try proves it was not frozen, so `holds` stays true while the tries go on,
and turns false if they stop for a whole lease (frozen during the outage). When the store
answers again, the renewal tells whether it still holds the lease (nobody took it: same epoch)
or must follow.

A follower that could not reach the store either counts the lease from when the store answered
it again, as if the leader had renewed then: it takes a lease that ran out meanwhile over only
once it has read that same row (not released, nobody renewing it) for a whole lease after the
store came back. After an outage for everyone, however long (the lease has run out on the
database's clock long before the server returns), the leader, which tries every third of the
lease and so renews within a third of a lease of the store's return, keeps its epoch and its
lead, and writes what it kept in memory; a follower that reaches the store first waits. A leader
that died during the outage is replaced a lease after the store returned, as after any crash.

From one node "the store is down for everyone" and "I am cut off from it" look the same; the
peers (`store.peers`, `supervisor.core.peers`) tell them apart (Patroni's DCS failsafe). While
the store refuses a leader's renewals (or the one due was not answered a third of a lease
before the lease's end), it asks every peer each sixth of the lease, and steps down at once,
silent (`told`: which peer, `case`: why), when one leads with a newer epoch; when one reaches
the store (checked as it answers), which takes the lease over once it runs out, it renews at
once and steps down when that is refused, or at the latest a tenth of a lease before the
lease's end, so before the peer can take over (at most one voice once the question is
answered). A peer that
does not answer counts as not leading, so a lone surviving box keeps telling; when every peer
that answers is cut off too (the store down for everyone) it leads on. Each case is logged
once when it begins, and noted for the leadership journal (`notes`), written when the store
answers again. Without peers it behaves as above.
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

from supervisor.core.httpclient import HttpClient
from supervisor.core.peers import ASK_S, Asked, PeerAnswer, Peers, ask_all
from supervisor.record.store.errors import StoreError
from supervisor.record.store.lease import Lease, claim, current_lease, release, write_journal
from supervisor.record.store.store import Store
from supervisor.record.store.stuck import end_stuck_sessions

log = structlog.get_logger("supervisor.leader")

FOLLOW_SLACK_S = 0.05


@dataclass(frozen=True, kw_only=True)
class PeerVerdict:
    """A leader's verdict on its peers' answers while the store did not answer it, for the
    leadership journal (`cut_off`): `stepped down: a peer reaches the store (b)`."""

    at_ms: int  #: when it was decided (this host's clock)
    epoch: int  #: the epoch it led with
    detail: str


def _said(answer: PeerAnswer) -> str:
    if answer.leading:
        return f"leads with epoch {answer.epoch}"
    return "reaches the store (it takes the lease over once it runs out)"


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
        peers: Peers | None = None,
        notes: list[PeerVerdict] | None = None,
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
        #: why the store did not answer our last claim as a follower ('' when it did)
        self.store_problem = ""
        #: why the store refuses our renewals while we lead ('' when it answers)
        self.store_down = ""
        self._last_try = 0.0  #: when the last renewal that the store refused started
        #: when the renewal in flight started (None: none is), if it started inside the lease:
        #: a driver cut at its timeout may take a moment to return
        self._trying: float | None = None
        self._unanswered = False  #: the store failed us as a follower, and has not answered since
        #: when the store answered us again (a follower) after failing us: a lease that ran out
        #: meanwhile counts from then (None: no outage, or a whole lease has passed since)
        self._back: float | None = None
        self._woken = asyncio.Event()
        self.peers = peers
        #: the peer whose answer made us step down (it leads with a newer epoch, or it reaches
        #: the store), and which case it was (`a peer leads with epoch 2`)
        self.told: PeerAnswer | None = None
        self.case = ""
        #: the peers' verdicts not yet in the leadership journal (shared across terms)
        self.notes: list[PeerVerdict] = [] if notes is None else notes
        self._peer_case = ""  #: what the peers said last time, as logged
        #: the store began refusing our renewals (or refused the one tried after a peer said
        #: it reaches the store): ask at once
        self._down = asyncio.Event()
        #: when a peer first said it reaches the store, in this doubt (None: none did)
        self._reached: float | None = None
        self.on_answered: Callable[[], None] | None = None  #: after each claim the store answered
        self._idle = asyncio.Event()  #: set while no renewal of ours is under way (`quiet`)
        self._idle.set()

    @property
    def is_leading(self) -> bool:
        return self.leading.is_set() and not self.lost.is_set()

    def holds(self) -> bool:
        """Whether we still lead, by our own monotonic clock (no store round trip): the lease's
        deadline has not passed, or the store refuses our renewals and we keep trying."""
        return self.is_leading and self._holds_at(self._monotonic())

    def _holds_at(self, now: float) -> bool:
        if now < self._valid_until:
            return True
        if self._trying is not None and now - self._trying < self.lease_s:
            return True  # a renewal started inside the lease has not returned yet
        return bool(self.store_down) and now - self._last_try < self.lease_s

    @property
    def deadline(self) -> float:
        """The lease's end by our monotonic clock (0 before we lead)."""
        return self._valid_until

    def _lose(self, why: str) -> None:
        if self.is_leading:
            log.warning("leadership lost", epoch=self.epoch, why=why)
            self.lost_why = why
            self.lost.set()

    async def step(self) -> None:
        """One claim (or renewal)."""
        started = self._monotonic()
        leading = self.is_leading
        if leading and not self._holds_at(started):
            self._lose("lease not renewed in time")
            return
        limit = self.lease_s  # a renewal never outlives the lease it protects
        if leading:  # given up inside the lease (so that `holds` never lapses meanwhile)
            limit = (
                self.lease_s / 3
                if self.store_down
                else max(0.01, self._valid_until - started - self.lease_s / 10)
            )
        self._trying = started if leading else None
        if leading:
            self._idle.clear()
        try:
            async with asyncio.timeout(limit):
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
            why = str(err) or "the store did not answer in time"
            if leading:  # the store failing is not losing the lead
                if not self.store_down:
                    log.warning("lease not renewed: the store refuses; leading on", error=why)
                if not self.store_down or self._reached is not None:
                    self._down.set()
                self.store_down, self._last_try = why, started
            else:
                if not self._unanswered:  # once per spell: a cut-off follower tries on
                    log.warning("lease: the store did not answer", error=why)
                self._unanswered, self._back = True, None
                self.store_problem = why
            return
        finally:
            self._trying = None
            self._idle.set()
        if self.store_problem and not leading:
            log.warning("lease: the store answers again")
        self.store_problem = ""
        if not seen.mine and (self.seen is None or self.seen.epoch != seen.epoch):
            log.info("following", leader=seen.holder, host=seen.host, epoch=seen.epoch)
        self.seen = seen
        if self.on_answered is not None:
            self.on_answered()
        await self._write_notes()
        if not seen.mine:
            if leading:
                self._lose(f"{seen.holder} on {seen.host} leads with epoch {seen.epoch}")
            return
        self._valid_until = started + self.lease_s
        if self.store_down:
            log.warning("lease renewed: the store answers again", epoch=seen.epoch)
            self.store_down = ""
        if not leading and not self.lost.is_set():
            self.epoch, self.won = seen.epoch, seen
            log.info("leading", epoch=seen.epoch, took_over=seen.took_over)
            self.leading.set()

    async def quiet(self) -> None:
        """Return once no renewal of ours is under way (at once when none is). A renewal locks
        the lease row alone, and every fenced write takes it shared: a replay of queued writes
        (`ResilientStore.before_batch`) waits here before each batch, so that the renewal due
        when the store comes back waits for one batch at most, not for the whole replay (947
        writes held it past its limit for 5 s on a loaded box)."""
        await self._idle.wait()

    async def _peek(self) -> Lease | None:
        """A follower's look at the lease, taking no lock (so a frozen leader's lock cannot hold
        it up): the lease when another instance holds it and it is current (nothing to claim);
        else None, once a frozen leader's stuck transaction is ended if the lease ran out
        (`supervisor.record.store.stuck`), and the caller claims."""
        async with self.store.tx(write=False) as conn:
            lease = await current_lease(conn)
            just_back = self._store_just_back()
            others = lease is not None and lease.holder != self.me.holder
            if lease is not None and others:
                held = not lease.expired or (not lease.released and just_back)
                if held:
                    return lease
            ended = await end_stuck_sessions(conn, stuck_s=self.lease_s / 3)
        if ended:
            log.warning("ended a frozen leader's stuck transaction", pids=ended)
        return None

    def _store_just_back(self) -> bool:
        """The store failed us, and has answered again for less than a whole lease: a lease that
        ran out meanwhile may be a leader's that could not reach the store either (it renews
        within a third of a lease of the store's return). Called on every answer, so the count
        starts at the first (not at the first that finds the lease run out, maybe hours later)."""
        now = self._monotonic()
        if self._unanswered:
            self._unanswered, self._back = False, now
        if self._back is not None and now - self._back >= self.lease_s:
            self._back = None
        return self._back is not None

    async def run(self) -> None:
        asking = None
        if self.peers is not None and self.peers.urls:
            asking = asyncio.create_task(self._asking(self.peers), name="leader:peers")
        try:
            while not self.lost.is_set():
                await self.step()
                self.claimed.set()
                with suppress(TimeoutError):
                    async with asyncio.timeout(self.next_wait()):
                        await self._woken.wait()
                self._woken.clear()
        finally:
            if asking is not None:
                asking.cancel()
                await asyncio.gather(asking, return_exceptions=True)

    async def _asking(self, peers: Peers) -> None:
        """While in doubt (`_in_doubt`): ask every peer at once, then each sixth of the lease,
        until one makes us step down or the store answers again; else look again when the
        renewal due would be overdue, or when the store begins refusing (`_down`)."""
        async with HttpClient() as client:
            while not self.lost.is_set():
                self._down.clear()
                wait = self.lease_s / 6
                if self._in_doubt():
                    within = min(ASK_S, self.lease_s / 3)
                    self.heard(await ask_all(client, peers.urls, peers.token, within))
                    if self._reached is not None:  # asked again when it must give up
                        wait = min(wait, self._step_down_at() - self._monotonic())
                else:
                    self._peer_case, self._reached = "", None
                    if self.is_leading:  # asked in time to be silent before the lease ends
                        wait = min(wait, self._overdue_at() - self._monotonic())
                with suppress(TimeoutError):
                    async with asyncio.timeout(max(0.01, wait)):
                        await self._down.wait()

    def _in_doubt(self) -> bool:
        """Leading, and the store refuses our renewals, or none was answered for a third of a
        lease after it was due (a renewal in flight on a store that does not answer: a driver
        may take a while to give up, while a peer may take the lease over)."""
        if not self.is_leading:
            return False
        return bool(self.store_down) or self._monotonic() >= self._overdue_at()

    def _overdue_at(self) -> float:
        """When the renewal due now is overdue: a third of a lease before the lease's end."""
        return self._valid_until - self.lease_s / 3

    def heard(self, asked: list[Asked]) -> None:
        """What the peers said while the store refuses us: step down if one leads with a newer
        epoch, or reaches the store (it takes the lease over once it runs out); else lead on,
        saying (once per case) whether none answered or every one that did is cut off too."""
        if not self._in_doubt() or self.epoch is None:
            return
        mine = self.epoch
        answers = [a.answer for a in asked if a.answer is not None]
        newer = [a for a in answers if a.leading and (a.epoch or 0) > mine]
        reaching = [a for a in answers if not a.leading and not a.store]
        if reaching and not newer and not self._gives_up(reaching[0]):
            return
        if newer or reaching:
            told = max(newer, key=lambda a: a.epoch or 0) if newer else reaching[0]
            case = f"a peer leads with epoch {told.epoch}" if newer else "a peer reaches the store"
            self.told, self.case = told, case
            event = "a peer leads" if newer else "a peer reaches it"
            log.warning(
                f"cut off from the store: {event}; stepping down",
                peer=told.instance,
                epoch=told.epoch,
                mine=mine,
                store=self.store_down or "no renewal answered",
            )
            self._note(f"stepped down: {case} ({told.instance})")
            self._lose(f"{told.instance} {_said(told)}, as it told this instance")
            return
        case = "every peer cut off" if answers else "no peer answered"
        if case != self._peer_case:
            self._peer_case = case
            cut = {a.instance: a.store for a in answers}
            unanswered = {a.url: a.failure for a in asked if a.answer is None}
            log.warning(
                f"store refuses; peers asked: {case}; leading on",
                cut_off=cut,
                unanswered=unanswered,
            )
            why = "; ".join([*(f"{k}: {v}" for k, v in cut.items()), *unanswered.values()])
            self._note(f"led on: {case} ({why})")

    def _gives_up(self, peer: PeerAnswer) -> bool:
        """A peer reaches the store: renew at once (the store may be back for us too, as after
        an outage for everyone); give up when that renewal is refused, or at the latest a
        tenth of a lease before the lease's end (the peer takes it over once it ran out)."""
        now = self._monotonic()
        if self._reached is None:
            self._reached = now
            log.info("store refuses; peers asked: a peer reaches the store; renewing at once")
            self._woken.set()
        refused = bool(self.store_down) and self._last_try >= self._reached
        return refused or now >= self._step_down_at()

    def _step_down_at(self) -> float:
        """When a leader a peer said reaches the store steps down at the latest."""
        return self._valid_until - self.lease_s / 10

    def _note(self, detail: str) -> None:
        """A verdict for the leadership journal, written when the store answers again."""
        assert self.epoch is not None
        at_ms = int(time.time() * 1000)
        self.notes.append(PeerVerdict(at_ms=at_ms, epoch=self.epoch, detail=detail))

    async def _write_notes(self) -> None:
        """The verdicts noted while the store did not answer us, into the leadership journal
        (`cut_off`), in order; kept for the next answered claim if this one fails."""
        notes = list(self.notes)
        if not notes:
            return
        try:
            async with asyncio.timeout(self.lease_s / 3), self.store.tx(write=True) as conn:
                for note in notes:
                    await write_journal(
                        conn,
                        at_ms=note.at_ms,
                        epoch=note.epoch,
                        holder=self.me.holder,
                        host=self.me.host,
                        event="cut_off",
                        detail=note.detail,
                    )
        except (StoreError, TimeoutError):
            return
        del self.notes[: len(notes)]

    def wake(self, _payload: str = "") -> None:
        """Claim now, not at the next third of the lease (a `LEASE` notification)."""
        self._woken.set()

    def next_wait(self) -> float:
        """A third of the lease; a leader never sleeps past its lease, a follower wakes just
        after the lease it saw runs out (so a takeover comes within the lease of the leader's
        last heartbeat, not a third of a lease later). While the store refuses a leader, its
        next try is due two thirds of a lease after the last one began (what `holds` counts
        from), not a third after it ended: the first refused renewal may have taken most of
        what was left of the lease, and a loop that wakes late on a loaded box must still try
        within the lease."""
        wait = self.lease_s / 3
        if self.is_leading and self.store_down:
            return max(0.0, min(wait, self._last_try + 2 * wait - self._monotonic()))
        if self.is_leading:
            return max(0.0, min(wait, self._valid_until - self._monotonic()))
        seen = self.seen
        if seen is not None and not seen.mine and not seen.expired:
            wait = min(wait, (seen.expires_ms - seen.now_ms) / 1000 + FOLLOW_SLACK_S)
        if self._back is not None:  # the lease counted from the store's return runs out then
            wait = min(wait, self._back + self.lease_s - self._monotonic() + FOLLOW_SLACK_S)
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

"""What an instance runs: following until it wins the lease, then the whole supervisor under
its epoch, and back to following when it loses the lease (or the fence refuses it).

A follower runs no probe, no repair and no notifier (one Telegram poller at a time); it claims
the lease every third of it, and at once when the store announces a release or a takeover
(PostgreSQL's LISTEN/NOTIFY, `supervisor.record.store.listen`: a clean stop hands over at once). The
new leader's supervisor starts from the store as a restart would (`supervisor.runtime.restore` marks
attempts the old leader left `interrupted`, and the runner decides afresh), and tells Telegram
it took over: from whom, after how long.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog

from supervisor.app.leader.elector import Elector, Me, PeerVerdict
from supervisor.app.leader.words import takeover_text
from supervisor.app.root import Supervisor
from supervisor.config.models import FleetConfig
from supervisor.core.aio import stop_in_order
from supervisor.core.httpclient import HttpClient
from supervisor.core.peers import ASK_S, PeerAnswer, PeerDoor, Peers, ask_all, read_peer_token
from supervisor.core.tenure import Tenure
from supervisor.hear.units import warm_transports
from supervisor.record.store.errors import StoreError
from supervisor.record.store.lease import StaleEpochError, current_lease
from supervisor.record.store.listen import LEASE, Listener
from supervisor.record.store.outbox import OutboxDraft
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget, store_target
from supervisor.tell.web.following import FollowerHttp

if TYPE_CHECKING:
    from supervisor.hear.streams.warm import WarmTransports

log = structlog.get_logger("supervisor.leader")


def me_of(config: FleetConfig) -> Me:
    host = socket.gethostname()
    return Me(holder=config.store.instance or host, host=host)


class LeaderGate:
    """`run(stop)`: follow, lead, follow ... until `stop` is set; the lease is released on a
    clean stop so a follower takes over at once."""

    def __init__(
        self, config: FleetConfig, make: Callable[[], Supervisor], *, listen: bool = True
    ) -> None:
        self.config = config
        self.me = me_of(config)
        self._make = make
        self.target: StoreTarget = store_target(config.store)
        self.supervisor: Supervisor | None = None  #: while leading
        self.elector: Elector | None = None
        self.terms = 0  #: how many times this instance led
        #: the SSH connections of the hosts' event streams, kept open while following
        self.warm: WarmTransports | None = None
        #: the store's notifications (a no-op on SQLite, or with listen=False: the claim loop's
        #: own pace only)
        self.listener = Listener(self.target if listen else None)
        #: the peers asked while the store refuses our renewals, and the token they share
        self.peers, self.door = self._peers(config)
        #: the peer that told us it leads when the store did not answer us, and why the store
        #: did not (until the store answers this instance again)
        self.cut_off: tuple[PeerAnswer, str, Elector] | None = None
        #: the peers' verdicts not yet in the leadership journal (`Elector.notes`)
        self.notes: list[PeerVerdict] = []
        self._store: Store | None = None  #: the claims' store, once open
        #: while cut off: asks the peers who leads now (the line names it)
        self._asking: asyncio.Task[None] | None = None
        #: the last term's follower HTTP stop, when it took a second or more (`slow_s`)
        self._follower_slow: dict[str, float] = {}

    def _peers(self, config: FleetConfig) -> tuple[Peers | None, PeerDoor | None]:
        path = config.store.peer_token_file
        if path is None:
            return None, None
        try:
            token = read_peer_token(path)
        except (OSError, ValueError) as err:
            why = err.strerror if isinstance(err, OSError) else str(err)
            raise StoreError(f"cannot read store.peer_token_file {path}: {why or err}") from None
        peers = Peers(urls=config.store.peers, token=token)
        return peers, PeerDoor(token=token, answer=self.answer)

    async def answer(self) -> PeerAnswer:
        """This instance, as the peers' question has it: whether it leads (by its own clock),
        with which epoch, and whether it reaches the store (a follower reads it as it answers:
        an asker in doubt steps down when a peer reaches it, so the answer must be fresh)."""
        elector = self.elector
        if elector is not None and elector.holds():
            epoch, store = elector.epoch, elector.store_down
            return PeerAnswer(instance=self.me.holder, leading=True, epoch=epoch, store=store)
        seen = elector.seen if elector is not None else None
        epoch = seen.epoch if seen is not None else None
        store = await self._reaches()
        return PeerAnswer(instance=self.me.holder, leading=False, epoch=epoch, store=store)

    async def _reaches(self) -> str:
        """'' when the store answers a read now, else why not (within half the time an asker
        gives a peer)."""
        if self._store is None:
            return "not opened yet"
        try:
            async with asyncio.timeout(self._within() / 2), self._store.tx(write=False) as conn:
                await current_lease(conn)
        except TimeoutError:
            return f"no answer within {self._within() / 2:g}s"
        except StoreError as err:
            return str(err)
        return ""

    def _within(self) -> float:
        """How long a peer has to answer the question."""
        return min(ASK_S, self.config.store.lease.total_seconds() / 3)

    def _still_cut_off(self) -> bool:
        """Whether the store has not answered this instance since a peer told it to step down
        (forgotten once it has)."""
        elector = self.elector
        if self.cut_off is None:
            return False
        answered = elector is not None and elector.seen is not None and not elector.store_problem
        if answered and elector is not self.cut_off[2]:  # a term after the one cut off
            self._back()
            return False
        return True

    def _back(self) -> None:
        """The store answers this instance again after it was cut off: said once."""
        elector = self.elector
        if self.cut_off is None or elector is None or elector is self.cut_off[2]:
            return
        seen = elector.seen
        self.cut_off = None
        log.warning(
            "cut off no more: the store answers again; following",
            leader=seen.holder if seen is not None else None,
            epoch=seen.epoch if seen is not None else None,
        )

    def cut_off_line(self) -> str:
        """What a cut-off instance answers every HTTP request with ('' when it is not)."""
        if not self._still_cut_off():
            return ""
        assert self.cut_off is not None
        told, problem, _ = self.cut_off
        elector = self.elector
        now = elector.store_problem if elector is not None and elector.store_problem else problem
        said = (
            f"{told.instance} leads (epoch {told.epoch}), as it told this instance"
            if told.leading
            else f"{told.instance} reaches it and takes the lease over once it runs out"
        )
        return (
            f"this instance does not lead: the store does not answer it ({now}); "
            f"{said}; send control requests there"
        )

    async def _ask_who_leads(self, peers: Peers) -> None:
        """While cut off: ask the peers each sixth of the lease, so that the line names the
        one that leads now (a peer that reached the store takes the lease over later)."""
        lease_s = self.config.store.lease.total_seconds()
        async with HttpClient() as client:
            while self._still_cut_off():
                asked = await ask_all(client, peers.urls, peers.token, self._within())
                leaders = [a.answer for a in asked if a.answer is not None and a.answer.leading]
                if leaders and self.cut_off is not None:
                    told = max(leaders, key=lambda answer: answer.epoch or 0)
                    self.cut_off = (told, *self.cut_off[1:])
                await asyncio.sleep(lease_s / 6)

    def _stepped_down(self, elector: Elector, supervisor: Supervisor) -> None:
        """Cut off from the store, a peer's answer made us step down: what the supervisor would
        still write or ask is refused at once (its writes kept are a deposed leader's), and
        the peers are asked who leads from now on."""
        told = elector.told
        if told is None or elector.epoch is None:
            return
        problem = elector.store_down or "the store did not answer in time"
        self.cut_off = (told, problem, elector)
        if supervisor.store is not None:  # a peer that reaches the store takes the next epoch
            epoch = told.epoch if told.leading and told.epoch else elector.epoch + 1
            supervisor.store.depose(epoch=epoch, holder=told.instance)
        if self.peers is not None and (self._asking is None or self._asking.done()):
            self._asking = asyncio.create_task(
                self._ask_who_leads(self.peers), name="leader:cut-off"
            )

    def request_reload(self) -> None:
        """SIGHUP: the leading supervisor reloads; a follower has nothing loaded yet."""
        if self.supervisor is not None:
            self.supervisor.request_reload()

    async def run(self, stop: asyncio.Event) -> None:
        self._store = store = await Store.open(self.target)
        self.warm = warm_transports(self.config)
        self.listener.start()
        try:
            while not stop.is_set():
                await self._term(store, stop)
        finally:
            slow = await stop_in_order(
                [
                    ("peer question", self._stop_asking),
                    ("listener", self.listener.close),
                    ("event streams", self.warm.close if self.warm is not None else None),
                    ("store", store.close),
                ]
            )
            slow = self._follower_slow | slow
            log.info("leadership stopped", **({"slow_s": slow} if slow else {}))

    async def _stop_asking(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            await asyncio.gather(self._asking, return_exceptions=True)

    async def _term(self, store: Store, stop: asyncio.Event) -> None:
        self.elector = elector = Elector(
            store, self.me, self.config.store.lease, peers=self.peers, notes=self.notes
        )
        elector.on_answered = self._back
        unsubscribe = self.listener.subscribe(LEASE, elector.wake)
        claims = asyncio.create_task(elector.run(), name="leader:claims")
        if self.warm is not None:
            self.warm.start()  # following: the event streams' connections kept open
        following = FollowerHttp(  # read-only HTTP
            self.config,
            store,
            me=self.me.holder,
            listener=self.listener,
            peer=self.door,
            cut_off=self.cut_off_line,
        )
        try:
            if self.cut_off is not None:  # says at once why it does not lead
                await following.start()
            if await _first(elector.claimed, stop) and not elector.leading.is_set():
                await following.start()  # it follows: served until it leads
            if not await _first(elector.leading, stop):
                return
            await following.stop()  # before the supervisor binds the same address
            assert elector.epoch is not None
            deposed = asyncio.Event()
            supervisor = self._make()
            supervisor.fence = (elector.epoch, self.me.holder, self.me.host)
            supervisor.interrupted_why = interrupted_why(elector, self.me)
            # the parts that reach the outside check the lease's deadline locally first
            supervisor.tenure = Tenure(
                elector.holds,
                why=lambda: elector.lost_why or _ran_out(elector),
                on_lost=elector.wake,
            )
            supervisor.on_deposed = lambda _err: deposed.set()
            supervisor.peer_door = self.door
            supervisor.renewal_first = elector.quiet
            if self.warm is not None:  # the streams run on the connections kept open
                supervisor.transports = await self.warm.hand_over()
            self.supervisor = supervisor
            self.terms += 1
            try:
                await supervisor.start()
                await self._announce(supervisor, elector)
                await _first(elector.lost, stop, deposed)
            except StaleEpochError as err:  # deposed while starting: an expected end
                log.warning("deposed", stops="the supervisor's start", refused=str(err))
            except Exception:  # the store dropped mid-start, say: stop, follow, try again
                log.exception("leading failed; following again")
                await _first(stop, _later(elector.lease_s / 3))
            finally:
                # a clean stop: the journal cursors saved, the supervisor stopped (its last
                # writes under our epoch, the lease still renewed), then the lease released; a
                # follower takes it at once, so nothing of ours may write after that
                clean = stop.is_set() and not elector.lost.is_set()
                if elector.told is not None:  # cut off from the store, a peer answered
                    self._stepped_down(elector, supervisor)
                    # it says so at once, however long the teardown takes
                    await supervisor.ops.stop_serving()
                    await following.start()
                if clean:
                    await supervisor.step_down()
                else:
                    claims.cancel()
                self.supervisor = None
                await _stop(supervisor)
                claims.cancel()
                if clean:
                    await elector.release()
            if not stop.is_set():
                log.warning("following again", why=elector.lost_why or "fenced")
        finally:
            unsubscribe()
            claims.cancel()
            self._follower_slow = await stop_in_order([("follower http", following.stop)])

    async def _announce(self, supervisor: Supervisor, elector: Elector) -> None:
        """Tell Telegram how this instance came to lead (a takeover, or a restart after an
        unclean stop); nothing when the lease was free (a clean stop, the first start)."""
        won = elector.won
        notifier = supervisor.notifier
        telegram = supervisor.config.notify.telegram
        if won is None:
            return
        text = takeover_text(won, self.me)
        log.info("took over", text=text)
        if text is None or notifier is None or telegram is None:
            return
        try:
            await notifier.outbox.commit(
                drafts=[OutboxDraft(kind="leader", text=text)],
                chat_ids=telegram.chat_ids,
                states={},
                at=datetime.now(UTC),
            )
        except StaleEpochError:
            return
        notifier.sender.kick()


async def _stop(supervisor: Supervisor) -> None:
    """Stop what this term started. A deposed leader's teardown meets the fence at every write
    (its snapshots, its attempts): what fails there is logged, and the instance follows on."""
    try:
        await supervisor.stop()
    except StaleEpochError as err:
        log.warning("deposed", stops="the supervisor's teardown", refused=str(err))
    except Exception:
        log.exception("stopping the deposed supervisor failed; following on")


def interrupted_why(elector: Elector, me: Me) -> str:
    """Why the repairs the last leader left unfinished were cut: another instance (us) took
    its expired lease (`deposed: b leads with epoch 3`), or it stopped (a clean stop, or our own
    restart)."""
    won = elector.won
    before = won.previous if won is not None else None
    if won is None or before is None or before.released or before.holder == me.holder:
        return "the daemon stopped"
    return f"deposed: {me.holder} leads with epoch {won.epoch}"


def _ran_out(elector: Elector) -> str:
    return f"its lease (epoch {elector.epoch}) ran out before it was renewed"


def _later(seconds: float) -> asyncio.Event:
    """An event set after `seconds` (a pause that a stop cuts short, with `_first`)."""
    event = asyncio.Event()
    asyncio.get_running_loop().call_later(seconds, event.set)
    return event


async def _first(*events: asyncio.Event) -> bool:
    """Wait until one of `events` is set; True when it was the first one."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return events[0].is_set() and not any(e.is_set() for e in events[1:])

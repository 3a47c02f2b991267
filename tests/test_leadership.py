"""Two instances in one process on one store (a SQLite file here; the chaos specs run real
processes on PostgreSQL): the first leads and says so in /status and /metrics, the second
follows; a clean stop releases the lease and the follower leads at once. What the new leader
says in Telegram."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.app.leader.elector import Elector, Me
from supervisor.app.leader.gate import LeaderGate, interrupted_why
from supervisor.app.leader.words import takeover_text
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.core.peers import PeerAnswer
from supervisor.core.tenure import Tenure
from supervisor.core.tls import default_tls
from supervisor.record.store.errors import StoreRefusedError
from supervisor.record.store.lease import Lease, lease_journal
from supervisor.record.store.records import TimelineRow
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.store import Store
from supervisor.tell.web.page.feed import Feed
from supervisor.tell.web.page.reads import entries_after
from tests.helpers import eventually, write_fleet
from tests.ports import free_port
from tests.test_store import open_incident_at


def _config(tmp_path: Path, instance: str, port: int) -> Path:
    folder = tmp_path / instance
    folder.mkdir()
    path = write_fleet(
        folder,
        {"m": {"kind": "health", "url": f"http://127.0.0.1:{free_port()}/h"}},
        http={"listen": f"127.0.0.1:{port}"},
    )
    document = yaml.safe_load(path.read_text())
    document["store"] = {"path": str(tmp_path / "shared.db"), "instance": instance}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


class Running:
    def __init__(self, path: Path) -> None:
        config = load_config(path)
        self.gate = LeaderGate(config, lambda: Supervisor(config))
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.gate.run(self.stop))
        self.url = f"http://{config.http.listen}"

    async def end(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 30)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Running, Running]]:
    a = Running(_config(tmp_path, "a", free_port()))
    await eventually(lambda: a.gate.supervisor is not None, within=20, what="a leading")
    b = Running(_config(tmp_path, "b", free_port()))
    await eventually(
        lambda: b.gate.elector is not None and b.gate.elector.seen is not None,
        within=20,
        what="b following",
    )
    yield a, b
    for run in (a, b):
        if not run.task.done():
            await run.end()


async def test_the_leader_says_so_and_a_clean_stop_hands_over_at_once(
    tmp_path: Path, pair: tuple[Running, Running]
) -> None:
    a, b = pair
    assert b.gate.supervisor is None  # b runs nothing while it follows
    async with httpx.AsyncClient(verify=default_tls()) as client:
        await eventually(lambda: _answers(client, a.url), within=20, what="a's HTTP")
        # a's supervisor is started (its HTTP is the last part up, its store the first): the
        # leader's replay of queued writes lets its lease's renewal go first
        assert a.gate.supervisor is not None
        assert a.gate.elector is not None
        assert isinstance(a.gate.supervisor.store, ResilientStore)
        assert a.gate.supervisor.store.before_batch == a.gate.elector.quiet
        status = (await client.get(f"{a.url}/status")).json()["leadership"]
        metrics = (await client.get(f"{a.url}/metrics")).text
    assert (status["leader"], status["epoch"], status["leading"], status["this_instance"]) == (
        "a",
        1,
        True,
        "a",
    )
    assert 'fleet_supervisor_leader{instance="a"} 1.0\n' in metrics
    assert "fleet_supervisor_leader_epoch 1.0\n" in metrics
    await a.end()
    await eventually(lambda: b.gate.supervisor is not None, within=5, what="b leading at once")
    async with await Store.open(tmp_path / "shared.db") as store, store.tx(write=False) as conn:
        events = [(e.epoch, e.holder, e.event, e.detail) for e in await lease_journal(conn)]
    assert events[0] == (1, "a", "took_over", "first lease")
    assert events[1] == (1, "a", "released", "stopped")
    assert events[2][:3] == (2, "b", "took_over")
    assert events[2][3] == f"from a on {socket.gethostname()} (epoch 1, released)"


async def _answers(client: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await client.get(f"{url}/healthz")).status_code in (200, 503)
    except httpx.TransportError:
        return False


def _lease(holder: str, epoch: int, *, renewed: int, released: bool = False) -> Lease:
    return Lease(
        epoch=epoch, holder=holder, host=f"{holder}-box", acquired_ms=0, renewed_ms=renewed,
        expires_ms=renewed + 15_000, released=released, now_ms=renewed,
    )  # fmt: skip


T = 1_764_000_000_000  # 2025-11-24 16:00:00 UTC


@pytest.mark.parametrize(
    ("previous", "text"),
    [
        (None, None),  # the first lease: nothing to say
        (_lease("a", 1, renewed=T - 20_000, released=True), None),  # a clean stop
        (
            _lease("a", 1, renewed=T - 17_000),
            "🔁 <b>b on b-box took over</b> from a on a-box after 17s without a heartbeat "
            "(epoch 2)",
        ),
        (
            _lease("b", 1, renewed=T - 125_000),
            "🔁 <b>supervisor was down</b> from 2025-11-24 15:57:55 UTC to "
            "2025-11-24 16:00:00 UTC (2m5s); b on b-box leads again (epoch 2)",
        ),
    ],
)
def test_what_the_new_leader_says(previous: Lease | None, text: str | None) -> None:
    won = Lease(
        epoch=2, holder="b", host="b-box", acquired_ms=T, renewed_ms=T, expires_ms=T + 15_000,
        released=False, now_ms=T, mine=True, took_over=True, previous=previous,
    )  # fmt: skip
    assert takeover_text(won, Me(holder="b", host="b-box")) == text


@pytest.mark.parametrize(
    ("told", "line"),
    [
        (  # the peer that made it step down reaches the store: it will lead
            PeerAnswer(instance="b", leading=False, epoch=1, store=""),
            "this instance does not lead: the store does not answer it (no renewal answered);"
            " b reaches it and takes the lease over once it runs out; send control requests"
            " there",
        ),
        (  # once it leads (asked each sixth of the lease)
            PeerAnswer(instance="b", leading=True, epoch=2, store=""),
            "this instance does not lead: the store does not answer it (no renewal answered);"
            " b leads (epoch 2), as it told this instance; send control requests there",
        ),
    ],
)
def test_a_cut_off_instance_says_who_will_lead_then_who_leads(
    tmp_path: Path, told: PeerAnswer, line: str
) -> None:
    config = load_config(_config(tmp_path, "a", free_port()))
    gate = LeaderGate(config, lambda: Supervisor(config), listen=False)
    assert gate.cut_off_line() == ""
    gate.cut_off = (told, "no renewal answered", Elector.__new__(Elector))
    assert gate.cut_off_line() == line


async def test_a_failed_start_is_tried_again_not_fatal(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "a", free_port()))
    made: list[Supervisor] = []

    class FailsFirst(Supervisor):
        async def start(self) -> None:
            if len(made) == 1:
                raise RuntimeError("the store went away mid-start")
            await super().start()

    def make() -> Supervisor:
        made.append(FailsFirst(config))
        return made[-1]

    gate = LeaderGate(config.model_copy(update={"store": config.store.model_copy(
        update={"lease": timedelta(seconds=0.6)})}), make)  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(gate.run(stop))
    try:
        await eventually(
            lambda: len(made) == 2 and made[1].daemon is not None,
            within=20,
            what="a second term after the failed start",
        )
        assert gate.terms == 2
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert task.exception() is None


@pytest.mark.parametrize(
    ("previous", "why"),
    [
        (None, "the daemon stopped"),  # the first lease
        (_lease("a", 1, renewed=T - 20_000, released=True), "the daemon stopped"),  # clean stop
        (_lease("a", 1, renewed=T - 17_000), "deposed: b leads with epoch 2"),  # a took over from
        (_lease("b", 1, renewed=T - 17_000), "the daemon stopped"),  # b's own restart
    ],
)
def test_why_the_last_leaders_repairs_were_cut(previous: Lease | None, why: str) -> None:
    elector = Elector.__new__(Elector)
    elector.won = Lease(
        epoch=2, holder="b", host="b-box", acquired_ms=T, renewed_ms=T, expires_ms=T + 15_000,
        released=False, now_ms=T, mine=True, took_over=True, previous=previous,
    )  # fmt: skip
    assert interrupted_why(elector, Me(holder="b", host="b-box")) == why


#: the lease in the elector's own specs (its monotonic clock is the spec's; the store's is real):
#: a follower's step waits a lease for the store, so one SQLite round trip on a loaded 2-core box
#: must fit in it (at 0.3 s one did not, once); the specs move their clock in thirds of it
ELECTOR_LEASE_S = 1.5


class Refusing(Store):
    """A real SQLite store that can be made to refuse every transaction (a full disk, say)."""

    refuse = ""

    def tx(self, *, write: bool) -> AbstractAsyncContextManager[AsyncConnection]:
        if self.refuse:
            raise StoreRefusedError(self.refuse)
        return super().tx(write=write)


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_refused_renewal_keeps_the_lead_but_a_freeze_does_not(tmp_path: Path) -> None:
    clock, lease = Clock(), timedelta(seconds=ELECTOR_LEASE_S)
    opened = await Refusing.open(tmp_path / "s.db")
    assert isinstance(opened, Refusing)
    async with opened as store:
        elector = Elector(store, Me(holder="a", host="box"), lease, monotonic=clock)
        tenure = Tenure(elector.holds)
        await elector.step()
        assert elector.is_leading
        store.refuse = "cannot write to store s.db: database or disk is full"
        for _ in range(6):  # renewals refused for twice the lease, one every third of it
            clock.now += 0.5
            await elector.step()
            assert (elector.is_leading, tenure.holds()) == (True, True)
        assert elector.store_down == "cannot write to store s.db: database or disk is full"
        assert elector.next_wait() == pytest.approx(0.5)  # it keeps trying
        clock.now += 5  # frozen: no try for longer than the lease
        assert tenure.stops("the sender")  # every part knows before any round trip
        await elector.step()
        assert elector.lost.is_set()
        assert elector.lost_why == "lease not renewed in time"
        # a follower the store failed does not take the ran-out lease at once: it counts the
        # lease from the store's return (its leader, which could not reach the store either,
        # renews within a third of a lease of it)
        follower = Elector(store, Me(holder="b", host="box"), lease, monotonic=clock)
        store.refuse = "cannot read store s.db: connection refused"
        await follower.step()
        clock.now += 1.0
        await follower.step()  # refused again
        store.refuse = ""
        await asyncio.sleep(2.0)  # the lease ran out on the store's clock too
        clock.now += 1.0
        await follower.step()  # the store answers: the lease counts from now
        assert not follower.leading.is_set()
        assert (follower.seen.holder, follower.seen.expired) == ("a", True)  # type: ignore[union-attr]
        clock.now += 1.0  # a whole lease after the last refusal, not after the first answer
        await follower.step()
        assert not follower.leading.is_set()
        clock.now += 0.55  # a whole lease of answers
        await follower.step()
        assert follower.leading.is_set()


class SlowRefusing(Store):
    """A real SQLite store whose transactions are refused `takes` seconds of the spec's clock
    after they begin (a renewal that waited behind the store's own retries of a full disk)."""

    refuse = ""
    takes = 0.0
    clock: Clock

    def tx(self, *, write: bool) -> AbstractAsyncContextManager[AsyncConnection]:
        if self.refuse:
            self.clock.now += self.takes
            raise StoreRefusedError(self.refuse)
        return super().tx(write=write)


async def test_a_slow_first_refusal_leaves_the_loop_a_third_of_the_lease_to_wake_in(
    tmp_path: Path,
) -> None:
    """The first refused renewal may run until a tenth of a lease before the lease's end (its
    limit). The next try is then due two thirds of a lease after that one began: a third after
    it ended left a loop that woke 0.3 s late (a burner beside the suite, a 3 s lease) past the
    lease, and the leader of a full disk stepped down."""
    clock, lease = Clock(), timedelta(seconds=ELECTOR_LEASE_S)
    opened = await SlowRefusing.open(tmp_path / "s.db")
    assert isinstance(opened, SlowRefusing)
    async with opened as store:
        store.clock = clock
        elector = Elector(store, Me(holder="a", host="box"), lease, monotonic=clock)
        await elector.step()  # leading until 101.5
        assert elector.is_leading
        clock.now += 0.5  # the renewal due, begun at 100.5
        store.refuse, store.takes = "cannot write to store s.db: database or disk is full", 0.75
        await elector.step()  # refused at 101.25
        assert elector.store_down.endswith("database or disk is full")
        assert elector.next_wait() == pytest.approx(0.25)  # due at 101.5: 100.5 + 2/3 lease
        store.takes = 0.0
        late = ELECTOR_LEASE_S / 3 - 0.1  # the loop wakes late, by less than a third of a lease
        clock.now += elector.next_wait() + late
        await elector.step()
        assert (elector.is_leading, elector.lost_why) == (True, "")
        assert elector.next_wait() == pytest.approx(0.5)  # refused at once: a third again


class Held(Store):
    """A real SQLite store whose next transactions wait at their start until `go` is set (a
    renewal waiting for the lease row's lock)."""

    holding = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reached, self.go = asyncio.Event(), asyncio.Event()

    def tx(self, *, write: bool) -> AbstractAsyncContextManager[AsyncConnection]:
        return self._held(write) if self.holding else super().tx(write=write)

    @asynccontextmanager
    async def _held(self, write: bool) -> AsyncIterator[AsyncConnection]:
        self.reached.set()
        await self.go.wait()
        async with super().tx(write=write) as conn:
            yield conn


async def test_the_writes_that_wait_for_the_leader_s_renewal_go_after_it(tmp_path: Path) -> None:
    """`quiet` returns at once while no renewal is under way, and while one is, only once it
    ended (what waits there: a replay's next batch, `ResilientStore.before_batch`)."""
    clock, lease = Clock(), timedelta(seconds=ELECTOR_LEASE_S)
    opened = await Held.open(tmp_path / "s.db")
    assert isinstance(opened, Held)
    async with opened as store:
        elector = Elector(store, Me(holder="a", host="box"), lease, monotonic=clock)
        await elector.step()
        assert elector.is_leading
        await asyncio.wait_for(elector.quiet(), 10)  # none under way: at once
        store.holding = True
        renewal = asyncio.create_task(elector.step())
        await store.reached.wait()  # the renewal waits for the store
        after = asyncio.create_task(elector.quiet())
        for _ in range(3):
            await asyncio.sleep(0)  # a task whose wait is over ends at its first turn
        assert not after.done()
        store.holding = False
        store.go.set()
        await renewal
        await asyncio.wait_for(after, 10)
        assert elector.is_leading
        assert elector.deadline == clock.now + ELECTOR_LEASE_S


async def test_after_an_outage_a_follower_counts_from_the_stores_first_answer(
    tmp_path: Path,
) -> None:
    """A follower the store failed, whose first answer after it shows the leader's lease
    current, takes that lease over at once when it runs out much later (the leader died): the
    wait after an outage counts from the store's first answer, not from the first read that
    finds the lease run out."""
    clock, lease = Clock(), timedelta(seconds=ELECTOR_LEASE_S)
    opened = await Refusing.open(tmp_path / "s.db")
    assert isinstance(opened, Refusing)
    async with opened as store:
        leader = Elector(store, Me(holder="a", host="box"), lease, monotonic=clock)
        await leader.step()
        follower = Elector(store, Me(holder="b", host="box"), lease, monotonic=clock)
        store.refuse = "cannot read store s.db: connection refused"
        await follower.step()
        store.refuse = ""
        await follower.step()  # the store answers: a's lease is current
        assert (follower.leading.is_set(), follower.seen.holder) == (False, "a")  # type: ignore[union-attr]
        clock.now += 50  # much later: a died, its lease ran out
        await asyncio.sleep(2.0)
        await follower.step()
        assert follower.leading.is_set()


async def test_an_event_read_before_the_deadline_is_not_streamed_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's event stream checks the lease's deadline again just before it sends each
    event: an entry committed while this instance led, read by a stream whose read spanned the
    deadline (frozen while it waited for its connection), is not sent; the stream ends."""
    clock = Clock()
    deadline = clock.now + 1
    tenure = Tenure(lambda: clock() < deadline)

    async def read_across_the_deadline(store: Store, after: int) -> list[TimelineRow]:
        rows = await entries_after(store, after)
        if rows:
            clock.now = deadline  # woken past the deadline with the rows in hand
        return rows

    monkeypatch.setattr(f"{Feed.__module__}.entries_after", read_across_the_deadline)
    async with await Store.open(tmp_path / "s.db") as store:
        feed = Feed(store, tenure)
        feed.attach()
        app = web.Application()
        app.router.add_get("/events", feed.stream)
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/events")
            assert await response.content.readuntil(b"\n\n") == b"retry: 2000\n\n"
            await open_incident_at(store, "m", 0)  # queued for the stream while it leads
            rest = await asyncio.wait_for(response.content.read(), 10)
        feed.detach()
    assert rest == b""  # not the entry (nor a tick): the stream ended at the deadline
    assert tenure.stops("the page's event streams")

"""PostgreSQL LISTEN/NOTIFY on a real server: a committed timeline entry and a released lease are
announced (a rolled-back one is not), the listening connection comes back after the server
dropped it, a clean stop hands over at once (two instances in one process, a lease long enough
that the claim loop's own pace would miss the deadline), and a follower's page streams an entry
another process committed, and one whose leader, another daemon, sees an endpoint go down. On
SQLite the listener is a no-op."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import text
from structlog.testing import capture_logs

from fleet_lab.vllm_sim.server import VllmSim
from supervisor.app.leader.elector import Elector, Me
from supervisor.core.backoff import Backoff
from supervisor.core.tls import default_tls
from supervisor.judge.machine import State, Trigger
from supervisor.record.store.lease import claim, lease_journal, release
from supervisor.record.store.listen import CHANNELS, LEASE, TIMELINE, Listener, notify
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.store.target import PgTarget
from supervisor.record.timeline.control import Note
from supervisor.record.timeline.state import Transition
from supervisor.tell.web.page import feed
from tests.helpers import eventually, write_fleet
from tests.pgserver import PgServer
from tests.ports import free_port
from tests.test_leadership import Running

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def target(pg_server: PgServer) -> PgTarget:
    return pg_server.database()


@pytest.fixture
async def heard(target: PgTarget) -> AsyncIterator[tuple[Listener, list[tuple[str, str]]]]:
    """A started listener on `target` and what it heard (channel, payload), once connected."""
    listener = Listener(target, backoff=Backoff(base_s=0.05, cap_s=0.2))
    got: list[tuple[str, str]] = []
    for channel in CHANNELS:
        listener.subscribe(channel, partial(_heard, got, channel))
    listener.start()
    await asyncio.wait_for(listener.connected.wait(), 10)
    got.clear()  # the wake-up every subscriber gets on connecting
    yield listener, got
    await listener.close()


def _heard(got: list[tuple[str, str]], channel: str, payload: str) -> None:
    got.append((channel, payload))


async def _incident(store: Store) -> tuple[int, int]:
    """Open an incident with one entry; (incident id, entry id)."""
    entry = TimelineEntry(
        at=T0,
        subject="m",
        record=Transition(source=State.HEALTHY, dest=State.DOWN, trigger=Trigger.PASS, note="x"),
    )
    snapshot = Snapshot(kind=SubjectKind.ENDPOINT, name="m", state="down", since=T0, updated_at=T0)
    incident = await store.transition(snapshot=snapshot, entry=entry, open_cause="refused")
    assert incident is not None
    return incident, (await store.timeline(incident))[-1].id


async def test_committed_entries_and_lease_changes_are_announced_rolled_back_ones_not(
    target: PgTarget, heard: tuple[Listener, list[tuple[str, str]]]
) -> None:
    _, got = heard
    async with await Store.open(target) as store:
        incident, first = await _incident(store)
        with pytest.raises(RuntimeError, match=r"^abort$"):
            await _announce_then_abort(store)
        note = TimelineEntry(at=T0, subject="m", record=Note(text="n"))
        second = await store.append(incident, note)
        async with store.tx(write=True) as conn:
            won = await claim(conn, holder="a", host="h", epoch=None, lease_ms=60_000)
        async with store.tx(write=True) as conn:  # a renewal: nothing to announce
            await claim(conn, holder="a", host="h", epoch=won.epoch, lease_ms=60_000)
        async with store.tx(write=True) as conn:
            assert await release(conn, holder="a", epoch=won.epoch)
        expected = [
            (TIMELINE, str(first)),
            (TIMELINE, str(second)),
            (LEASE, "1"),  # taken (epoch 1)
            (LEASE, "1"),  # released
        ]
        await eventually(lambda: len(got) >= len(expected), within=5, what="four notifications")
        async with store.tx(write=True) as conn:  # a marker: anything else would come before it
            await notify(conn, TIMELINE, "end")
        await eventually(lambda: got[-1:] == [(TIMELINE, "end")], within=5, what="the marker")
    assert got == [*expected, (TIMELINE, "end")]


async def _announce_then_abort(store: Store) -> None:
    async with store.tx(write=True) as conn:
        await notify(conn, TIMELINE, "rolled back")
        raise RuntimeError("abort")


async def test_the_listener_comes_back_after_the_server_drops_its_connection(
    target: PgTarget, heard: tuple[Listener, list[tuple[str, str]]]
) -> None:
    listener, got = heard
    assert listener.connects == 1
    async with await Store.open(target) as store:
        async with store.tx(write=True) as conn:
            ended = await conn.execute(
                text("SELECT pg_terminate_backend(:pid)"), {"pid": listener.backend_pid}
            )
            assert ended.scalar_one() is True
        await eventually(lambda: listener.connects == 2, within=10, what="a second connection")
        # every subscriber is told once it is back (it may have missed something meanwhile)
        assert sorted(got) == [(LEASE, ""), (TIMELINE, "")]
        _, entry = await _incident(store)
        await eventually(lambda: (TIMELINE, str(entry)) in got, within=5, what="the new entry")


async def test_the_listener_waits_out_a_database_restart(
    pg_server: PgServer, target: PgTarget, heard: tuple[Listener, list[tuple[str, str]]]
) -> None:
    listener, got = heard
    with capture_logs() as logged:
        await asyncio.to_thread(pg_server.stop)
        try:
            await eventually(lambda: not listener.connected.is_set(), within=10, what="noticed")
            await eventually(  # it tries again (the backoff is short here) while the server is down
                lambda: sum(e["event"] == "listen: cannot connect" for e in logged) >= 2,
                within=10,
                what="two tries more",
            )
        finally:
            await asyncio.to_thread(pg_server.start)
        await eventually(lambda: listener.connects == 2, within=10, what="a second connection")
    # one warning when cut off, one when back; the tries between are debug lines
    warned = [e["event"] for e in logged if e["log_level"] == "warning"]
    cut = {"listen: cannot connect; trying again", "listen: connection lost; trying again"}
    assert len(warned) == 2
    assert warned[0] in cut  # the server's goodbye, then a refusal (or a ping unanswered)
    assert warned[1] == "listen: listening again"
    async with await Store.open(target) as store:
        _, entry = await _incident(store)
    await eventually(lambda: (TIMELINE, str(entry)) in got, within=5, what="the new entry")


async def test_on_sqlite_the_listener_is_a_no_op(tmp_path: Path) -> None:
    listener = Listener(tmp_path / "s.db")
    listener.subscribe(LEASE, lambda _p: None)
    listener.start()
    await listener.close()
    assert (listener.target, listener.connects, listener.connected.is_set()) == (None, 0, False)
    words = "no channel 'x': one of fleet_supervisor_lease, fleet_supervisor_timeline"
    with pytest.raises(ValueError, match=f"^{re.escape(words)}$"):
        listener.subscribe("x", lambda _p: None)


async def test_a_woken_follower_claims_at_once(
    tmp_path: Path,
) -> None:
    """On a SQLite file (nothing announces there): a 60 s lease, a follower that claims every
    20 s on its own, and leads within a second of `wake` once the lease was released."""
    async with await Store.open(tmp_path / "s.db") as store:
        async with store.tx(write=True) as conn:
            held = await claim(conn, holder="a", host="h", epoch=None, lease_ms=60_000)
        elector = Elector(store, Me(holder="b", host="h"), timedelta(seconds=60))
        claims = asyncio.create_task(elector.run())
        try:
            await eventually(lambda: elector.seen is not None, within=5, what="b's first claim")
            async with store.tx(write=True) as conn:
                assert await release(conn, holder="a", epoch=held.epoch)
            assert not elector.is_leading  # not until it claims again
            elector.wake()
            await eventually(lambda: elector.is_leading, within=1, what="b leading at once")
        finally:
            claims.cancel()
    previous = elector.won.previous if elector.won is not None else None
    assert previous is not None
    assert (elector.epoch, previous.holder, previous.released) == (2, "a", True)


def _config(
    tmp_path: Path, target: PgTarget, instance: str, *, lease: str, url: str | None = None
) -> Path:
    folder = tmp_path / instance
    folder.mkdir(exist_ok=True)
    path = write_fleet(
        folder,
        {"m": {"kind": "health", "url": url or f"http://127.0.0.1:{free_port()}/h"}},
        http={"listen": f"127.0.0.1:{free_port()}"},
    )
    document = yaml.safe_load(path.read_text())
    document["store"] = {"url": target.url, "instance": instance, "lease": lease}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def test_a_clean_stop_hands_over_at_once_on_postgresql(
    tmp_path: Path, target: PgTarget
) -> None:
    """A 60 s lease: the follower claims every 20 s on its own, and leads within 2 s here."""
    a = Running(_config(tmp_path, target, "a", lease="60s"))
    b: Running | None = None
    try:
        await eventually(lambda: a.gate.supervisor is not None, within=20, what="a leading")
        b = Running(_config(tmp_path, target, "b", lease="60s"))
        follower = b
        await eventually(
            lambda: follower.gate.elector is not None and follower.gate.elector.seen is not None,
            within=20,
            what="b following",
        )
        await eventually(lambda: follower.gate.listener.connected.is_set(), within=10, what="b")
        await a.end()
        await eventually(lambda: follower.gate.supervisor is not None, within=2, what="b leading")
    finally:
        for run in (a, b):
            if run is not None and not run.task.done():
                await run.end()
    async with await Store.open(target) as store, store.tx(write=False) as conn:
        entries = await lease_journal(conn)
    events = [(e.epoch, e.holder, e.event) for e in entries]
    # a stopped its supervisor before it released the lease: none of its writes was refused
    assert events == [
        (1, "a", "took_over"),
        (1, "a", "released"),
        (2, "b", "took_over"),
        (2, "b", "released"),
    ]
    assert entries[2].at_ms - entries[1].at_ms < 1000  # released -> taken, the database's clock


async def test_a_followers_page_streams_an_entry_another_process_commits(
    tmp_path: Path, target: PgTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b follows (a holds the lease) and serves its page; another Store commits an entry."""
    monkeypatch.setattr(feed, "TICK_S", 60.0)  # no tick re-reads the store within the deadline
    async with await Store.open(target) as writer:
        async with writer.tx(write=True) as conn:
            await claim(conn, holder="a", host="elsewhere", epoch=None, lease_ms=600_000)
        b = Running(_config(tmp_path, target, "b", lease="60s"))
        try:
            await eventually(lambda: _following(b), within=20, what="b following and listening")
            async with (
                httpx.AsyncClient(verify=default_tls()) as client,
                client.stream("GET", f"{b.url}/events") as events,
            ):
                lines = events.aiter_lines()
                assert await anext(lines) == "retry: 2000"
                incident, entry = await _incident(writer)
                async with asyncio.timeout(3):
                    frame = [line async for line in _until_data(lines)]
        finally:
            await b.end()
    assert frame == [
        "event: timeline",
        f"id: {entry}",
        f'data: {{"id": {entry}, "at": "{T0.isoformat()}", "subject": "m", "incident": '
        f'{incident}, "type": "transition", "kind": "transition", "summary": '
        '"healthy -> down: x"}',
    ]


async def _following(run: Running) -> bool:
    """Its follower's page is served, and its listener listens."""
    if not run.gate.listener.connected.is_set():
        return False
    try:
        async with httpx.AsyncClient(verify=default_tls()) as client:
            health = await client.get(f"{run.url}/healthz")
    except httpx.TransportError:
        return False
    return health.text == "ok: following a on elsewhere (epoch 1)\n"


async def _until_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The lines of the first event, up to its `data:` line."""
    async for line in lines:
        if not line:
            continue
        yield line
        if line.startswith("data: "):
            return


async def test_a_followers_page_shows_the_leaders_change_live(
    tmp_path: Path, target: PgTarget, sim: VllmSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two daemons on one PostgreSQL database: a leads and probes m (a real vLLM-shaped server), b
    follows and serves its page. m's server stops: a's transition reaches b's open `/events`
    stream through NOTIFY alone (b's page does not tick within the deadline, and b's own store
    commits nothing)."""
    monkeypatch.setattr(feed, "TICK_S", 60.0)
    url = f"{sim.url}/health"
    a = Running(_config(tmp_path, target, "a", lease="60s", url=url))
    b: Running | None = None
    try:
        await eventually(partial(_healthy_on, a), within=20, what="a leading, m healthy")
        b = Running(_config(tmp_path, target, "b", lease="60s", url=url))
        await eventually(partial(_follows, b, "a"), within=20, what="b following and listening")
        async with (
            httpx.AsyncClient(verify=default_tls(), timeout=30) as client,
            client.stream("GET", f"{b.url}/events") as events,
        ):
            lines = events.aiter_lines()
            assert await anext(lines) == "retry: 2000"
            await sim.stop()
            stopped = time.monotonic()
            async with asyncio.timeout(10):
                frame = [line async for line in _until_data(lines)]
            seen_after = time.monotonic() - stopped
    finally:
        for run in (a, b):
            if run is not None and not run.task.done():
                await run.end()
    assert frame[0] == "event: timeline"
    document = json.loads(frame[-1].removeprefix("data: "))
    assert (document["subject"], document["type"]) == ("m", "transition")
    async with await Store.open(target) as store:
        [row] = [r for r in await store.timeline(document["incident"]) if r.id == document["id"]]
    record = row.record  # the leader's: b probes nothing while it follows
    assert isinstance(record, Transition)
    assert (record.source, record.dest) == ("healthy", "down")
    assert seen_after < feed.TICK_S


def _healthy_on(run: Running) -> bool:
    leader = run.gate.supervisor
    worker = leader.workers.get("m") if leader is not None and leader.daemon else None
    return worker is not None and worker.state == "healthy"


async def _follows(run: Running, leader: str) -> bool:
    """`run` serves its follower's page naming `leader`, and its listener listens."""
    if not run.gate.listener.connected.is_set():
        return False
    try:
        async with httpx.AsyncClient(verify=default_tls()) as client:
            health = await client.get(f"{run.url}/healthz")
    except httpx.TransportError:
        return False
    return health.text.startswith(f"ok: following {leader} on ")

"""The fence on messages, exercised: a leader frozen (SIGSTOP) while a message of its is still
unsent (its Bot API refused it) wakes after the follower took over. It sends nothing (its sender
finds the lease's deadline passed by its own clock before any round trip: issue 24) and runs no
step, and it says so in one warning line, no traceback. The message it owed reaches the chat
once: the new leader delivers the outbox's unsent rows, whoever composed them, under its own
epoch.

Two real daemons on a real PostgreSQL store: the fleet of `tests.test_leadership_chaos`. The
store's own fence on messages (a sender whose clock says its lease holds, meeting a store whose
epoch moved on) is pinned alone, on a real SQLite store and the Bot API stub: the frozen leader
above stops by its own clock first and never reaches it."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Sized
from pathlib import Path

import pytest
import structlog
import yaml
from telegram import Bot

from fleet_lab.botapi import BotApiStub
from supervisor.core.clock import SystemClock, utcnow
from supervisor.core.tenure import Tenure
from supervisor.record.store.lease import (
    Lease,
    LeaseJournalEntry,
    StaleEpochError,
    claim,
    lease_journal,
)
from supervisor.record.store.outbox import OutboxDraft, OutboxStore
from supervisor.record.store.records import OutboxRow
from supervisor.record.store.store import Store
from supervisor.record.timeline.repair import StepRan
from supervisor.tell.telegram.sender import Sender
from supervisor.tell.telegram.timing import Pacing
from tests import test_leadership_chaos as chaos
from tests.helpers import eventually
from tests.test_leadership_chaos import CHAT, LEASE_S, RULE, Fleet, _start

TOKEN = "123456:fence-token"

pytestmark = pytest.mark.slow

fleet = chaos.fleet  # the fixture: two instances' configs on one PostgreSQL store, their bots

HOLD_S = 10  #: the repair's first step: long enough to freeze `a` inside it, its alert unsent
FREEZE_S = 60  #: issue #14's freeze
PACING_MAX_S = 60  #: the sender's longest pause between two tries (`Pacing.retry.cap_s`)


def _hold(fleet: Fleet, seconds: int) -> None:
    rule = RULE.format(
        marker=fleet.marker, hold=seconds, start=_start(fleet.marker, fleet.port, fleet.pidfile)
    )
    (fleet.root / "playbooks" / "revive.yaml").write_text(rule)


async def _outbox(fleet: Fleet) -> list[OutboxRow]:
    async with await Store.open(fleet.target, create=False) as store:
        return await OutboxStore(store).messages()


async def _journal(fleet: Fleet) -> list[LeaseJournalEntry]:
    async with (
        await Store.open(fleet.target, create=False) as store,
        store.tx(write=False) as conn,
    ):
        return await lease_journal(conn)


async def _owed(fleet: Fleet) -> list[OutboxRow]:
    """What `a` composed and could not deliver: unsent rows of epoch 1 it already tried."""
    rows = await _outbox(fleet)
    return [r for r in rows if r.epoch == 1 and r.sent_at is None and r.attempts >= 1]


async def test_a_frozen_leader_with_a_message_pending_sends_nothing_and_it_arrives_once(
    fleet: Fleet,
) -> None:
    _hold(fleet, HOLD_S)
    bot_a, bot_b = fleet.bots["a"], fleet.bots["b"]
    for bot in (bot_a, bot_b):  # Telegram takes no message for now: the outbox rows stay unsent
        bot.failing.add("sendMessage")
    await fleet.start("a")
    await eventually(lambda: fleet.steps("step1") == 1, within=60, what="a in its first step")
    await eventually(lambda: _has(_owed(fleet)), within=HOLD_S - 2, what="a's alert unsent")
    await fleet.start("b")
    a = fleet.procs["a"]
    a.send_signal(signal.SIGSTOP)  # frozen in the repair's first step, its alert unsent
    frozen = time.monotonic()
    owed = await _owed(fleet)  # its first unsent alert ('opened', or 'diagnosis' when the
    assert owed  # composer gathered the opening and the diagnosis into one message)
    await eventually(lambda: fleet.has_taken_over("b"), within=LEASE_S + 10, what="b taking over")
    await eventually(lambda: fleet.healed(2), within=60, what="b repairing afresh")
    bot_a.failing.clear()  # a's Bot API works again: a message a sent now would arrive
    await asyncio.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen)))  # the freeze is the test
    seen = len(bot_a.calls)
    a.send_signal(signal.SIGCONT)  # its sender wakes with the alert still unsent in the outbox
    await eventually(lambda: fleet.events("a", "following") != [], within=30, what="a follows")
    bot_b.failing.clear()  # Telegram back: the leader, b, delivers what is unsent

    def delivered() -> bool:
        return all(r.text in bot_b.texts(CHAT) for r in owed)

    await eventually(delivered, within=2 * PACING_MAX_S, what="b delivering what a owed")
    assert "sendMessage" not in bot_a.calls[seen:]  # a sent nothing after it woke
    assert bot_a.sent == []  # nor before: its Bot API took none
    assert (fleet.steps("step1"), fleet.steps("step2")) == (2, 1)  # a never ran step 2
    assert await _message_refusals(fleet) == []  # stopped by its own clock: nothing to refuse
    # exactly once: each message a owed reached the chat once, from b; and it is marked sent
    said = bot_b.texts(CHAT)
    assert [said.count(r.text) for r in owed] == [1] * len(owed)

    async def marked() -> bool:  # b marks a row sent once the Bot API has answered for it
        after = {r.id: r for r in await _outbox(fleet)}
        return all(after[r.id].sent_at is not None for r in owed)

    await eventually(marked, within=30, what="what a owed marked sent")
    # a deposed leader goes quiet: one warning line per component, no traceback
    traced = [line for line in fleet.log("a").read_text().splitlines() if "Traceback" in line]
    assert traced == []  # (a failure shows the lines)
    deposed = [e for e in fleet.logged("a") if e.get("event") == "deposed"]
    assert {e["level"] for e in deposed} == {"warning"}
    stops = [e["stops"] for e in deposed]
    assert stops.count("the sender") == 1
    assert len(stops) == len(set(stops))  # one line per component
    sender = next(e for e in deposed if e["stops"] == "the sender")
    assert sender["why"] == "lease not renewed in time"


async def _message_refusals(fleet: Fleet) -> list[LeaseJournalEntry]:
    entries = await _journal(fleet)
    return [e for e in entries if e.event == "refused" and e.detail.startswith("message ")]


async def _has(rows: Awaitable[Sized]) -> bool:
    return len(await rows) > 0


async def test_a_woken_leader_delivers_nothing_stale_after_the_all_clear(fleet: Fleet) -> None:
    """Issue 24: the frozen leader held an unsent 'down' for an incident the new leader already
    closed ('healthy again' said). Woken with its Bot API working again, it delivers nothing:
    the user never reads 'down' after 'healthy'. The new leader delivered the alert it owed,
    before its all-clear."""
    _hold(fleet, 600)  # a's repair sits in its first step: the incident stays open under a
    for instance in ("a", "b"):  # the all-clear held 2 s, not the default 10 min
        path = fleet.config(instance)
        document = yaml.safe_load(path.read_text())
        document["defaults"]["reopen_within"] = "2s"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
    bot_a, bot_b = fleet.bots["a"], fleet.bots["b"]
    bot_a.failing.add("sendMessage")  # a's alerts stay unsent in the outbox
    await fleet.start("a")
    await eventually(lambda: fleet.steps("step1") == 1, within=60, what="a in its first step")
    await eventually(lambda: _has(_owed(fleet)), within=30, what="a's alert unsent")
    await fleet.start("b")
    await eventually(lambda: fleet.events("b", "following") != [], within=20, what="b following")
    a = fleet.procs["a"]
    a.send_signal(signal.SIGSTOP)
    owed = await _owed(fleet)
    # the model comes back (a person, say) while a is frozen, so that b's first probe as the
    # leader finds it serving and closes the incident (started after the takeover, it lost the
    # race to b's own repair on a loaded CI box: b sat in the 600 s first step, no all-clear)
    started = await asyncio.create_subprocess_exec(
        "sh", "-c", _start(fleet.marker, fleet.port, fleet.pidfile)
    )
    assert await started.wait() == 0
    await eventually(lambda: fleet.has_taken_over("b"), within=LEASE_S + 10, what="b taking over")

    def all_clear() -> bool:
        return any("is healthy again" in t for t in bot_b.texts(CHAT))

    await eventually(all_clear, within=60, what="b saying the all-clear")
    said_b = bot_b.texts(CHAT)
    clear = next(i for i, t in enumerate(said_b) if "is healthy again" in t)
    assert all(r.text in said_b[:clear] for r in owed)  # what a owed, before the all-clear
    bot_a.failing.clear()  # a's Bot API works again: a stale message would arrive now
    seen = len(bot_a.calls)
    a.send_signal(signal.SIGCONT)
    await eventually(lambda: fleet.events("a", "following") != [], within=30, what="a follows")
    await asyncio.sleep(2)
    assert bot_a.calls[seen:] == []  # nothing stale, nothing at all
    assert bot_a.sent == []
    assert [said_b.count(r.text) for r in owed] == [1] * len(owed)
    # the attempt a left says why it was cut, and the step it was in has its entry
    async with await Store.open(fleet.target, create=False) as store:
        [incident] = await store.incidents(subject="m")
        rows = await store.timeline(incident.id)
    [cut] = [r.summary for r in rows if r.type == "attempt_finished"]
    assert cut == (
        "attempt 1 (revive) was interrupted: deposed: b leads with epoch 2; its steps are not "
        "resumed"
    )
    steps = [r.summary for r in rows if r.type in ("step_started", "step")]
    assert steps[0] == "step 1 shell on forge: started"  # its outcome unknown: no `step` entry
    ran = [r.record for r in rows if isinstance(r.record, StepRan)]
    assert not [s for s in ran if (s.index, s.ok) == (0, True)]  # nor one that says it passed


async def _lead(store: Store, holder: str, *, lease_ms: int) -> Lease:
    async with store.tx(write=True) as conn:
        return await claim(conn, holder=holder, host=f"hub-{holder}", epoch=None, lease_ms=lease_ms)


async def test_a_sender_whose_lease_holds_meets_the_fence_when_the_store_moved_on(
    tmp_path: Path,
) -> None:
    """The store's fence on messages, alone: `a` leads with epoch 1 and its own clock says its
    lease still holds (a clock that lags, a renewal in flight), but `b` took the lease over in
    the store (epoch 2). The message `a` composed as leader is refused at the fence before any
    Bot API call: the leadership journal records the refusal naming the new leader, the sender
    stops with one warning line, and the row stays unsent for `b` to deliver."""
    api = BotApiStub(token=TOKEN)
    await api.start()
    store = await Store.open(tmp_path / "supervisor.db")
    try:
        outbox = OutboxStore(store)
        mine = await _lead(store, "a", lease_ms=200)
        store.fence_epoch, store.fence_holder, store.fence_host = mine.epoch, "a", "hub-a"
        draft = OutboxDraft(kind="opened", text="🔴 <b>m</b> is down", incident_id=None)
        await outbox.commit(drafts=[draft], chat_ids=[CHAT], states={}, at=utcnow())
        [row] = await outbox.pending()
        b = await Store.open(tmp_path / "supervisor.db", create=False)
        try:  # b takes over once a's lease has run out in the store (its clock, not ours)
            taken = await _lead(b, "b", lease_ms=60_000)
            while taken.holder != "b":
                await asyncio.sleep(0.05)
                taken = await _lead(b, "b", lease_ms=60_000)
        finally:
            await b.close()
        assert (taken.epoch, taken.holder, taken.took_over) == (2, "b", True)
        deposed: list[StaleEpochError] = []
        store.on_deposed.append(deposed.append)
        bot = Bot(TOKEN, base_url=api.base_url)
        sender = Sender(bot, outbox, store, SystemClock(), Pacing(idle_poll=0.05), tenure=Tenure())
        with structlog.testing.capture_logs() as logs:
            async with asyncio.timeout(30):
                await sender.run()  # Tenure(): its own clock says it holds; the fence stops it
        async with store.tx(write=False) as conn:
            journal = await lease_journal(conn)
        unsent = await outbox.pending()
    finally:
        await store.close()
        await api.stop()
    assert "sendMessage" not in api.calls
    what = f"message opened #{row.id} to {CHAT}"
    assert [(e.epoch, e.holder, e.detail) for e in journal if e.event == "refused"] == [
        (1, "a", f"{what}: b leads with epoch 2")
    ]
    assert [(d.mine, d.current, d.holder) for d in deposed] == [(1, 2, "b")]
    assert [(e["log_level"], e["stops"], e["refused"]) for e in logs] == [
        ("warning", "the sender", f"refused under stale epoch 1: b leads with epoch 2 ({what})")
    ]
    assert [r.id for r in unsent] == [row.id]  # b's to deliver

"""The Telegram side end to end: the real python-telegram-bot client inside a real daemon,
talking over HTTP to the Bot API stub; real vLLM-shaped servers; a real SQLite file."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from fleet_lab.botapi import BotApiStub, Sent
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.core.backoff import Backoff
from supervisor.judge.machine import State
from supervisor.playbook.model import All, Mode, Rule, Severity
from supervisor.record.store.outbox import OutboxStore
from supervisor.record.store.records import TimelineEntry
from supervisor.record.timeline.control import Acked
from supervisor.tell.telegram.notifier import POLLER_STOP_S, Notifier
from supervisor.tell.telegram.timing import Pacing, Timing
from supervisor.worker import EndpointWorker
from tests.helpers import eventually, write_fleet

TOKEN = "123456:SECRET-token-never-logged"
CHAT, USER, STRANGER = -1001, 11, 99
FAST = Timing(
    pacing=Pacing(retry=Backoff(base_s=0.05, cap_s=0.2), per_chat=0.0, idle_poll=0.1),
    compose_every=0.05,
    settle=timedelta(seconds=1),
    poll_timeout=1.0,
    startup_retry=0.1,
)


@pytest.fixture
async def stub() -> AsyncIterator[BotApiStub]:
    api = BotApiStub(token=TOKEN)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
async def vllm() -> AsyncIterator[VllmSim]:
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="m", flavour="vllm")
    await sim.start("127.0.0.1", 0)
    yield sim
    await sim.stop()


def _fleet(tmp_path: Path, stub: BotApiStub, url: str, **notify: Any) -> Path:
    path = write_fleet(tmp_path, {"ds4": {"kind": "openai", "url": url, "model": "m"}})
    document = yaml.safe_load(path.read_text())
    (tmp_path / "token").write_text(TOKEN + "\n")
    document["notify"] = {
        "telegram": {
            "token_file": str(tmp_path / "token"),
            "chat_ids": [CHAT],
            "user_ids": [USER],
            "base_url": stub.base_url,
        },
        **notify,
    }
    document["defaults"]["reopen_within"] = "10m"
    path.write_text(yaml.safe_dump(document))
    return path


async def _daemon(path: Path) -> Supervisor:
    daemon = Supervisor(load_config(path))
    daemon.notify_timing = FAST
    await daemon.start()
    return daemon


def _notifier(daemon: Supervisor) -> Notifier:
    assert daemon.notifier is not None
    return daemon.notifier


def _state(worker: EndpointWorker) -> State:
    return worker.state  # read through a call: it changes while the test awaits


def _paused(daemon: Supervisor) -> bool:
    assert daemon.control is not None
    return daemon.control.fleet_paused


async def _restart(sim: VllmSim) -> None:
    await sim.start("127.0.0.1", int(sim.url.rsplit(":", 1)[1]))


def _alerts(stub: BotApiStub) -> list[Sent]:
    return [s for s in stub.sent if s.text[:1] in "🔴✅🔁🆘⏰🔎📝🔧❌"]


async def _command(stub: BotApiStub, text: str, *, user: int = USER, chat: int = CHAT) -> str:
    asked = stub.message(chat_id=chat, user_id=user, text=text)

    def answers() -> list[Sent]:
        return [s for s in stub.sent if s.reply_to == asked]

    await eventually(lambda: bool(answers()), within=5, what=f"an answer to {text}")
    return answers()[0].text


async def test_down_then_up_gives_opened_and_resolved_in_one_thread(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim
) -> None:
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url))
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        await eventually(_notifier(daemon).ready.is_set, what="bot up")
        assert stub.commands == [
            "status",
            "restart",
            "incidents",
            "timeline",
            "diagnose",
            "ack",
            "silence",
            "unsilence",
            "pause",
            "resume",
            "help",
        ]
        assert _alerts(stub) == []  # silence while healthy
        await vllm.stop()
        await eventually(lambda: worker.record.incident_id is not None, what="an incident")
        incident = worker.record.incident_id
        await _restart(vllm)
        await eventually(
            lambda: any(s.text.startswith("✅ <b>ds4") for s in stub.sent), what="resolved"
        )
        alerts = _alerts(stub)
        assert alerts[0].text == f"🔴 <b>ds4</b> is down: connection refused\nincident #{incident}"
        assert alerts[0].reply_to is None
        assert alerts[0].parse_mode == "HTML"
        assert all(a.reply_to == alerts[0].message_id for a in alerts[1:])
        assert alerts[-1].text.startswith("✅ <b>ds4</b> is healthy again after ")
        assert "fixed by: nothing we did: it recovered by itself" in alerts[-1].text
    finally:
        await daemon.stop()


async def test_a_stop_does_not_wait_out_the_poller_s_sleep_after_a_failed_poll(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim, caplog: pytest.LogCaptureFixture
) -> None:
    """python-telegram-bot's poller sleeps after a failed getUpdates (here flood control's
    30 s; up to 30 s after other failures, a deposed leader's refusals included) before it looks
    at its stop: the daemon's stop cuts that sleep short (`POLLER_STOP_S`)."""
    caplog.set_level(logging.DEBUG, logger="telegram.ext")
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url))
    try:
        await eventually(_notifier(daemon).ready.is_set, what="bot up")
        stub.retry_after, stub.flood_updates = 30, 1
        await eventually(lambda: "Failed run number" in caplog.text, what="the poller asleep")
    finally:
        began = asyncio.get_running_loop().time()
        with capture_logs() as logged:
            await daemon.stop()
    took = asyncio.get_running_loop().time() - began
    assert took < POLLER_STOP_S + 5 < stub.retry_after, took
    # the stop names its slow part, and how long it took
    [stopped] = [e for e in logged if e["event"] == "stopped"]
    assert list(stopped["slow_s"]) == ["notifier"]
    assert POLLER_STOP_S <= stopped["slow_s"]["notifier"] < POLLER_STOP_S + 5


async def test_a_state_change_is_composed_at_once_not_at_the_next_round(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim
) -> None:
    """The composer's round is an hour here: the down message can only come from the store
    waking it when the transition was committed."""
    daemon = Supervisor(load_config(_fleet(tmp_path, stub, vllm.url)))
    daemon.notify_timing = replace(FAST, compose_every=3600.0)
    await daemon.start()
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        await eventually(_notifier(daemon).ready.is_set, what="bot up")
        await vllm.stop()
        await eventually(lambda: worker.record.incident_id is not None, what="an incident")
        await eventually(lambda: bool(_alerts(stub)), within=5, what="the down message")
        assert _alerts(stub)[0].text.startswith("🔴 <b>ds4</b> is down: ")
    finally:
        await daemon.stop()


async def test_an_endpoint_down_when_the_daemon_first_starts_is_told(
    tmp_path: Path, stub: BotApiStub
) -> None:
    """On a new store the outbox's cursor starts at the timeline's end (history is not
    announced). It is found before the first probe, so the incident of an endpoint already down
    is not taken for history. (It was found after the probes had begun: on a loaded machine an
    endpoint down from the start was never told.) The endpoint is a server that reads the
    cursor in the store's file when a probe connects, then hangs up."""
    path = _fleet(tmp_path, stub, "http://127.0.0.1:1")
    store = tmp_path / "state" / "supervisor.db"
    seen: list[int | None] = []

    def cursor() -> int | None:
        with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
            try:
                row = db.execute("SELECT last_id FROM notify_cursor").fetchone()
            except sqlite3.OperationalError:  # no such table yet
                return None
        return None if row is None else int(row[0])

    async def hang_up(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(cursor())
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    document = yaml.safe_load(path.read_text())
    document["endpoints"]["ds4"]["url"] = f"http://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(document))
    daemon = await _daemon(path)
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.record.incident_id is not None, what="an incident")
        assert seen[0] == 0  # found (the new timeline's end) before the first probe
        await eventually(lambda: bool(_alerts(stub)), within=5, what="the down message")
        assert _alerts(stub)[0].text.startswith("🔴 <b>ds4</b> is down: ")
    finally:
        await daemon.stop()
        server.close()
        await server.wait_closed()


async def test_every_command(tmp_path: Path, stub: BotApiStub, vllm: VllmSim) -> None:
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url))
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        await eventually(_notifier(daemon).ready.is_set, what="bot up")
        await eventually(lambda: worker.record.last_tok_s is not None, what="a completion")
        status = await _command(stub, "/status")
        assert status.startswith("<b>ds4</b>: healthy for ")
        assert "tok/s)" in status
        assert status.endswith("automatic action: on")
        assert (await _command(stub, "/help")).startswith("/status every endpoint")
        assert await _command(stub, "/incidents") == "no incidents"
        assert (
            await _command(stub, "/incidents x") == "N must be a whole number from 1 to 50, got 'x'"
        )
        assert await _command(stub, "/timeline 99") == "no incident 99"
        assert await _command(stub, "/timeline") == "usage: /timeline ID"
        assert await _command(stub, "/pause") == "automatic action is paused: /resume to resume"
        assert _paused(daemon)
        assert (await _command(stub, "/status")).endswith("automatic action: paused (/resume)")
        assert await _command(stub, "/resume") == "automatic action is on again"
        assert not _paused(daemon)
        assert await _command(stub, "/silence ds4 soon") == (
            "expected a duration like 90s, 15m or 2h, got 'soon'"
        )
        assert await _command(stub, "/silence ds4 2h disk swap") == (
            "silenced ds4 for 2h: nothing is acted on until then"
        )
        assert _state(worker) is State.MAINTENANCE
        assert await _command(stub, "/silence d* 1h") == (
            "ds4 is already silenced: /unsilence it first"
        )
        assert await _command(stub, "/pause ds4") == (
            "automatic action on ds4 is paused: /resume ds4 to resume"
        )
        assert await _command(stub, "/resume ds4") == "automatic action on ds4 is on again"
        assert await _command(stub, "/unsilence ds4") == "unsilenced ds4: it is judged afresh"
        assert _state(worker) is not State.MAINTENANCE
        assert await _command(stub, "/unsilence ds4") == "ds4 is not silenced"
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy again")
        assert await _command(stub, "/diagnose ds4") == (
            "probed now: healthy\n"
            "it is healthy: nothing to diagnose (use --state down to see what would happen)"
        )
        await vllm.stop()
        await eventually(lambda: worker.record.incident_id is not None, what="an incident")
        incident = worker.record.incident_id
        listing = await _command(stub, "/incidents 1")
        assert listing.startswith(f"#{incident} ds4 ")
        timeline = await _command(stub, f"/timeline {incident}")
        assert timeline.startswith(f"incident #{incident}: ds4: connection refused\n")
        assert "transition: healthy -&gt; down: connection refused" in timeline
        assert await _command(stub, f"/ack {incident}") == (
            f"acknowledged incident #{incident}: no more reminders"
        )
        assert daemon.store is not None
        notes = [r.summary for r in await daemon.store.timeline(incident or 0)]
        assert "acknowledged by @op on Telegram: no more reminders" in notes
        assert daemon.control is not None
        journal = await daemon.control.journal()
    finally:
        await daemon.stop()
    assert [(j.action, j.target, j.who, j.via, j.why, j.code) for j in journal] == [
        ("pause", "*", "@op", "telegram", "", "done"),
        ("resume", "*", "@op", "telegram", "", "done"),
        ("silence", "ds4", "@op", "telegram", "disk swap", "done"),
        ("silence", "d*", "@op", "telegram", "", "refused"),
        ("pause", "ds4", "@op", "telegram", "", "done"),
        ("resume", "ds4", "@op", "telegram", "", "done"),
        ("unsilence", "ds4", "@op", "telegram", "", "done"),
        ("unsilence", "ds4", "@op", "telegram", "", "refused"),
        ("ack", f"#{incident}", "@op", "telegram", "", "done"),
    ]


async def test_answers_wait_out_flood_control_and_keep_their_order(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim
) -> None:
    """Telegram answers a burst with 429 `retry_after`: the answers to /status, /incidents and
    /timeline are retried after the pause it asks for, not lost, and arrive in the order the
    commands were sent, each replying to its command; a long answer's parts stay in order."""
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url))
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        await eventually(_notifier(daemon).ready.is_set, what="bot up")
        await vllm.stop()
        await eventually(lambda: worker.record.incident_id is not None, what="an incident")
        incident = worker.record.incident_id
        assert daemon.store is not None
        for n in range(60):  # a timeline longer than one message (4096 characters)
            record = Acked(who="op", why=f"note {n} " * 20)
            entry = TimelineEntry(at=daemon.clock.now(), subject="ds4", record=record)
            await daemon.store.append(incident or 0, entry)
        stub.flood_replies, stub.retry_after = 3, 1
        asked = [
            stub.message(chat_id=CHAT, user_id=USER, text=text)
            for text in ("/status", "/incidents", f"/timeline {incident}", "/help")
        ]

        def answers() -> list[Sent]:
            return [s for s in stub.sent if s.reply_to in asked]

        await eventually(
            lambda: {s.reply_to for s in answers()} == set(asked), within=15, what="4 answers"
        )
        await eventually(lambda: len(answers()) >= 5, within=5, what="the timeline's parts")
    finally:
        await daemon.stop()
    got = answers()
    assert len(stub.flooded) == 3
    assert got[0].received_at - stub.flooded[0] >= 1.0  # it waited as it was asked
    order = [asked.index(s.reply_to or 0) for s in got]
    assert order == sorted(order)  # the commands' order, parts together
    assert got[0].text.startswith("<b>ds4</b>: down for ")
    assert got[1].text.startswith(f"#{incident} ds4 ")
    timeline = [s.text for s in got if s.reply_to == asked[2]]
    assert len(timeline) >= 2
    assert timeline[0].startswith(f"incident #{incident}: ds4: connection refused\n")
    assert "note 59" in timeline[-1]
    assert got[-1].text.startswith("/status every endpoint")


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("/restart nope", "no endpoint 'nope' (endpoints: ds4)"),
        ("/diagnose nope", "no endpoint 'nope' (endpoints: ds4)"),
        ("/silence nope 2h", "no endpoint 'nope' (endpoints: ds4)"),
        ("/silence host:mars 2h", "no host 'mars' (hosts: forge)"),
        ("/pause nope", "no endpoint 'nope' (endpoints: ds4)"),
        ("/pause a b", "usage: /pause [NAME]"),
        ("/restart", "usage: /restart NAME"),
        ("/silence ds4", "usage: /silence NAME 2h"),
        ("/ack abc", "an incident id is a number, got 'abc'"),
    ],
)
async def test_bad_arguments_are_named(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim, text: str, answer: str
) -> None:
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url))
    try:
        await eventually(_notifier(daemon).ready.is_set, what="bot up")
        assert await _command(stub, text) == answer
    finally:
        await daemon.stop()


@pytest.mark.parametrize(("user", "chat"), [(STRANGER, CHAT), (USER, -5)])
async def test_strangers_are_refused_and_recorded(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim, user: int, chat: int
) -> None:
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url))
    try:
        await eventually(_notifier(daemon).ready.is_set, what="bot up")
        answer = await _command(stub, "/pause", user=user, chat=chat)
        assert answer == "Sorry, you are not allowed to use this bot."
        assert not _paused(daemon)
        refusals = await _notifier(daemon).outbox.refusals()
        assert [(r.user_id, r.chat_id, r.text) for r in refusals] == [(user, chat, "/pause")]
        assert daemon.control is not None
        journal = await daemon.control.journal()
        assert [(j.action, j.code, j.answer) for j in journal] == [
            ("pause", "refused", "Sorry, you are not allowed to use this bot.")
        ]
    finally:
        await daemon.stop()


async def test_restart_asks_first_then_takes_the_guarded_path(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim
) -> None:
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url))
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        await eventually(_notifier(daemon).ready.is_set, what="bot up")
        question = await _command(stub, "/restart ds4")
        assert question.startswith("Restart <b>ds4</b> (now healthy)?")
        asked = stub.sent[-1]
        assert [label for label, _ in asked.buttons] == ["Confirm restart", "Cancel"]
        stub.press(asked, "Confirm restart", user_id=USER)
        await eventually(
            lambda: len(stub.sent) > len(asked.text) * 0 + stub.sent.index(asked) + 1,
            what="the restart's answer",
        )
        assert stub.sent[-1].text == "not restarting ds4: it has no units to restart"
        assert stub.edits[-1][2] == "restarting ds4 (asked by @op)…"
        # the same button again: the question is gone
        stub.press(asked, "Confirm restart", user_id=USER)
        await eventually(lambda: len(stub.answers) >= 2, what="an answer to the button")
        assert stub.answers[-1][1] == "this question has expired"
        # a stranger's press changes nothing
        second = await _command(stub, "/restart ds4")
        assert second.startswith("Restart")
        before = len(await _notifier(daemon).outbox.refusals())
        stub.press(stub.sent[-1], "Confirm restart", user_id=STRANGER)
        await eventually(lambda: len(stub.answers) >= 3, what="the refusal")
        assert stub.answers[-1][1] == "Sorry, you are not allowed to use this bot."
        assert len(await _notifier(daemon).outbox.refusals()) == before + 1
    finally:
        await daemon.stop()


RULE = Rule(
    id="risky-fix",
    title="clear the page cache",
    severity=Severity.WARNING,
    when=All(all=()),
    actions=(),
    mode=Mode.CONFIRM,
)


async def test_confirm_mode_asks_apply_or_skip_and_times_out_to_none(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim
) -> None:
    # long enough for a press to come back through getUpdates on a loaded box (500 ms was not,
    # once); the last question waits it out
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url, confirm_timeout="3s"))
    notifier = _notifier(daemon)
    try:
        await eventually(notifier.ready.is_set, what="bot up")
        asked = asyncio.create_task(notifier.approve("ds4", RULE, ["drop_caches on forge: sync"]))
        await eventually(lambda: bool(stub.sent and stub.sent[-1].buttons), what="the question")
        question = stub.sent[-1]
        assert question.text == (
            "❓ <b>ds4</b>: rule risky-fix matched: clear the page cache\n"
            "1. drop_caches on forge: sync\nApply it?"
        )
        stub.press(question, "Apply", user_id=USER)
        assert await asyncio.wait_for(asked, 5) is True
        await eventually(lambda: bool(stub.edits), what="the question edited")
        assert stub.edits[-1][2] == "ds4: applying (@op)"
        skipped = asyncio.create_task(notifier.approve("ds4", RULE, []))
        await eventually(lambda: stub.sent[-1] is not question, what="a second question")
        stub.press(stub.sent[-1], "Skip", user_id=USER)
        assert await asyncio.wait_for(skipped, 5) is False
        assert await asyncio.wait_for(notifier.approve("ds4", RULE, []), 10) is None
        assert stub.edits[-1][2] == "no answer within 3s: risky-fix skipped"
    finally:
        await daemon.stop()


async def test_bot_api_down_loses_nothing_across_a_restart(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path = _fleet(tmp_path, stub, vllm.url)
    daemon = await _daemon(path)
    worker = daemon.workers["ds4"]
    await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
    await eventually(_notifier(daemon).ready.is_set, what="bot up")
    await stub.down("502")
    await vllm.stop()
    await eventually(lambda: worker.record.incident_id is not None, what="an incident")
    outbox = _notifier(daemon).outbox
    await eventually(lambda: _has_pending(outbox), what="a message waiting")
    await eventually(lambda: _notifier(daemon).sender.failures >= 2, what="failed tries")
    await daemon.stop()
    await stub.down("refused")  # the daemon comes back while the Bot API is still away
    daemon = await _daemon(path)
    worker = daemon.workers["ds4"]
    try:
        await _restart(vllm)
        await eventually(lambda: worker.record.incident_id is None, what="closed")
        await eventually(lambda: _composed(_notifier(daemon).outbox, "resolved"), what="queued")
        assert [s for s in stub.sent if s.text.startswith("🔴")] == []
        await stub.up()
        await eventually(
            lambda: any(s.text.startswith("✅ <b>ds4") for s in stub.sent), what="resolved arrives"
        )
        alerts = _alerts(stub)
        assert next(a.text[:1] for a in alerts) == "🔴"
        assert alerts[-1].text[:1] == "✅"
        outbox = _notifier(daemon).outbox
        await eventually(lambda: _all_sent(outbox), what="every row marked sent")
        rows = await outbox.messages()
        assert [r.text for r in rows] == [a.text for a in alerts]  # in order, none twice
        assert all(a.reply_to == alerts[0].message_id for a in alerts[1:])
    finally:
        await daemon.stop()
    assert TOKEN not in caplog.text
    assert "SECRET" not in caplog.text


async def _has_pending(outbox: OutboxStore) -> bool:
    return bool(await outbox.pending())


async def _all_sent(outbox: OutboxStore) -> bool:
    return all(r.sent_at is not None for r in await outbox.messages())


async def _composed(outbox: OutboxStore, kind: str) -> bool:
    return any(r.kind == kind for r in await outbox.messages())


async def test_a_flapping_endpoint_gives_a_handful_of_messages(
    tmp_path: Path, stub: BotApiStub, vllm: VllmSim
) -> None:
    daemon = await _daemon(_fleet(tmp_path, stub, vllm.url))
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        for _ in range(6):
            await vllm.stop()
            await eventually(lambda: worker.record.incident_id is not None, what="down")
            await _restart(vllm)
            await eventually(lambda: worker.record.incident_id is None, what="up")
        await eventually(
            lambda: _alerts(stub)[-1:] != [] and "went down 6 times" in _alerts(stub)[-1].text,
            what="the settled message",
        )
        kinds = [a.text[:1] for a in _alerts(stub)]
        assert len(kinds) <= 6, kinds  # opened, diagnosis, plan, resolved, flapping, settled
        assert (kinds[0], kinds.count("🔴"), kinds.count("🔁"), kinds.count("✅")) == (
            "🔴",
            1,
            1,
            2,
        )
    finally:
        await daemon.stop()

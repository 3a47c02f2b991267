"""Nothing lost through a crash (issue 37): the daemon, a real process, is killed (SIGKILL)
while its store refuses writes (the PostgreSQL server stopped; the disk under a SQLite store
full) with an incident open. What it kept is in its spill file, on another filesystem; after the
store is back and the daemon restarted, each incident's timeline has every entry recorded
before the kill, in order, none twice, and the message it sent from memory is recorded as sent
(and not sent again).

The outage here lasts two leases (6 s), not 60 s: what is spilled does not depend on how long
the store refused it, only on what happened meanwhile (the open incident closed, then opened
again under a placeholder id, which the replay maps to its real one; a message sent from
memory), and past the lease the restart after the store is back is the same after any outage
(the dead leader's lease has run out; tests/test_leadership_chaos.py holds PostgreSQL down 60 s
with two live daemons).

The real daemon (leadership gate, supervisor, notifier with python-telegram-bot) from
`supervisor run`; a vLLM-shaped sim in this process; the Bot API's stand-in over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet_lab.botapi import BotApiStub
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.record.store.errors import StoreError
from supervisor.record.store.outbox import OutboxStore
from supervisor.record.store.queued import (
    OutboxMark,
    OutboxRows,
    SpillLineError,
    Write,
    decode_line,
)
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget
from supervisor.record.timeline.state import Transition
from tests.helpers import eventually, spawn_daemon, write_fleet
from tests.pgserver import PgServer
from tests.ports import free_port
from tests.warmstart import WarmProcess

pytestmark = pytest.mark.slow

CHAT, USER = 1001, 7
LEASE_S = 3.0
MARK = "\n<i>(the store cannot be written: kept in memory, recorded when it returns)</i>"


@dataclass
class Outage:
    """How the store stops taking writes, and comes back."""

    store: dict[str, Any]  #: the config's `store` section
    target: StoreTarget
    begin: Callable[[], None]
    end: Callable[[], None]
    refusal: str  #: what the daemon's refusal says


@pytest.fixture
def postgresql(pg_server: PgServer) -> Iterator[Outage]:
    target = pg_server.database()
    yield Outage(
        store={"url": target.url, "lease": f"{LEASE_S:g}s"},
        target=target,
        begin=pg_server.stop,
        end=pg_server.start,
        refusal="the database server is down or unreachable",
    )
    if not pg_server.running:
        pg_server.start()


def _write_forever(path: Path) -> None:
    with path.open("wb") as out:
        while True:
            out.write(b"\0" * 4096)
            out.flush()


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Outage]:
    """The SQLite store on an 8 MiB tmpfs that fills up (room for SQLite's write-ahead log,
    which grows to 4 MiB before it starts over); the spill folder is on another filesystem (the
    spec's folder)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts a tmpfs)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    filler = mount / "filler"

    def fill() -> None:
        with pytest.raises(OSError, match="No space left on device"):
            _write_forever(filler)

    try:
        yield Outage(
            store={"path": str(mount / "supervisor.db"), "lease": f"{LEASE_S:g}s"},
            target=mount / "supervisor.db",
            begin=fill,
            end=filler.unlink,
            refusal="database or disk is full",
        )
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(params=["postgresql", "full_disk"])
def outage(request: pytest.FixtureRequest) -> Outage:
    found: Outage = request.getfixturevalue(request.param)
    return found


class Run:
    """One daemon process and its JSON log."""

    def __init__(self, proc: WarmProcess, log: Path) -> None:
        self.proc, self.log = proc, log

    def logged(self, event: str | None = None) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text().splitlines():
            with suppress(ValueError):
                found.append(json.loads(line))
        return [e for e in found if isinstance(e, dict) and event in (None, e.get("event"))]

    def transitions(self) -> list[tuple[str, str]]:
        return [(e["source"], e["dest"]) for e in self.logged("transition")]


@pytest.fixture
async def world(tmp_path: Path, outage: Outage) -> AsyncIterator[tuple[Path, VllmSim, BotApiStub]]:
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="m")
    await sim.start("127.0.0.1", 0)
    bot = BotApiStub(token="spill-token")
    await bot.start()
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "bot.token").write_text(bot.token)
    path = write_fleet(
        tmp_path,
        {"m": {"kind": "openai", "url": sim.url, "model": "m"}},
        http={"listen": f"127.0.0.1:{free_port()}"},
    )
    document = yaml.safe_load(path.read_text())
    document["store"] = {**outage.store, "spill_dir": str(tmp_path / "spill")}
    document["notify"] = {
        "telegram": {
            "token_file": "bot.token",
            "chat_ids": [CHAT],
            "user_ids": [USER],
            "base_url": bot.base_url,
        }
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    yield path, sim, bot
    await bot.stop()
    await sim.stop()


async def _start(config: Path, log: Path) -> Run:
    return Run(await spawn_daemon(config, log), log)


async def _stop(run: Run) -> None:
    if run.proc.returncode is None:
        run.proc.kill()
        await run.proc.wait()


async def _terminate(run: Run) -> int:
    """SIGTERM, the way systemd stops it; SIGKILL when it has not ended within 30 s."""
    run.proc.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(run.proc.wait(), 30)
    except TimeoutError:
        await _stop(run)
        raise


def _spill_writes(path: Path) -> list[Write]:
    writes = []
    for line in path.read_bytes().split(b"\n")[1:]:  # after the header
        with suppress(SpillLineError):  # (a line being written)
            writes.append(decode_line(line)[1])
    return writes


def _delivery_spilled(path: Path, text: str) -> bool:
    """Whether the spill file holds the row kept in memory with `text` and its mark as sent."""
    writes = _spill_writes(path)
    rows = {r.id for w in writes if isinstance(w, OutboxRows) for r in w.rows if r.text == text}
    return any(
        isinstance(w, OutboxMark) and w.row_id in rows and w.sent_at is not None for w in writes
    )


def _downs(bot: BotApiStub) -> list[str]:
    return [t for t in bot.texts(CHAT) if t.startswith("🔴 <b>m</b> is down")]


async def test_a_daemon_killed_during_an_outage_loses_no_entry(
    tmp_path: Path,
    outage: Outage,
    world: tuple[Path, VllmSim, BotApiStub],
) -> None:
    config, sim, bot = world
    port = int(sim.url.rsplit(":", 1)[1])
    first = await _start(config, tmp_path / "first.log")
    try:
        await eventually(
            lambda: ("unknown", "healthy") in first.transitions(), within=60, what="healthy"
        )
        await eventually(
            lambda: first.logged("telegram: bot up") != [], within=30, what="the bot up"
        )
        await sim.stop()  # an incident opens while the store takes it
        await eventually(lambda: len(_downs(bot)) == 1, within=20, what="told m is down")

        outage.begin()
        began = time.monotonic()
        await eventually(
            lambda: first.logged("store refuses writes: queueing them in memory") != [],
            within=20,
            what="the daemon queueing its writes",
        )
        await sim.start("127.0.0.1", port)  # the open incident closes in memory
        await eventually(
            lambda: first.transitions()[-1][1] == "healthy", within=20, what="healthy again"
        )
        await sim.stop()  # a new incident opens under a placeholder id
        await eventually(lambda: len(_downs(bot)) == 2, within=20, what="told m is down again")
        told = _downs(bot)[-1]
        assert told.endswith(MARK)  # sent from memory
        # the outage outlasts the lease (the daemon leads on; the next start finds it run out)
        await asyncio.sleep(max(0.0, 2 * LEASE_S - (time.monotonic() - began)))
        assert first.logged("leadership lost") == []
        spilled = list((tmp_path / "spill").glob("*.spill"))
        assert len(spilled) == 1
        # its delivery is in the spill before the kill: a kill between Telegram's answer and
        # the spill's next line would send it again after the restart, which no outbox can
        # help (the Bot API has no idempotency key); a loaded run killed in that window
        await eventually(
            lambda: _delivery_spilled(spilled[0], told), within=20, what="the delivery spilled"
        )
    finally:
        await _stop(first)  # SIGKILL in the middle of the outage
    killed = time.time()
    assert first.proc.returncode == -signal.SIGKILL
    logged = [t for t in first.transitions() if t[0] != "unknown"]
    assert logged[0] == ("healthy", "down")
    assert logged.count(("healthy", "down")) == 2
    assert [path.exists() for path in spilled] == [True]  # left by the dead process
    at_kill = _spill_writes(spilled[0])  # (the replay deletes the file)

    outage.end()
    second = await _start(config, tmp_path / "second.log")
    try:
        await eventually(
            lambda: second.logged("spill file replayed") != [], within=60, what="the replay"
        )
        [replayed] = second.logged("spill file replayed")
        assert replayed["already_written"] == 0
        assert replayed["written"] > 0
        assert [path.exists() for path in spilled] == [False]
        await eventually(lambda: _all_sent(outage.target), within=30, what="the outbox sent")
        async with await Store.open(outage.target, create=False) as reader:
            incidents = sorted(await reader.incidents(subject="m"), key=lambda i: i.id)
            timelines = {i.id: await reader.timeline(i.id) for i in incidents}
            messages = await OutboxStore(reader).messages()
    finally:
        code = await _terminate(second)
    assert code == 0
    entries = [row for i in incidents for row in timelines[i.id]]
    before = [row for row in entries if row.at.timestamp() < killed]
    stored = [
        (row.record.source, row.record.dest) for row in before if isinstance(row.record, Transition)
    ]
    assert stored == logged  # every transition the daemon logged before the kill, in order
    keys = [(row.incident_id, row.type, row.at, row.summary) for row in entries]
    assert len(keys) == len(set(keys))  # none twice
    # the incident open at the kill (m came back and failed again within the reopen window:
    # the incident that closed in the outage reopened) is open, its entries under its real id
    assert [(i.symptom, i.is_open) for i in incidents] == [("connection refused", True)]
    assert {row.incident_id for row in entries} == {incidents[0].id}
    # the message sent from memory is recorded as sent, and was sent once
    assert [m.sent_at is not None for m in messages if m.text == told] == [True]
    sends = [s.received_at < killed for s in bot.sent if s.chat_id == CHAT and s.text == told]
    outbox = [w for w in at_kill if isinstance(w, OutboxRows | OutboxMark)]
    stored_rows = [(m.id, m.kind, m.incident_id, m.sent_at, m.text[:40]) for m in messages]
    assert sends == [True], (
        f"sent before the kill, after: {sends}; the spill's outbox: {outbox}; "
        f"the store's: {stored_rows}"
    )
    errors = [e for e in second.logged() if e.get("level") in ("error", "critical")]
    assert errors == []


async def _all_sent(target: StoreTarget) -> bool:
    try:
        async with await Store.open(target, create=False) as reader:
            return all(m.sent_at is not None for m in await OutboxStore(reader).messages())
    except StoreError:
        return False

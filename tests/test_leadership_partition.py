"""Issue 37, the peers' question (Patroni's DCS failsafe): two real daemons on the real
PostgreSQL, the leader's connections to it silently dropped by a TCP gate (`tests.tcpgate`)
while the other instance reaches it. The other takes over; the cut-off one, asked its peers,
steps down silent: no Bot API call, `/status` and control answered at once naming the leader,
no step, no error line; it follows once the gate opens. And the regression: PostgreSQL stopped
for both, the leader (whose peer does not lead) keeps telling."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fleet_lab.botapi import BotApiStub
from supervisor.core.tls import default_tls
from supervisor.record.store.lease import LeaseJournalEntry
from supervisor.record.store.pgengine import CONNECT_TIMEOUT_S
from supervisor.record.store.records import AttemptRow
from supervisor.record.store.target import PgTarget
from tests.helpers import eventually, spawn_daemon, write_fleet
from tests.kept_store import KeptStore
from tests.pgserver import PgServer
from tests.ports import free_port
from tests.tcpgate import TcpGate
from tests.warmstart import WarmProcess

pytestmark = pytest.mark.slow

LEASE_S = 6.0  # the trial
CHAT = 1001
USER = 7
RULE = """\
id: revive
title: the server is not running
severity: critical
applies_to: {{states: [down]}}
when:
  all:
    - {{fact: probe.reason, op: eq, value: connection refused}}
actions:
  - action: shell
    on: host
    params: {{argv: [sh, -c, "echo step1 >> {marker}"]}}
  - action: shell
    on: host
    params: {{argv: [sh, -c, "{start}"]}}
verify: {{within: 20s}}
mode: auto
budget: {{attempts: 10, window: 1h}}
"""
DOWN = "🔴 <b>m</b> is down"
FLAPPING = "🔁 m is flapping: down 2 times in "  #: the first fault's incident, reopened
BACK = "cut off no more: the store answers again; following"
CUT = "cut off from the store: a peer reaches it; stepping down"
REACHES = "b reaches it and takes the lease over once it runs out"
LEADS = "b leads (epoch 2), as it told this instance"
EVERY_PEER_CUT_OFF = "store refuses; peers asked: every peer cut off; leading on"
PARTITION_S = 25.0  # the trial
FIGURES = os.environ.get("FLEET_PARTITION_FIGURES")  # a file the runs append their figures to


@dataclass
class Pair:
    root: Path
    target: PgTarget
    gate: TcpGate
    port: int
    marker: Path
    pidfile: Path
    procs: dict[str, WarmProcess]
    bots: dict[str, BotApiStub]
    urls: dict[str, str]
    kept: KeptStore = field(init=False)  #: the store as the spec reads it, opened once

    def __post_init__(self) -> None:
        self.kept = KeptStore(self.target)

    def log(self, instance: str) -> Path:
        return self.root / instance / "daemon.log"

    def steps(self, name: str) -> int:
        text = self.marker.read_text() if self.marker.exists() else ""
        return text.splitlines().count(name)

    async def start(self, instance: str) -> None:
        config = self.root / instance / "fleet.yaml"
        self.procs[instance] = await spawn_daemon(config, self.log(instance))

    def kill_server(self) -> None:
        os.kill(int(self.pidfile.read_text()), signal.SIGKILL)

    async def read(self) -> tuple[list[LeaseJournalEntry], list[AttemptRow]]:
        return await self.kept.lease_and_attempts("m")

    async def took_over(self, holder: str) -> LeaseJournalEntry | None:
        entries, _ = await self.read()
        found = [e for e in entries if e.event == "took_over" and e.holder == holder]
        return found[-1] if found else None

    async def has_taken_over(self, holder: str) -> bool:
        return await self.took_over(holder) is not None

    async def healed(self, epoch: int) -> bool:
        _, attempts = await self.read()
        return any(a.epoch == epoch and a.outcome == "healed" for a in attempts)

    def logged(self, instance: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log(instance).read_text().splitlines():
            with suppress(ValueError):
                found.append(json.loads(line))
        return [e for e in found if isinstance(e, dict) and "event" in e]

    def events(self, instance: str, name: str) -> list[float]:
        return [_stamp(e["timestamp"]) for e in self.logged(instance) if e["event"] == name]

    def downs(self, since: float) -> list[tuple[str, float]]:
        """Who told the chat of a fault since `since`, and when: the incident opened, or (a
        fault within `defaults.reopen_within` of the last one's end) reopened."""
        return [
            (who, sent.received_at)
            for who, bot in self.bots.items()
            for sent in bot.sent
            if sent.received_at >= since and sent.text.startswith((DOWN, FLAPPING))
        ]


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _start_server(marker: Path, port: int, pidfile: Path) -> str:
    server = (
        f"setsid {sys.executable} -m fleet_lab.vllm_sim --host 127.0.0.1 --port {port} "
        "--model m --tok-s 0 >/dev/null 2>&1 &"
    )
    return f"echo step2 >> {marker}; {server} echo $! > {pidfile}"


@pytest.fixture
async def pair(tmp_path: Path, pg_server: PgServer) -> AsyncIterator[Pair]:
    target = pg_server.database()
    gate = TcpGate(pg_server.port)
    await gate.start()
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    port = free_port()
    marker, pidfile = tmp_path / "steps.txt", tmp_path / "server.pid"
    (playbook / "revive.yaml").write_text(
        RULE.format(marker=marker, start=_start_server(marker, port, pidfile))
    )
    token = tmp_path / "peer.token"
    token.write_text("a shared secret for the peers\n")
    token.chmod(0o640)
    listens = {instance: f"127.0.0.1:{free_port()}" for instance in ("a", "b")}
    bots, urls = {}, {}
    for instance, other in (("a", "b"), ("b", "a")):
        folder = tmp_path / instance
        folder.mkdir()
        bots[instance] = bot = BotApiStub(token=f"{instance}-token")
        await bot.start()
        (folder / "bot.token").write_text(bot.token)
        path = write_fleet(
            folder,
            {"m": {"kind": "openai", "url": f"http://127.0.0.1:{port}", "model": "m"}},
            remediation={"verify_every": "200ms"},
            playbook=str(playbook),
            http={"listen": listens[instance]},
        )
        urls[instance] = "http://" + listens[instance]
        document = yaml.safe_load(path.read_text())
        url = target.url
        if instance == "a":  # a reaches PostgreSQL through the gate
            url = url.replace(f":{pg_server.port}/", f":{gate.listen_port}/")
        document["endpoints"]["m"]["host"] = "forge"
        document["store"] = {
            "url": url,
            "instance": instance,
            "lease": f"{LEASE_S:g}s",
            "peers": ["http://" + listens[other]],
            "peer_token_file": str(token),
        }
        document["notify"] = {
            "telegram": {
                "token_file": "bot.token",
                "chat_ids": [CHAT],
                "user_ids": [USER],
                "base_url": bot.base_url,
            }
        }
        path.write_text(yaml.safe_dump(document, sort_keys=False))
    pair = Pair(tmp_path, target, gate, port, marker, pidfile, {}, bots, urls)
    yield pair
    await pair.kept.close()
    gate.open()
    for bot in bots.values():
        await bot.stop()
    for proc in pair.procs.values():
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    await gate.stop()
    if pidfile.exists():
        with suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    found = subprocess.run(  # noqa: ASYNC221 (the teardown: nothing else runs)
        ["pgrep", "-f", str(marker)], capture_output=True, text=True, check=False
    )
    for pid in found.stdout.split():
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(int(pid), signal.SIGKILL)


async def _a_leads_and_heals_then_b_follows(pair: Pair) -> None:
    await pair.start("a")
    await eventually(lambda: pair.healed(1), within=120, what="a healing the first fault")
    await eventually(
        lambda: pair.events("a", "telegram: bot up") != [], within=30, what="a's bot polling"
    )
    await pair.start("b")
    await eventually(lambda: pair.events("b", "following") != [], within=90, what="b following")


async def _ask(pair: Pair, instance: str, path: str) -> tuple[int, str, float]:
    """(status, body, seconds the answer took). Timed on a connection already open: a new one
    on loopback can wait out a SYN retransmit (1 s) when the kernel reuses a 4-tuple still in
    TIME_WAIT (a proof run's control request took 1.0004 s), which is the kernel's, not the
    daemon's."""
    async with httpx.AsyncClient(verify=default_tls(), timeout=10) as client:
        url = pair.urls[instance] + path
        await client.get(url)  # (opens the connection)
        began = time.monotonic()
        got = await client.get(url)
        return got.status_code, got.text, time.monotonic() - began


async def _cut_off_says(pair: Pair, said: str) -> bool:
    """Whether `/status` of the cut-off instance says it does not lead, and `said`."""
    try:
        status, body, _ = await _ask(pair, "a", "/status")
    except httpx.TransportError:  # between the leader's server and the follower's
        return False
    return status == 503 and "the store does not answer it" in body and said in body


async def _noted(pair: Pair, instance: str) -> list[tuple[int, str]]:
    """The leadership journal's `cut_off` entries of `instance`: (epoch, which case)."""
    entries, _ = await pair.read()
    return [(e.epoch, e.detail) for e in entries if e.event == "cut_off" and e.holder == instance]


async def _has_noted(pair: Pair, instance: str) -> bool:
    return await _noted(pair, instance) != []


def _errors(pair: Pair, instance: str) -> list[str]:
    lines = pair.log(instance).read_text().splitlines()
    traced = [line for line in lines if "Traceback" in line]
    return traced + [
        json.dumps(e) for e in pair.logged(instance) if e.get("level") in ("error", "critical")
    ]


async def test_a_leader_cut_off_from_postgresql_steps_down_silent_and_follows_after(
    pair: Pair,
) -> None:
    await _a_leads_and_heals_then_b_follows(pair)
    bot_a, bot_b = pair.bots["a"], pair.bots["b"]
    pair.gate.close()  # the partition: a's connections to PostgreSQL silently dropped
    cut = time.time()
    # a asks b, which reaches the store: a steps down, silent, before b can take over
    await eventually(lambda: pair.events("a", CUT) != [], within=LEASE_S, what="a stepping down")
    stepped = pair.events("a", CUT)[0]
    pair.kill_server()  # a fault in the window the old leader's lease still covers
    killed = time.time()
    # a's /status and control, at once, saying it does not lead and who will: b, which reaches
    # the store, until b has taken over (as early as a tenth of a lease after a stepped down),
    # then b by name (a asks its peers each sixth of a lease); the words of each are pinned in
    # test_leadership.py::test_a_cut_off_instance_says_who_will_lead_then_who_leads
    first: list[tuple[float, str]] = []

    async def cut_off_answer() -> bool:
        for said in (REACHES, LEADS):
            if await _cut_off_says(pair, said):
                first.append((time.time(), said))  # (when the answer had come)
                return True
        return False

    await eventually(cut_off_answer, within=10, what="a answering as cut off")
    answering = time.time() - stepped
    await eventually(lambda: pair.has_taken_over("b"), within=LEASE_S + 20, what="b taking over")
    taken = await pair.took_over("b")
    assert taken is not None
    assert taken.epoch == 2
    took = taken.at_ms / 1000
    assert stepped < killed < took  # the fault came before the takeover, a silent already
    answered, words = first[0]
    assert words == REACHES or answered >= took, f"a named b {took - answered:.2f}s before it led"
    # once b leads, a's answers name it (a asks its peers while cut off)
    await eventually(lambda: _cut_off_says(pair, LEADS), within=LEASE_S, what="a naming b")
    status, body, seconds = await _ask(pair, "a", "/status")
    assert status == 503
    assert body.startswith(
        "unavailable: this instance does not lead: the store does not answer it ("
    )
    assert body.endswith(f"); {LEADS}; send control requests there\n")
    assert seconds < 1.0
    status, body, seconds = await _ask(pair, "a", "/control/silences")
    assert status == 503
    assert seconds < 1.0
    assert json.loads(body)["text"].endswith(f"{LEADS}; send control requests there")
    calls_after = time.time()
    seen = len(bot_a.calls)
    await eventually(lambda: pair.healed(2), within=60, what="b healing the fault")
    await eventually(lambda: pair.downs(killed) != [], within=30, what="the fault told")
    # the heal: a reaches the store again and follows b
    await asyncio.sleep(max(0.0, PARTITION_S - (time.time() - cut)))  # the fault lasts
    polls_b = bot_b.calls.count("getUpdates")
    pair.gate.open()
    healed_at = time.time()
    await eventually(
        lambda: pair.events("a", BACK) != [],
        within=LEASE_S * 3,
        what="a reaching the store again",
    )

    async def follows() -> bool:
        try:
            status, body, _ = await _ask(pair, "a", "/status")
        except httpx.TransportError:
            return False
        return status == 200 and json.loads(body)["role"] == "follower"

    await eventually(follows, within=30, what="a following b")
    # the leadership journal says which case it was, written once a reached the store again
    await eventually(lambda: _has_noted(pair, "a"), within=LEASE_S, what="a's case journaled")
    assert await _noted(pair, "a") == [(1, "stepped down: a peer reaches the store (b)")]
    assert bot_a.calls[seen:] == []  # not one Bot API call once it stepped down
    assert [s for s in bot_a.sent if s.received_at >= stepped] == []
    await eventually(
        lambda: bot_b.calls.count("getUpdates") > polls_b, within=30, what="b polling on"
    )
    assert [who for who, _ in pair.downs(killed)] == ["b"]  # told once, by b
    _, attempts = await pair.read()
    assert [(a.epoch, a.outcome) for a in attempts] == [(1, "healed"), (2, "healed")]
    assert (pair.steps("step1"), pair.steps("step2")) == (2, 2)  # a ran no step of it
    assert _errors(pair, "a") == []
    assert _errors(pair, "b") == []
    # one warning when cut off, one when back; the store's own silence said at most once more
    said = [e["event"] for e in pair.logged("a") if _stamp(e["timestamp"]) >= cut]
    assert (said.count(CUT), said.count(BACK)) == (1, 1)
    assert said.count("lease: the store did not answer") <= 1
    assert pair.events("b", "leadership lost") == []
    figures = {
        "takeover_s": round(took - cut, 2),
        "stepped_down_before_takeover_s": round(took - stepped, 2),
        "status_answer_s": round(seconds, 3),
        "answers_cut_off_after_step_down_s": round(answering, 2),
        "a_calls_after_step_down": len(bot_a.calls) - seen,
        "follows_after_heal_s": round(pair.events("a", BACK)[0] - healed_at, 2),
        "checked_from": round(calls_after - stepped, 2),
    }
    if FIGURES:
        with Path(FIGURES).open("a") as out:  # noqa: ASYNC230 (one line, at the end)
            out.write(json.dumps(figures) + "\n")
    assert took - cut <= LEASE_S + 2, figures


async def test_postgresql_stopped_for_both_the_leader_whose_peer_does_not_lead_keeps_telling(
    pair: Pair, pg_server: PgServer
) -> None:
    await _a_leads_and_heals_then_b_follows(pair)
    bot_a = pair.bots["a"]
    pg_server.stop()
    try:
        await eventually(
            lambda: pair.events("a", EVERY_PEER_CUT_OFF) != [],
            within=LEASE_S * 3,
            what="a asking b, which does not lead",
        )
        pair.kill_server()
        await eventually(
            lambda: any(t.startswith(DOWN) for t in bot_a.texts(CHAT)),
            within=30,
            what="a telling the chat that m is down",
        )
    finally:
        pg_server.start()
    await eventually(lambda: pair.healed(1), within=5, what="a's first repair on record")
    assert pair.events("a", "leadership lost") == []
    assert pair.events("b", "leading") == []
    await eventually(lambda: _has_noted(pair, "a"), within=LEASE_S, what="a's case journaled")
    [(epoch, detail)] = await _noted(pair, "a")
    assert epoch == 1
    assert detail.startswith("led on: every peer cut off (b: cannot read store ")
    assert _errors(pair, "a") == []
    assert _errors(pair, "b") == []


async def test_a_cut_off_instance_stops_within_the_store_s_timeouts(pair: Pair) -> None:
    """Stopped while the partition lasts, the stepped-down instance does not wait for the store
    to answer: its stop is bounded by the store's timeouts."""
    await _a_leads_and_heals_then_b_follows(pair)
    pair.gate.close()
    await eventually(lambda: pair.events("a", CUT) != [], within=LEASE_S, what="a stepping down")
    await eventually(lambda: _cut_off_says(pair, REACHES), within=10, what="a answering as cut off")
    a = pair.procs["a"]
    began = time.monotonic()
    a.terminate()
    ends = ("stopped", "leadership stopped", "stop slow: a task still waits", "exiting")
    try:
        code = await asyncio.wait_for(a.wait(), timeout=PARTITION_S)
    except TimeoutError:  # where its tasks wait, said after `STOP_SLOW_S`
        said = [e for e in pair.logged("a") if e["event"] in ends]
        raise AssertionError(f"a did not stop within {PARTITION_S:g} s: {said}") from None
    took = time.monotonic() - began
    assert code == 0
    assert pair.events("a", "stopped") != []
    stops = [e for e in pair.logged("a") if e["event"] in ends]  # with the slow parts' names
    assert took < CONNECT_TIMEOUT_S + 2, (took, stops)  # its slow parts
    assert _errors(pair, "a") == []

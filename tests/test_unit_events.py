"""systemd's unit events in the daemon: routed to every endpoint that runs the unit, the journal
cursors and the streams' status kept in the store (an older release's journal-cursors.json
taken over once), and a death plus one confirming probe is
down at once (real vLLM-shaped servers on loopback, a real SQLite file; the stream's transport is
the scripted host of tests/test_hostevents.py, whose lines were recorded from real journald)."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.app.root import Supervisor
from supervisor.cli.status import polling_warnings
from supervisor.config.loader import load_config
from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Host
from supervisor.core.backoff import Backoff
from supervisor.core.events import UnitSignal
from supervisor.core.streamstatus import STREAMING, StreamPhase, StreamStatus
from supervisor.hear.streams.journal import parse_entry
from supervisor.hear.streams.local import LocalTransport
from supervisor.hear.streams.stream import StreamSettings
from supervisor.hear.units import CURSORS_FILE, UnitEvents
from supervisor.judge.machine import State
from supervisor.playbook.scopes import builtin_facts, scopes_of
from supervisor.record.store.cursors import Streams, read_streams, save_streams
from supervisor.record.store.store import Store
from supervisor.record.timeline.state import Transition
from supervisor.record.timeline.unit import UnitHeard
from supervisor.worker import EndpointWorker
from tests.helpers import eventually, write_fleet

DATA = Path(__file__).parent / "data" / "hostevents"
SHOW = """Id=ev-clean.service
ActiveState=inactive
SubState=dead
Result=success
ExecMainCode=1
ExecMainStatus=0
NRestarts=0
"""


def _cursor(line: str) -> str:
    entry = parse_entry(line)
    assert entry is not None
    return entry.cursor


def _scripted(folder: Path, lines: list[str]) -> LocalTransport:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "follow-1.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "follow-2.jsonl").write_text("")
    (folder / "show.txt").write_text(SHOW)
    prefix = (sys.executable, str(DATA / "scripted_host.py"), str(folder))
    return LocalTransport(Host(name="s1", local=True), prefix=prefix)


def _config(tmp_path: Path) -> FleetConfig:
    unit = [{"host": "s1", "unit": "ev-clean.service"}]
    return FleetConfig.model_validate(
        {
            "source": tmp_path / "fleet.yaml",
            "store": {"path": tmp_path / "state.db"},
            "hosts": {"s1": {"name": "s1", "address": "10.0.0.1"}},
            "endpoints": {
                name: {
                    "name": name,
                    "kind": "health",
                    "url": "http://10.0.0.1:8000/health",
                    "units": units,
                }
                for name, units in {"head": unit, "also": unit, "other": []}.items()
            },
        }
    )


async def test_events_are_routed_and_the_cursor_resumes_after_a_restart(tmp_path: Path) -> None:
    recorded = (DATA / "ev-clean.jsonl").read_text().splitlines()
    config = _config(tmp_path)
    settings = StreamSettings(backoff=Backoff(base_s=0.05, cap_s=0.05, jitter=0))
    seen: list[tuple[str, UnitSignal]] = []

    def submit(name: str, signal: UnitSignal) -> None:
        seen.append((name, signal))

    store = await Store.open(config.store.path)
    try:
        events = UnitEvents(
            config,
            submit,
            store=store,
            settings=settings,
            transports={"s1": _scripted(tmp_path / "one", recorded)},
        )
        await events.load()
        events.start()
        try:
            await eventually(lambda: len(seen) == 4, what="two events for two endpoints")
            assert events.status() == {"s1": STREAMING}

            # saved at once after an event went out, not at the next 5 s
            async def saved() -> bool:
                return (await read_streams(store)).cursors == {"s1": _cursor(recorded[-1])}

            await eventually(saved, within=2, what="the cursor saved")
        finally:
            await events.stop()
        assert [(name, s.kind, s.down, s.line) for name, s in seen] == [
            ("head", "started", False, "ev-clean.service started"),
            ("also", "started", False, "ev-clean.service started"),
            ("head", "exited", True, "ev-clean.service exited: status=0"),
            ("also", "exited", True, "ev-clean.service exited: status=0"),
        ]
        assert await read_streams(store) == Streams(
            cursors={"s1": _cursor(recorded[-1])}, status={"s1": STREAMING}
        )
        assert not (tmp_path / CURSORS_FILE).exists()

        again = UnitEvents(
            config,
            submit,
            store=store,
            settings=settings,
            transports={"s1": _scripted(tmp_path / "two", [])},
        )
        await again.load()
        again.start()
        argv = tmp_path / "two" / "argv.log"
        try:
            await eventually(
                lambda: argv.exists() and "--follow" in argv.read_text(), what="the follow"
            )
        finally:
            await again.stop()
    finally:
        await store.close()
    follow = next(line for line in argv.read_text().splitlines() if "--follow" in line)
    assert f"--cursor={_cursor(recorded[-1])}" in follow


SUDO_POLLING = "polling: journalctl failed: sudo: a password is required"
OLD_FILE = """{
 "cursors": {"s1": "s=old;i=1", "s2": "s=old;i=2"},
 "status": {"s1": "streaming", "s2": "polling: journalctl failed: sudo: a password is required"}
}"""


async def test_an_older_releases_cursor_file_is_taken_over_once(tmp_path: Path) -> None:
    config = _config(tmp_path)
    path = tmp_path / CURSORS_FILE
    path.write_text(OLD_FILE)
    store = await Store.open(config.store.path)
    try:
        # s1 is in the store already (a newer leader wrote it): the store's stays
        await save_streams(store, {"s1": "s=new;i=9"}, {"s1": STREAMING}, at=datetime.now(UTC))
        events = UnitEvents(config, lambda _n, _s: None, store=store)
        await events.load()
        assert not path.exists()
        assert await read_streams(store) == Streams(
            cursors={"s1": "s=new;i=9", "s2": "s=old;i=2"},
            status={
                "s1": STREAMING,  # an older release's words are kept as words, never parsed
                "s2": StreamStatus(phase=StreamPhase.OLD, said=SUDO_POLLING),
            },
        )
        assert events.cursors == {"s1": "s=new;i=9", "s2": "s=old;i=2"}
    finally:
        await store.close()


def test_a_host_that_fell_back_to_polling_is_a_warning_in_status() -> None:
    hosts: list[dict[str, Any]] = [
        {"name": "spark1", "events": "streaming", "events_phase": "streaming"},
        {"name": "spark2", "events": SUDO_POLLING, "events_phase": "polling"},
        {"name": "forge", "events": None, "events_phase": None},
    ]
    assert polling_warnings(hosts) == (
        "\n\nwarning: host spark2 unit events: polling: journalctl failed: sudo: a password is "
        "required"
    )
    assert polling_warnings(hosts[:1]) == ""


def test_event_facts_are_in_the_scope_of_the_unit_it_is_about(tmp_path: Path) -> None:
    config = _config(tmp_path)
    signal = _signal("head", unit="ev-clean.service", host="s1")
    scopes = scopes_of(config.endpoints["head"], config)
    facts = builtin_facts(scopes[0], state="down", trigger=None, event=signal)
    assert {k: v for k, v in facts.items() if k.startswith("event.")} == {
        "event.kind": "failed",
        "event.result": "exit-code",
        "event.exit_status": 127,
        "event.n_restarts": 2,
        "event.text": "/bin/bash: /opt/missing/vllm-090.sh: No such file or directory\n"
        "vllm.service: Main process exited, code=exited, status=127/n/a",
        "event.source": "journal",
    }
    other = _signal("head", unit="worker.service", host="s1")
    facts = builtin_facts(scopes[0], state="down", trigger=None, event=other)
    assert not [k for k in facts if k.startswith("event.")]


def _signal(
    endpoint: str, *, kind: str = "failed", unit: str = "vllm.service", host: str = "forge"
) -> UnitSignal:
    return UnitSignal(
        endpoint=endpoint,
        host=host,
        unit=unit,
        kind=kind,
        down=kind != "started",
        line=f"{unit} {kind}: status=127, 2 restarts (exit-code)",
        message=f"{unit}: Failed with result 'exit-code'.",
        at=datetime.now(UTC),
        lines=(
            "/bin/bash: /opt/missing/vllm-090.sh: No such file or directory",
            "vllm.service: Main process exited, code=exited, status=127/n/a",
        ),
        result="exit-code",
        exit_status=127,
        n_restarts=2,
        cursor="s=1;i=2",
    )


@pytest.fixture
async def vllm() -> AsyncIterator[VllmSim]:
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="ds4", flavour="vllm")
    await sim.start("127.0.0.1", 0)
    yield sim
    await sim.stop()


async def _started(tmp_path: Path, url: str) -> Supervisor:
    endpoint = {"kind": "openai", "url": url, "model": "ds4", "expect_reasoning": True}
    # a minute between checks and down after five: only the event can make it down in time
    probe = {"liveness_interval": "60s", "completion_interval": "300s", "failures_to_down": 5}
    daemon = Supervisor(load_config(write_fleet(tmp_path, {"ds4": endpoint}, probe=probe)))
    await daemon.start()
    return daemon


def _incident(worker: EndpointWorker) -> int | None:
    return worker.record.incident_id


async def test_a_death_and_one_failed_probe_is_down_at_once(tmp_path: Path, vllm: VllmSim) -> None:
    daemon = await _started(tmp_path, vllm.url)
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        await vllm.stop()
        started = time.monotonic()
        assert daemon.daemon is not None
        daemon.daemon.submit(_signal("ds4"))
        await eventually(lambda: _incident(worker) is not None, what="an incident")
        took = time.monotonic() - started
        assert worker.state is State.DOWN
        store = daemon.store
        assert store is not None

        async def recorded() -> bool:
            rows = await store.timeline(worker.record.incident_id or 0)
            return any(isinstance(r.record, UnitHeard) for r in rows)

        await eventually(recorded, what="the event in the timeline")
        rows = await store.timeline(worker.record.incident_id or 0)
    finally:
        await daemon.stop()
    assert took < 1.0
    down = rows[0].record
    assert isinstance(down, Transition)
    assert down.note == (
        "systemd: vllm.service failed: status=127, 2 restarts (exit-code); "
        "probe confirms: connection refused"
    )
    heard = [r.record for r in rows if isinstance(r.record, UnitHeard)]
    assert [h.summary for h in heard] == [
        "systemd on forge: vllm.service failed: status=127, 2 restarts (exit-code); "
        "probe confirms: connection refused"
    ]
    assert heard[0].lines[0] == "/bin/bash: /opt/missing/vllm-090.sh: No such file or directory"


async def test_a_death_the_probe_does_not_confirm_or_a_start_changes_nothing(
    tmp_path: Path, vllm: VllmSim
) -> None:
    daemon = await _started(tmp_path, vllm.url)
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        assert daemon.daemon is not None
        for signal in (_signal("ds4"), _signal("ds4", kind="started")):
            daemon.daemon.submit(signal)
        await eventually(lambda: worker.idle.is_set(), what="both judged")
        assert (worker.state, worker.record.incident_id) == (State.HEALTHY, None)
    finally:
        await daemon.stop()


async def test_our_own_stops_are_not_judged(tmp_path: Path, vllm: VllmSim) -> None:
    daemon = await _started(tmp_path, vllm.url)
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        until = datetime.now(UTC) + timedelta(hours=1)
        await worker.silence(until, "silenced for 1h by @op: upgrade")
        before = sum(vllm.requests.values())
        assert daemon.daemon is not None
        daemon.daemon.submit(_signal("ds4"))
        await eventually(lambda: worker.idle.is_set(), what="judged")
        assert worker.state is State.MAINTENANCE
        assert sum(vllm.requests.values()) == before  # not even a confirming probe
    finally:
        await daemon.stop()


LOOP_BEGAN = datetime(2026, 11, 26, 13, 0, tzinfo=UTC)


def _looping(n: int, kind: str) -> UnitSignal:
    """Attempt `n` of a crash loop: its start, or its death (203/EXEC, the unit crash-looping)."""
    signal = _signal("ds4", kind=kind)
    line = f"vllm.service {kind}: " + (
        f"{n} restarts" if kind == "started" else f"status=203, {n} restarts (exit-code)"
    )
    return replace(
        signal,
        line=line,
        exit_status=None if kind == "started" else 203,
        result="" if kind == "started" else "exit-code",
        n_restarts=n,
        # a start, then its death a second later; every 3 s (RestartSec=3)
        at=LOOP_BEGAN + timedelta(seconds=3 * n + (kind != "started")),
    )


async def test_a_crash_loop_is_counted_not_listed(tmp_path: Path, vllm: VllmSim) -> None:
    """The unit's death, then 100 rounds of `started` and `crash_loop: status=203` (5 minutes of
    a RestartSec=3 loop): the first of each is written at once, the repeats are one entry each."""
    daemon = await _started(tmp_path, vllm.url)
    worker = daemon.workers["ds4"]
    store = daemon.store
    assert store is not None
    assert daemon.daemon is not None
    try:
        await eventually(lambda: worker.state is State.HEALTHY, what="healthy")
        await vllm.stop()
        daemon.daemon.submit(_signal("ds4"))
        await eventually(lambda: _incident(worker) is not None, what="an incident")
        incident = worker.record.incident_id or 0
        for n in range(1, 101):
            daemon.daemon.submit(_looping(n, "started"))
            daemon.daemon.submit(_looping(n, "crash_loop"))
        await eventually(lambda: worker.idle.is_set(), what="the loop judged")
        rows = await store.timeline(incident)
        written = [r.record.summary for r in rows if isinstance(r.record, UnitHeard)]
        assert len(written) == 3, written  # the death, the first start, the first crash_loop
    finally:
        await daemon.stop()  # writes the repeats counted so far
    reopened = await Store.open(daemon.config.store.path)
    try:
        rows = await reopened.timeline(incident)
    finally:
        await reopened.close()
    heard = [r.record for r in rows if isinstance(r.record, UnitHeard)]
    # deaths are judged ahead of the other events: the first crash_loop comes before the start
    assert [(h.event, h.count, h.n_restarts) for h in heard] == [
        ("failed", 1, 2),
        ("crash_loop", 1, 1),
        ("started", 1, 1),
        ("started", 99, 2),
        ("crash_loop", 99, 2),
    ]
    assert heard[-1].summary == (
        "systemd on forge: vllm.service crash_loop: status=203, 2 restarts (exit-code); "
        "failed; down, 99 times, last at 13:05:01Z "
        "(vllm.service crash_loop: status=203, 100 restarts (exit-code))"
    )
    assert len(rows) < 15, [r.summary for r in rows]

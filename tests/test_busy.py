"""Busy is not broken: the worker reads what the server is doing before a failed or slow real
check counts (in-process daemon, real vLLM-shaped servers on loopback, a real SQLite file), and
keeps its real checks to the schedule while the endpoint is not healthy."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.judge.machine import State
from supervisor.record.store.records import TimelineRow
from supervisor.record.store.store import Store
from supervisor.record.timeline.state import Probe, Transition
from supervisor.worker import EndpointWorker
from tests.helpers import eventually, write_fleet

CHAT = "/v1/chat/completions"


@pytest.fixture
async def vllm() -> AsyncIterator[VllmSim]:
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="ds4", flavour="vllm")
    await sim.start("127.0.0.1", 0)
    yield sim
    await sim.stop()


def _endpoint(url: str) -> dict[str, object]:
    return {"kind": "openai", "url": url, "model": "ds4", "expect_reasoning": True}


async def _started(tmp_path: Path, url: str, **probe: object) -> Supervisor:
    settings = {"progress_window": "300ms", **probe}
    daemon = Supervisor(load_config(write_fleet(tmp_path, {"ds4": _endpoint(url)}, probe=settings)))
    await daemon.start()
    return daemon


def _incident(worker: EndpointWorker) -> int | None:
    return worker.record.incident_id  # read through a call: it changes while the test awaits


def _state(worker: EndpointWorker) -> State:
    return worker.state


async def _timeline(store: Store | None, incident_id: int | None) -> list[TimelineRow]:
    assert store is not None
    assert incident_id is not None
    return await store.timeline(incident_id)


def _transitions(rows: list[TimelineRow]) -> list[Transition]:
    return [r.record for r in rows if isinstance(r.record, Transition)]


async def test_a_saturated_server_is_busy_never_down_and_gets_no_extra_real_check(
    tmp_path: Path, vllm: VllmSim
) -> None:
    daemon = await _started(tmp_path, vllm.url, completion_interval="3s")
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy")
        vllm.behaviour.load_running, vllm.behaviour.load_waiting = 48, 20
        vllm.behaviour.load_tok_s, vllm.behaviour.queue_s = 940.0, 3.0
        await eventually(lambda: _incident(worker) is not None, what="an incident")
        assert _state(worker) is State.BUSY
        incident_id = worker.record.incident_id
        before, liveness_before = vllm.requests[CHAT], vllm.requests["/health"]
        start = time.monotonic()
        await eventually(lambda: time.monotonic() - start >= 6.5, what="6.5 s", within=8)
        # liveness every 100 ms, a real check every 3 s: the schedule, nothing brought forward
        assert vllm.requests["/health"] - liveness_before >= 20
        assert vllm.requests[CHAT] - before <= 3
        assert _state(worker) is State.BUSY
        vllm.behaviour.load_running = vllm.behaviour.load_waiting = 0
        vllm.behaviour.load_tok_s, vllm.behaviour.queue_s = 0.0, 0.0
        await eventually(lambda: _incident(worker) is None, what="the incident closed")
        assert _state(worker) is State.HEALTHY
        rows = await _timeline(daemon.store, incident_id)
        assert daemon.store is not None
        assert incident_id is not None
        incident = await daemon.store.incident(incident_id)
    finally:
        await daemon.stop()
    assert incident is not None
    busy = r"busy: 48 running, 2[012] waiting, \d+ tok/s generated"
    assert re.fullmatch(busy, incident.cause)
    moves = [(t.source, t.dest) for t in _transitions(rows)]
    assert moves == [("healthy", "busy"), ("busy", "healthy")]
    opened = _transitions(rows)[0]
    assert re.fullmatch(busy, opened.note)
    assert opened.progress is not None
    assert (opened.progress.verdict, opened.progress.running) == ("busy", 48)
    assert opened.probe is not None
    assert opened.probe.reason == "timed out after 1s"


async def test_a_hung_engine_is_down_at_once_and_the_timeline_says_why(
    tmp_path: Path, vllm: VllmSim
) -> None:
    daemon = await _started(tmp_path, vllm.url, failures_to_down=3)
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy")
        vllm.behaviour.engine_hung, vllm.behaviour.load_running = True, 3
        await eventually(lambda: worker.record.incident_id is not None, what="an incident")
        assert _state(worker) is State.DOWN
        rows = await _timeline(daemon.store, worker.record.incident_id)
    finally:
        await daemon.stop()
    down = _transitions(rows)[0]
    assert (down.source, down.dest) == ("healthy", "down")
    assert down.progress is not None
    assert down.progress.verdict == "hung"
    assert down.progress.tok_s == 0
    assert down.progress.running is not None
    assert down.progress.running >= 3
    frozen = r"hung: \d+ running, 0 waiting, generation_tokens_total frozen at \d+ for 0\.\ds"
    assert re.fullmatch(frozen, down.progress.reason)
    assert re.fullmatch(frozen + "; real check: timed out after 1s", down.note)
    assert down.probes is not None
    assert len(down.probes) == 1


async def test_while_down_a_real_check_runs_once_per_interval_and_repeats_are_one_entry(
    tmp_path: Path, vllm: VllmSim
) -> None:
    daemon = await _started(tmp_path, vllm.url, completion_interval="2s")
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy", within=15)
        vllm.behaviour.fail_status = 500  # /health answers, every completion fails
        await eventually(lambda: _incident(worker) is not None, what="an incident", within=15)
        assert _state(worker) is State.DOWN
        incident_id = worker.record.incident_id
        before, liveness_before = vllm.requests[CHAT], vllm.requests["/health"]
        await eventually(
            lambda: vllm.requests["/health"] - liveness_before >= 40, what="40 liveness passes"
        )
        # about 4 s: one brought forward by a liveness pass, one per 2 s interval
        assert vllm.requests[CHAT] - before <= 3
        vllm.behaviour.fail_status = None
        await eventually(lambda: _incident(worker) is None, what="closed", within=15)
        assert _state(worker) is State.HEALTHY
        rows = await _timeline(daemon.store, incident_id)
    finally:
        await daemon.stop()
    probes = [r.record for r in rows if isinstance(r.record, Probe)]
    liveness = [p for p in probes if p.sample.tier == "liveness"]
    # one entry per run (a transition, e.g. an escalation, ends a run)
    assert len(liveness) <= 2
    run = max(liveness, key=lambda p: p.count)
    assert run.count >= 30
    assert run.last_at is not None
    assert run.summary == (
        f"liveness models ok ({run.note}), {run.count} times, "
        f"last at {run.last_at.strftime('%H:%M:%SZ')}"
    )
    deep = [p for p in probes if p.sample.tier == "deep"]
    assert 1 <= len(deep) <= 2
    engine = (
        "HTTP 500: EngineCore encountered an issue. See stack trace (above) for the root cause."
    )
    assert {p.sample.reason for p in deep} == {engine}

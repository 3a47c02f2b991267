"""The daemon end to end, in-process: real vLLM-shaped servers on loopback, a real SQLite file,
real TCP listeners standing in for the hosts' SSH ports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.judge.machine import State
from supervisor.record.store.records import TimelineRow
from supervisor.record.store.store import Store
from supervisor.record.timeline.base import EntryKind
from supervisor.record.timeline.state import Transition
from supervisor.worker import EndpointWorker
from tests.helpers import eventually, write_fleet


def _incident(worker: EndpointWorker) -> int | None:
    return worker.record.incident_id  # read through a call: it changes while the test awaits


def _state(worker: EndpointWorker) -> State:
    return worker.state


async def _restart(sim: VllmSim) -> None:
    """Serve again on the same port, as a restarted vLLM would."""
    port = int(sim.url.rsplit(":", 1)[1])
    await sim.start("127.0.0.1", port)


@pytest.fixture
async def vllm() -> AsyncIterator[VllmSim]:
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="deepseek-v4-flash", flavour="vllm")
    await sim.start("127.0.0.1", 0)
    yield sim
    await sim.stop()


def _ds4(url: str, **extra: object) -> dict[str, object]:
    return {
        "kind": "openai",
        "url": url,
        "model": "deepseek-v4-flash",
        "expect_reasoning": True,
        **extra,
    }


async def _started(path: Path) -> Supervisor:
    daemon = Supervisor(load_config(path))
    await daemon.start()
    return daemon


async def test_healthy_then_down_then_back_with_one_incident_and_its_timeline(
    tmp_path: Path, vllm: VllmSim
) -> None:
    daemon = await _started(write_fleet(tmp_path, {"ds4": _ds4(vllm.url)}))
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy")
        assert _incident(worker) is None
        await vllm.stop()
        await eventually(lambda: _incident(worker) is not None, what="an incident")
        assert _state(worker) is State.DOWN
        incident_id = _incident(worker)
        assert incident_id is not None
        await _restart(vllm)
        await eventually(lambda: _incident(worker) is None, what="the incident closed")
        assert _state(worker) is State.HEALTHY
        store = daemon.store
        assert store is not None
        incident = await store.incident(incident_id)
        assert incident is not None
        assert incident.cause == "connection refused"
        assert incident.resolution is not None
        assert incident.resolution.startswith("completion passed (ttft ")
        assert not incident.is_open
        timeline = await store.timeline(incident_id)
    finally:
        await daemon.stop()
    transitions = [r.summary for r in timeline if r.kind is EntryKind.TRANSITION]
    assert transitions[0] == (
        "healthy -> down: connection refused (2 failures and a failed re-probe)"
    )
    assert transitions[-1] == "down -> healthy: real check passed"
    cause_probes = timeline[0].data["probes"]
    assert isinstance(cause_probes, list)
    assert len(cause_probes) == 3  # two failures and the re-probe that confirmed them

    # a probe that meets the server while it stops sees the connection closed or reset; the
    # others, refused
    def dying(reason: object) -> bool:
        return isinstance(reason, str) and reason.startswith(("connection ", "cannot connect: "))

    assert all(isinstance(p, dict) and dying(p["reason"]) for p in cause_probes)
    assert isinstance(cause_probes[-1], dict)
    assert cause_probes[-1]["reason"] == "connection refused"


async def test_an_endpoint_without_reasoning_is_degraded_not_healthy(tmp_path: Path) -> None:
    sim = VllmSim(SimBehaviour(tok_s=2000.0, reasoning_field=None), model="m", flavour="vllm")
    await sim.start("127.0.0.1", 0)
    daemon = await _started(write_fleet(tmp_path, {"m": {**_ds4(sim.url), "model": "m"}}))
    worker = daemon.workers["m"]
    try:
        await eventually(lambda: _incident(worker) is not None, what="an incident")
        assert _state(worker) is State.DEGRADED
        store = daemon.store
        assert store is not None
        incident_id = _incident(worker)
        assert incident_id is not None
        incident = await store.incident(incident_id)
        assert incident is not None
        assert incident.cause == "no reasoning text"
        sim.behaviour.reasoning_field = "reasoning_content"
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy")
    finally:
        await daemon.stop()
        await sim.stop()


async def test_inside_the_startup_grace_failures_are_not_acted_on(tmp_path: Path) -> None:
    path = write_fleet(tmp_path, {"ds4": _ds4("http://127.0.0.1:9")}, startup_grace="1h")
    daemon = await _started(path)
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: _state(worker) is State.STARTING, what="starting")
        await eventually(lambda: "connection refused" in worker.record.last_reason, what="probed")
        # several liveness rounds later it is still starting and nothing was opened
        rounds = 5
        for _ in range(rounds):
            worker.idle.clear()
            await eventually(lambda: worker.idle.is_set(), what="a probe round")
        assert _state(worker) is State.STARTING
        assert _incident(worker) is None
    finally:
        await daemon.stop()


async def _listener() -> asyncio.Server:
    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    return await asyncio.start_server(accept, "127.0.0.1", 0)


async def test_a_host_that_stops_answering_is_one_incident_and_its_endpoints_wait(
    tmp_path: Path, vllm: VllmSim
) -> None:
    ssh = await _listener()
    ssh_port = ssh.sockets[0].getsockname()[1]
    path = write_fleet(
        tmp_path,
        {"ds4": _ds4(vllm.url, units=[{"host": "spark1", "unit": "vllm-ds4-head.service"}])},
        hosts={"spark1": {"address": "127.0.0.1", "port": ssh_port}, "forge": {"local": True}},
    )
    daemon = await _started(path)
    worker, host = daemon.workers["ds4"], daemon.hosts["spark1"]
    store = daemon.store
    assert store is not None
    try:
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy")
        await eventually(lambda: host.state == "reachable", what="host reachable")
        # the box hangs: neither SSH nor the model answers
        ssh.close()
        await ssh.wait_closed()
        await vllm.stop()
        await eventually(lambda: _state(worker) is State.UNREACHABLE, what="unreachable")
        incidents = await store.incidents(open_only=True)
        assert [(i.subject_kind.value, i.subject) for i in incidents] == [("host", "spark1")]
        assert incidents[0].cause == (
            f"host spark1 does not answer: connection refused on 127.0.0.1:{ssh_port}"
        )
        host_incident = incidents[0].id

        async def endpoint_entry_in_host_incident() -> bool:
            rows = await store.timeline(host_incident)
            return any(
                isinstance(r.record, Transition)
                and (r.subject, r.record.source, r.record.dest) == ("ds4", "healthy", "unreachable")
                for r in rows
            )

        await eventually(endpoint_entry_in_host_incident, what="the endpoint in the host incident")
        # it comes back: the host incident closes, the endpoint is judged afresh
        ssh = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", ssh_port)
        await _restart(vllm)
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy again")

        async def host_incident_closed() -> bool:  # the watcher's own transition, not the worker's
            return await store.incidents(open_only=True) == []

        await eventually(host_incident_closed, what="the host incident closed")
        assert await store.incidents(subject="ds4") == []
    finally:
        await daemon.stop()
        ssh.close()


async def test_a_lost_host_is_told_at_once_not_after_the_probes_of_its_frozen_server(
    tmp_path: Path, vllm: VllmSim
) -> None:
    """The GSP-hang class: SSH refuses and the model reads requests and never answers. Probes
    that would each run into their 30 s timeout (and a re-probe into another) are abandoned:
    the endpoint is `unreachable` as soon as the host watcher gives up on the host."""
    ssh = await _listener()
    ssh_port = ssh.sockets[0].getsockname()[1]
    unit = {"host": "spark1", "unit": "vllm-ds4-head.service"}
    path = write_fleet(
        tmp_path,
        {"ds4": _ds4(vllm.url, units=[unit])},
        hosts={"spark1": {"address": "127.0.0.1", "port": ssh_port}, "forge": {"local": True}},
        probe={"timeout": "30s"},
    )
    daemon = await _started(path)
    worker, host = daemon.workers["ds4"], daemon.hosts["spark1"]
    try:
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy")
        await eventually(lambda: host.state == "reachable", what="host reachable")
        vllm.behaviour.hang = True
        ssh.close()
        await ssh.wait_closed()
        await eventually(lambda: _state(worker) is State.UNREACHABLE, within=10, what="unreachable")
    finally:
        await daemon.stop()


async def test_a_flapping_endpoint_is_one_incident(tmp_path: Path, vllm: VllmSim) -> None:
    daemon = await _started(write_fleet(tmp_path, {"ds4": _ds4(vllm.url)}))
    worker = daemon.workers["ds4"]
    store = daemon.store
    assert store is not None
    try:
        for _ in range(3):
            await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy")
            await vllm.stop()
            await eventually(lambda: _incident(worker) is not None, what="an incident")
            await _restart(vllm)
            await eventually(lambda: _incident(worker) is None, what="closed")
        incidents = await store.incidents(subject="ds4")
    finally:
        await daemon.stop()
    assert len(incidents) == 1
    transitions = [_moves(r) for r in await _timeline_of(tmp_path, incidents[0].id)]
    assert transitions.count(("healthy", "down")) == 3
    assert transitions.count(("down", "healthy")) == 3


def _moves(row: TimelineRow) -> tuple[str, str]:
    """A transition's (source, dest)."""
    record = row.record
    assert isinstance(record, Transition), row
    return record.source, record.dest


async def _timeline_of(tmp_path: Path, incident_id: int) -> list[TimelineRow]:
    async with await Store.open(tmp_path / "state" / "supervisor.db", create=False) as store:
        return [r for r in await store.timeline(incident_id) if r.kind is EntryKind.TRANSITION]


async def test_a_silence_survives_a_restart_and_ends_on_time(tmp_path: Path, vllm: VllmSim) -> None:
    path = write_fleet(tmp_path, {"ds4": _ds4(vllm.url)})
    daemon = await _started(path)
    worker = daemon.workers["ds4"]
    try:
        await eventually(lambda: _state(worker) is State.HEALTHY, what="healthy")
        until = daemon.clock.now() + timedelta(seconds=1)
        assert await worker.silence(until, "silenced for 1s by alice") is not None
    finally:
        await daemon.stop()
    daemon = await _started(path)  # a restart inside the silence
    worker = daemon.workers["ds4"]
    try:
        assert _state(worker) is State.MAINTENANCE
        assert worker.record.grace_until == until
        await eventually(lambda: _state(worker) is State.HEALTHY, what="the silence ended")
        assert worker.record.grace_until is None
    finally:
        await daemon.stop()

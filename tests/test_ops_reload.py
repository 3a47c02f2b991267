"""Config reload (SIGHUP's `reload_from_file`) on a running daemon: real vLLM-shaped servers on
loopback, a real SQLite store, the daemon's own HTTP /status, and the real probes (wrapped only to
count them and, in one spec, to hold one in flight)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from structlog.testing import capture_logs

from supervisor.app.reload import ReloadResult, reload_from_file
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.config.supervised import Endpoint
from supervisor.core import httpclient
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.core.tls import default_tls
from supervisor.judge.machine import State
from supervisor.probe import run_probe
from supervisor.worker import EndpointWorker
from tests.conftest import SimFactory
from tests.helpers import eventually, write_fleet


class CountingProber:
    """The real probe, counted per endpoint; `hold(name)` keeps that endpoint's next probes in
    flight until `release(name)`."""

    def __init__(self) -> None:
        self.client = HttpClient()
        self.calls: list[tuple[str, Tier, timedelta]] = []
        self.results: list[ProbeResult] = []
        self._gates: dict[str, asyncio.Event] = {}
        self.in_flight: dict[str, asyncio.Event] = {}

    async def __call__(self, endpoint: Endpoint, tier: Tier) -> ProbeResult:
        self.calls.append((endpoint.name, tier, endpoint.probe.timeout))
        gate = self._gates.get(endpoint.name)
        if gate is not None:
            self.in_flight[endpoint.name].set()
            await gate.wait()
        result = await run_probe(endpoint, tier, self.client, clock=SystemClock())
        self.results.append(result)
        return result

    def hold(self, name: str) -> None:
        self._gates[name] = asyncio.Event()
        self.in_flight[name] = asyncio.Event()

    def release(self, name: str) -> None:
        self._gates.pop(name).set()

    def count(self, name: str) -> int:
        """Probes of `name` that finished."""
        return sum(1 for r in self.results if r.endpoint == name)


@pytest.fixture
async def prober() -> AsyncIterator[CountingProber]:
    counting = CountingProber()
    yield counting
    await counting.client.aclose()


def _openai(url: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "openai", "url": url, "model": "sim-model", "expect_reasoning": True, **extra}


def _rewrite(path: Path, change: dict[str, Any]) -> None:
    """Change the fleet file in place: `change` maps endpoint names to new specs (None: gone)."""
    document = yaml.safe_load(path.read_text())
    for name, spec in change.items():
        if spec is None:
            document["endpoints"].pop(name)
        else:
            document["endpoints"][name] = spec
    path.write_text(yaml.safe_dump(document, sort_keys=False))


async def _started(path: Path, prober: CountingProber) -> Supervisor:
    daemon = Supervisor(load_config(path), prober=prober)
    await daemon.start()
    return daemon


def _state(daemon: Supervisor, name: str) -> State | None:
    worker = daemon.workers.get(name)
    return worker.state if worker is not None else None


async def _status(daemon: Supervisor) -> dict[str, Any]:
    server = daemon.ops.server
    assert server is not None
    async with httpx.AsyncClient(verify=default_tls(), trust_env=False) as client:
        response = await client.get(f"{server.url}/status", timeout=5)
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def _listed(document: dict[str, Any]) -> list[str]:
    return sorted(e["name"] for e in document["endpoints"])


HTTP = {"enabled": True, "listen": "127.0.0.1:0"}


async def test_changed_settings_are_in_force_and_state_and_incident_are_kept(
    tmp_path: Path, sim_factory: SimFactory, prober: CountingProber
) -> None:
    healthy = await sim_factory()
    hanging = await sim_factory()
    hanging.behaviour.hang = True
    slow = {"liveness_interval": "1h", "completion_interval": "1h", "timeout": "300ms"}
    path = write_fleet(
        tmp_path, {"a": _openai(hanging.url, probe=slow), "b": _openai(healthy.url)}, http=HTTP
    )
    daemon = await _started(path, prober)
    try:
        # one liveness probe at start (timed out), then nothing for an hour; b keeps probing
        old = daemon.workers["a"]
        await eventually(
            lambda: old.record.last_reason != "" and prober.count("b") >= 3, what="probes"
        )
        assert old.record.last_reason == "timed out after 300ms"
        before = prober.count("a")
        fast = {"liveness_interval": "50ms", "completion_interval": "1h", "timeout": "200ms"}
        _rewrite(path, {"a": _openai(hanging.url, probe=fast)})
        result = await reload_from_file(daemon)
        assert result == ReloadResult(changes=("endpoint a changed",))
        new = daemon.workers["a"]
        assert new is not old
        assert new.endpoint.probe.liveness_interval == timedelta(milliseconds=50)
        # the new interval is in force: it goes down on the new, shorter timeout
        await eventually(
            lambda: new.record.incident_id is not None, what="a down, an incident open"
        )
        assert new.state is State.DOWN
        assert prober.count("a") >= before + 2  # its streak carried over: 1 + 1 + re-probe
        assert new.record.last_reason == "timed out after 200ms"
        incident = new.record.incident_id
        assert incident is not None
        # changed again: the state and the open incident carry over to the next worker
        assert daemon.remediator is not None
        await daemon.remediator.wait()  # its (dry run) repair decided: not busy any more
        _rewrite(path, {"a": _openai(hanging.url, probe={**fast, "liveness_interval": "60ms"})})
        assert (await reload_from_file(daemon)).changes == ("endpoint a changed",)
        assert daemon.workers["a"].state is State.DOWN
        assert daemon.workers["a"].record.incident_id == incident
        store = daemon.store
        assert store is not None
        assert [i.id for i in await store.incidents(open_only=True)] == [incident]
        assert _state(daemon, "b") is State.HEALTHY
        assert _listed(await _status(daemon)) == ["a", "b"]
    finally:
        await daemon.stop()


async def test_a_removed_endpoint_stops_and_is_no_longer_listed(
    tmp_path: Path, sim_factory: SimFactory, prober: CountingProber
) -> None:
    a, b = await sim_factory(), await sim_factory()
    path = write_fleet(tmp_path, {"a": _openai(a.url), "b": _openai(b.url)}, http=HTTP)
    daemon = await _started(path, prober)
    try:
        await eventually(lambda: _state(daemon, "a") is State.HEALTHY, what="a healthy")
        assert daemon.daemon is not None
        (task,) = daemon.daemon.worker_tasks("a")
        _rewrite(path, {"a": None})
        assert (await reload_from_file(daemon)).changes == ("endpoint a removed",)
        assert task.done()
        assert "a" not in daemon.workers
        assert _listed(await _status(daemon)) == ["b"]
        # no job ticks it any more: b goes on being probed, a never again
        count = prober.count("a")
        seen_b = prober.count("b")
        await eventually(lambda: prober.count("b") >= seen_b + 5, what="b probed")
        assert prober.count("a") == count
    finally:
        await daemon.stop()


async def test_a_removed_endpoint_s_connection_is_closed_once_idle(
    tmp_path: Path, sim_factory: SimFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's real probes (no counting prober), through its one HTTP client: each
    endpoint's connection is kept alive between its probes; once a reload removed `a`, its
    connection is closed when it has been idle past the keep-alive expiry (the sim sees it
    end), and b's stays open."""
    monkeypatch.setattr(httpclient, "KEEPALIVE_S", 0.5)  # b is probed every 100 ms
    a, b = await sim_factory(), await sim_factory()
    path = write_fleet(tmp_path, {"a": _openai(a.url), "b": _openai(b.url)})
    daemon = Supervisor(load_config(path))
    await daemon.start()
    try:
        await eventually(lambda: _state(daemon, "a") is State.HEALTHY, what="a healthy")
        await eventually(lambda: a.connections >= 1 and b.connections >= 1, what="kept alive")
        _rewrite(path, {"a": None})
        assert (await reload_from_file(daemon)).changes == ("endpoint a removed",)
        await eventually(lambda: a.connections == 0, within=3, what="a's connection closed")
        seen_b = b.requests["/health"]
        await eventually(lambda: b.requests["/health"] > seen_b, what="b probed")
        assert b.connections >= 1
    finally:
        await daemon.stop()


BAD = [
    pytest.param(
        {"a": _openai("http://127.0.0.1:9", probe={"timeout": "soon"})},
        (
            "{path}:30: endpoints.a.probe.timeout: "
            "expected a duration like 90s, 15m or 2h, got 'soon'",
        ),
        id="bad-duration",
    ),
    pytest.param(
        {"a": {"kind": "openai", "model": "m"}},
        ("{path}:24: endpoints.a.url: required",),
        id="missing-url",
    ),
    pytest.param(
        {"c": _openai("http://127.0.0.1:9", units=[{"host": "spark3", "unit": "x.service"}])},
        ("{path}:35: endpoints.c.units[0].host: unknown host 'spark3' (hosts: forge)",),
        id="unknown-host",
    ),
]


@pytest.mark.parametrize(("change", "errors"), BAD)
async def test_a_bad_config_is_refused_with_its_errors_and_the_running_one_stays(
    tmp_path: Path,
    sim_factory: SimFactory,
    prober: CountingProber,
    change: dict[str, Any],
    errors: tuple[str, ...],
) -> None:
    a = await sim_factory()
    path = write_fleet(tmp_path, {"a": _openai(a.url)}, http=HTTP)
    daemon = await _started(path, prober)
    try:
        await eventually(lambda: _state(daemon, "a") is State.HEALTHY, what="a healthy")
        config, worker = daemon.config, daemon.workers["a"]
        _rewrite(path, change)
        with capture_logs() as logs:
            result = await reload_from_file(daemon)
        assert result == ReloadResult(errors=tuple(e.format(path=path) for e in errors))
        assert daemon.config is config
        assert daemon.workers["a"] is worker
        refused = [
            e["error"] for e in logs if e["event"] == "config reload refused" and "error" in e
        ]
        assert tuple(refused) == result.errors
        seen = prober.count("a")
        await eventually(lambda: prober.count("a") >= seen + 3, what="a still probed")
        assert _state(daemon, "a") is State.HEALTHY
    finally:
        await daemon.stop()


async def test_a_reload_while_a_probe_is_in_flight_waits_for_it_then_uses_the_new_settings(
    tmp_path: Path, sim_factory: SimFactory, prober: CountingProber
) -> None:
    a, b = await sim_factory(), await sim_factory()
    path = write_fleet(tmp_path, {"a": _openai(a.url), "b": _openai(b.url)}, http=HTTP)
    daemon = await _started(path, prober)
    try:
        await eventually(lambda: _state(daemon, "a") is State.HEALTHY, what="a healthy")
        prober.hold("a")
        await asyncio.wait_for(prober.in_flight["a"].wait(), timeout=5)
        _rewrite(path, {"a": _openai(a.url, probe={"timeout": "2s"})})
        reloading = asyncio.create_task(reload_from_file(daemon))
        seen_b = prober.count("b")
        await eventually(lambda: prober.count("b") >= seen_b + 3, what="b probed meanwhile")
        assert not reloading.done()  # it waits for the probe in flight
        assert _listed(await _status(daemon)) == ["a", "b"]  # and the daemon answers meanwhile
        prober.release("a")
        result = await asyncio.wait_for(reloading, timeout=5)
        assert result.changes == ("endpoint a changed",)
        seen = prober.count("a")
        await eventually(lambda: prober.count("a") >= seen + 3, what="a probed again")
        assert {t for n, _, t in prober.calls[-3:] if n == "a"} == {timedelta(seconds=2)}
        assert _state(daemon, "a") is State.HEALTHY
    finally:
        await daemon.stop()


async def test_a_probe_that_outlasts_the_drain_is_cancelled_and_the_reload_completes(
    tmp_path: Path,
    sim_factory: SimFactory,
    prober: CountingProber,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = await sim_factory(), await sim_factory()
    path = write_fleet(tmp_path, {"a": _openai(a.url), "b": _openai(b.url)}, http=HTTP)
    daemon = await _started(path, prober)
    assert daemon.daemon is not None
    daemon.daemon.reloads.drain_within = 0.3
    try:
        await eventually(lambda: _state(daemon, "a") is State.HEALTHY, what="a healthy")
        prober.hold("a")
        await asyncio.wait_for(prober.in_flight["a"].wait(), timeout=5)
        _rewrite(path, {"a": _openai(a.url, probe={"timeout": "2s"})})
        result = await asyncio.wait_for(reload_from_file(daemon), timeout=5)
        assert result.changes == ("endpoint a changed",)
        prober.release("a")
        seen = prober.count("a"), prober.count("b")
        await eventually(
            lambda: prober.count("a") >= seen[0] + 3 and prober.count("b") >= seen[1] + 3,
            what="both probed again",
        )
        assert _state(daemon, "a") is State.HEALTHY
        assert _listed(await _status(daemon)) == ["a", "b"]
    finally:
        await daemon.stop()


async def test_two_reloads_at_once_leave_one_worker_per_endpoint(
    tmp_path: Path, sim_factory: SimFactory, prober: CountingProber
) -> None:
    a = await sim_factory()
    path = write_fleet(tmp_path, {"a": _openai(a.url)}, http=HTTP)
    daemon = await _started(path, prober)
    try:
        await eventually(lambda: _state(daemon, "a") is State.HEALTHY, what="a healthy")
        _rewrite(path, {"a": _openai(a.url, probe={"timeout": "2s"})})
        first = load_config(path)
        _rewrite(path, {"a": _openai(a.url, probe={"timeout": "3s"})})
        second = load_config(path)
        await asyncio.wait_for(
            asyncio.gather(daemon.reconcile(first), daemon.reconcile(second)), timeout=10
        )
        assert daemon.daemon is not None
        running = [t for t in daemon.daemon.worker_tasks("a") if not t.done()]
        assert len(running) == 1
        assert daemon.workers["a"].endpoint.probe.timeout == timedelta(seconds=3)
        seen = prober.count("a")
        await eventually(lambda: prober.count("a") >= seen + 3, what="a probed again")
        assert _state(daemon, "a") is State.HEALTHY
    finally:
        await daemon.stop()


async def test_a_problem_seen_while_the_old_worker_drains_is_repaired_on_the_new_worker(
    tmp_path: Path,
    sim_factory: SimFactory,
    prober: CountingProber,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = await sim_factory()
    quick = {"failures_to_down": 1}
    path = write_fleet(tmp_path, {"a": _openai(a.url, probe=quick)}, http=HTTP)
    daemon = await _started(path, prober)
    remediator = daemon.remediator
    assert remediator is not None
    handled: list[EndpointWorker] = []
    repair = remediator.automatic.handle

    async def recording(worker: EndpointWorker) -> None:
        handled.append(worker)
        await repair(worker)

    monkeypatch.setattr(remediator.automatic, "handle", recording)
    try:
        await eventually(lambda: _state(daemon, "a") is State.HEALTHY, what="a healthy")
        prober.hold("a")
        await asyncio.wait_for(prober.in_flight["a"].wait(), timeout=5)
        await a.stop()  # the probe in flight, and its re-probe, will find it gone
        _rewrite(path, {"a": _openai(a.url, probe={**quick, "timeout": "2s"})})
        reloading = asyncio.create_task(reload_from_file(daemon))
        await asyncio.sleep(0.1)
        assert not reloading.done()
        prober.release("a")
        assert (await asyncio.wait_for(reloading, timeout=5)).changes == ("endpoint a changed",)
        worker = daemon.workers["a"]
        assert worker.state is State.DOWN
        await eventually(lambda: len(handled) >= 1, what="a repair")
        await remediator.wait()
        assert all(w is worker for w in handled)
    finally:
        await daemon.stop()

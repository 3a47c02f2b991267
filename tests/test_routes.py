"""Routers and their backends (`via`, `backend`): a backend killed behind a real LiteLLM proxy is
one incident, the backend's; the route is shown blocked by it (no incident, no repair of its
own) and both are healthy again, without a person, once the backend is back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from fleet_lab.vllm_sim.swap import LlamaSwap, RunningUpstream, SwapModel
from supervisor.app.root import Supervisor
from supervisor.config.errors import ConfigError
from supervisor.config.loader import load_config, parse_config
from supervisor.judge.machine import State
from supervisor.record.store.store import Store
from supervisor.record.timeline.state import Transition
from supervisor.worker import EndpointWorker
from tests import litellm
from tests.conftest import FAST_TOK_S
from tests.helpers import eventually, spawn_daemon, write_fleet
from tests.ports import free_port

KEY = "sk-route-3c9e"


def issues(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="fleet.yaml", base_dir=Path("/etc/fleet"))
    return [str(issue) for issue in caught.value.issues]


ROUTED = """
endpoints:
  door:
    kind: health
    url: http://hub:4000/health/readiness
  ds4:
    kind: openai
    url: http://spark1:8000
    model: ds4
  route:
    kind: openai
    url: http://hub:4000
    model: ds4
    via: {via}
    backend: {backend}
"""


@pytest.mark.parametrize(
    ("via", "backend", "expected"),
    [
        ("door", "ds5", "fleet.yaml:15: endpoints.route.backend: unknown endpoint 'ds5' "
         "(endpoints: door, ds4)"),
        ("route", "ds4", "fleet.yaml:14: endpoints.route.via: names this endpoint itself"),
    ],
    ids=["unknown", "itself"],
)  # fmt: skip
def test_a_route_names_endpoints_that_exist(via: str, backend: str, expected: str) -> None:
    assert issues(ROUTED.format(via=via, backend=backend)) == [expected]


def test_one_hop_only() -> None:
    text = (
        ROUTED.format(via="door", backend="ds4") + "    \n  again:\n    kind: openai\n"
        "    url: http://hub:4000\n    model: ds4\n    backend: route\n"
    )
    assert issues(text) == [
        "fleet.yaml:21: endpoints.again.backend: 'route' is itself behind 'door' (one hop only)"
    ]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def _status(http: aiohttp.ClientSession, url: str) -> dict[str, dict[str, Any]]:
    try:
        async with http.get(f"{url}/status") as answer:
            document = await answer.json()
    except (aiohttp.ClientError, ValueError):
        return {}
    return {e["name"]: e for e in document["endpoints"]}


def _fleet(tmp_path: Path, router: str, backend: str, listen: int) -> Path:
    (tmp_path / "door.key").write_text(KEY + "\n")
    (tmp_path / "door.key").chmod(0o600)
    on_forge = {"host": "forge"}
    route = {"kind": "openai", "url": router, "model": "ds4", "api_key_file": "door.key"}
    return write_fleet(
        tmp_path,
        {
            "door": {"kind": "health", "url": f"{router}/health/readiness", **on_forge},
            "ds4": {"kind": "openai", "url": backend, "model": "ds4", **on_forge},
            "route": {**route, "via": "door", "backend": "ds4", **on_forge},
        },
        probe={"timeout": "5s"},
        http={"listen": f"127.0.0.1:{listen}"},
    )


@pytest.mark.slow
@pytest.mark.skipif(litellm.unavailable() is not None, reason=str(litellm.unavailable()))
async def test_a_dead_backend_then_a_dead_router_are_one_incident_each_and_block_the_route(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """Behind a real LiteLLM proxy, one daemon watching the router (`door`), the backend (`ds4`)
    and the route through them. The backend dies (the router stays up): one incident, the
    backend's, and the route is blocked by it. Once it is back, the proxy itself stops (the
    backend is fine): one incident, the router's, and the route is blocked by it. All healthy
    again, without a person, each time the dead part is back on its port. (One spec, not two:
    a LiteLLM start costs 7.7 CPU-seconds, docs/lab.md.)"""
    port, router_port, listen = free_port(), free_port(), free_port()
    backend = VllmSim(SimBehaviour(tok_s=FAST_TOK_S), model="ds4")
    await backend.start(port=port)
    url = f"http://127.0.0.1:{listen}"

    async def are(*wanted: str) -> bool:
        found = await _status(http, url)
        return [found.get(n, {}).get("state") for n in ("door", "ds4", "route")] == list(wanted)

    healthy = ("healthy", "healthy", "healthy")
    folder = tmp_path / "litellm"
    process = None
    try:
        async with litellm.litellm_proxy(
            folder, {"ds4": backend.url}, master_key=KEY, port=router_port
        ) as first:
            config = _fleet(tmp_path, first.url, backend.url, listen)
            process = await spawn_daemon(config, tmp_path / "daemon.log")
            await eventually(lambda: are(*healthy), within=60)
            await backend.stop()  # the backend dies; the router stays up
            dead = ("healthy", "down", "unreachable")
            await eventually(lambda: are(*dead), within=60, what="the route blocked by ds4")
            by_backend = (await _status(http, url))["route"]
            await backend.start(port=port)  # repaired
            await eventually(lambda: are(*healthy), within=60, what="ds4 back")
        # the proxy stopped (its context ended); the backend is fine
        dead = ("down", "healthy", "unreachable")
        await eventually(lambda: are(*dead), within=60, what="the door down, the route blocked")
        by_router = (await _status(http, url))["route"]
        async with litellm.litellm_proxy(
            folder, {"ds4": backend.url}, master_key=KEY, port=router_port
        ) as second:
            await eventually(lambda: are(*healthy), within=60, what="the door back")
            process.terminate()  # while this proxy runs: its stop would be a new outage
            await process.wait()
    finally:
        if process is not None and process.returncode is None:
            process.terminate()
            await process.wait()
        await backend.stop()
    assert (first.trap.seen, second.trap.seen) == ([], [])
    assert by_backend["last_reason"].startswith("blocked by ds4"), by_backend
    assert by_router["last_reason"].startswith("blocked by door"), by_router
    async with await Store.open(tmp_path / "state" / "supervisor.db", create=False) as store:
        incidents = await store.incidents(limit=20)
    assert sorted((i.subject, i.is_open) for i in incidents) == [("door", False), ("ds4", False)]


def _incident(worker: EndpointWorker) -> int | None:
    return worker.record.incident_id


async def test_a_route_still_failing_once_its_backend_is_back_is_its_own_incident(
    tmp_path: Path,
) -> None:
    """UNBLOCKED: the route is blocked by its dead backend (the backend's incident only); while
    the backend is down, the router begins asking for a key the route does not send. The backend
    comes back and heals; the route still fails, its router and backend answering: after
    `failures_to_down` such failures it is down with an incident of its own, the reason its own
    (the key), never the backend's. Removing the `unblocked` wiring in the worker
    (`ProbeDiscipline._blocked_or_not`) leaves the route unreachable and this spec fails."""
    port = free_port()
    backend = VllmSim(SimBehaviour(tok_s=FAST_TOK_S), model="ds4")
    await backend.start(port=port)
    models = {"ds4": SwapModel(upstream=RunningUpstream(backend.url))}
    try:
        async with LlamaSwap(models, health_check_timeout=1) as router:
            on_forge = {"host": "forge"}
            endpoints = {
                "door": {"kind": "health", "url": f"{router.url}/health", **on_forge},
                "ds4": {"kind": "openai", "url": backend.url, "model": "ds4", **on_forge},
                "route": {
                    "kind": "openai",
                    "url": router.url,
                    "model": "ds4",
                    "via": "door",
                    "backend": "ds4",
                    **on_forge,
                },
            }
            daemon = Supervisor(load_config(write_fleet(tmp_path, endpoints)))
            await daemon.start()
            workers = daemon.workers
            route = workers["route"]

            def are(*wanted: State) -> bool:
                return tuple(workers[n].state for n in ("door", "ds4", "route")) == wanted

            try:
                await eventually(lambda: are(State.HEALTHY, State.HEALTHY, State.HEALTHY))
                await backend.stop()
                await eventually(
                    lambda: are(State.HEALTHY, State.DOWN, State.UNREACHABLE),
                    what="the route blocked by its backend",
                )
                assert _incident(route) is None
                router.api_keys = ("sk-new-router-key",)  # the route sends none
                await backend.start(port=port)
                # back: healthy, and its incident closed in the store (the worker's state
                # turns before its transition is written; a loaded run read the store between)
                ds4 = workers["ds4"]
                await eventually(
                    lambda: ds4.state is State.HEALTHY and _incident(ds4) is None,
                    what="the backend back",
                )
                await eventually(
                    lambda: _incident(route) is not None, what="the route's own incident"
                )
                store = daemon.store
                assert store is not None
                incidents = await store.incidents(limit=20)
                rows = await store.timeline(_incident(route) or 0)
            finally:
                await daemon.stop()
    finally:
        await backend.stop()
    assert [(i.subject, i.is_open) for i in incidents] == [("route", True), ("ds4", False)]
    first = rows[0].record
    assert isinstance(first, Transition)
    assert (first.source, first.dest, first.trigger) == ("unreachable", "down", "unblocked")
    refused = "the server asks for a key (HTTP 401): set endpoints.route.api_key_file"
    assert first.note == f"its router and backend answer: {refused}"
    assert incidents[0].cause == refused

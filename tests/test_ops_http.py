"""/metrics, /healthz and /status from a live in-process daemon: a real vLLM-shaped server on
loopback, a real SQLite store, /metrics parsed with prometheus_client's own parser."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fleet_lab.vllm_sim.server import VllmSim
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.core.events import Stop
from supervisor.core.tls import default_tls
from supervisor.judge.machine import State
from supervisor.tell.web.listen import ListenError, parse_listen
from tests.helpers import eventually, write_fleet


async def _daemon(tmp_path: Path, sim: VllmSim) -> Supervisor:
    path = write_fleet(
        tmp_path,
        {
            "llm": {"kind": "openai", "url": sim.url, "model": "sim-model", "host": "forge"},
            "web": {"kind": "health", "url": "http://127.0.0.1:1/health", "host": "forge"},
        },
    )
    document = yaml.safe_load(path.read_text())
    document["http"] = {"listen": "127.0.0.1:0"}
    path.write_text(yaml.safe_dump(document))
    daemon = Supervisor(load_config(path))
    await daemon.start()
    return daemon


async def test_metrics_parse_and_show_every_endpoint(tmp_path: Path, sim: VllmSim) -> None:
    daemon = await _daemon(tmp_path, sim)
    try:
        await eventually(lambda: daemon.workers["llm"].state is State.HEALTHY, what="healthy")
        assert daemon.store is not None
        attempt = await daemon.store.start_attempt(
            endpoint="llm", rule_id="cold-start", incident_id=None, at=daemon.clock.now()
        )
        await daemon.store.finish_attempt(attempt, at=daemon.clock.now(), outcome="fixed")
        assert daemon.ops.server is not None
        async with httpx.AsyncClient(
            verify=default_tls(), base_url=daemon.ops.server.url
        ) as client:

            async def serving_time_stored() -> bool:
                """The worker is healthy in memory first; its availability counts from the
                transition the store holds (a loaded machine's write comes a moment later)."""
                text = (await client.get("/metrics")).text
                return 'fleet_endpoint_availability{endpoint="llm",window="24h"}' in text

            await eventually(serving_time_stored, what="the llm's serving time stored")
            response = await client.get("/metrics")
            assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
            families = {f.name: f for f in text_string_to_metric_families(response.text)}
            states = {
                (s.labels["endpoint"], s.labels["state"]): s.value
                for s in families["fleet_endpoint_state"].samples
            }
            assert {e for e, _ in states} == {"llm", "web"}
            assert states[("llm", "healthy")] == 1
            assert states[("llm", "down")] == 0
            remediations = families["fleet_remediations"].samples
            assert [(s.labels, s.value) for s in remediations] == [
                ({"rule": "cold-start", "result": "fixed"}, 1.0)
            ]
            assert families["fleet_supervisor_up"].samples[0].value == 1
            ttft = {s.labels["endpoint"] for s in families["fleet_endpoint_ttft_seconds"].samples}
            assert ttft == {"llm"}
            available = {
                (s.labels["endpoint"], s.labels["window"]): s.value
                for s in families["fleet_endpoint_availability"].samples
            }
            assert [available[("llm", w)] for w in ("24h", "7d", "30d")] == [1.0, 1.0, 1.0]
            status = (await client.get("/status")).json()
            assert [e["name"] for e in status["endpoints"]] == ["llm", "web"]
            assert status["endpoints"][0]["state"] == "healthy"
            assert status["doctor"] is None  # no `doctor` run yet
            healthz = await client.get("/healthz")
            assert (healthz.status_code, healthz.text) == (200, "ok\n")
            daemon.workers["web"].submit(Stop(endpoint="web", at=daemon.clock.now()))
            assert daemon.daemon is not None
            (web,) = daemon.daemon.worker_tasks("web")
            await eventually(web.done, what="web's worker ended")
            healthz = await client.get("/healthz")
            assert (healthz.status_code, healthz.text) == (
                503,
                "unhealthy: the worker of endpoint web stopped\n",
            )
            missing = await client.get("/nope")
            assert (missing.status_code, missing.text) == (
                404,
                "not found: /nope (try /metrics, /healthz or /status)\n",
            )
            post = await client.post("/metrics")
            assert (post.status_code, post.text) == (405, "method not allowed: POST (only GET)\n")
    finally:
        await daemon.stop()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("[::1]:9464", ("::1", 9464)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
    ],
)
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["9464", ":9464", "localhost:http", "127.0.0.1:70000"])
def test_bad_listen_addresses_are_one_plain_sentence(text: str) -> None:
    with pytest.raises(ListenError) as caught:
        parse_listen(text)
    assert str(caught.value) == f"http.listen: expected HOST:PORT like 127.0.0.1:9464, got {text!r}"

"""A follower answers read-only on its own `http.listen` while it follows: /healthz and /status
name the leader, /metrics has the leadership gauges and the fleet's stored series, the control
API and the page's actions are refused naming the leader, the CLI's control commands print
that. The port changes hands between the follower's server and the leader's with no "address in
use": when the follower takes over, and when a deposed leader follows again. Real HTTP on
loopback, a real SQLite file (two instances in one process) and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import select, update

from supervisor.cli import main
from supervisor.cli.status import collect
from supervisor.config.loader import load_config
from supervisor.core.tls import default_tls
from supervisor.record.store.lease import claim
from supervisor.record.store.records import Snapshot, SubjectKind
from supervisor.record.store.schema import leader_lease
from supervisor.record.store.store import Store
from supervisor.record.store.who_leads import LeaderView
from supervisor.tell.web.follower import FollowerServer
from supervisor.tell.web.stored import StoredFleet, health_text, leader_words
from tests.helpers import eventually, write_fleet
from tests.pgserver import PgServer
from tests.ports import free_port
from tests.test_leadership import Running

HOST = socket.gethostname()
T = 1_764_000_000_000


def _view(leader: str | None, *, expires: int, epoch: int = 3) -> LeaderView:
    return LeaderView(
        leader=leader, host="forge", epoch=epoch, since_ms=T - 60_000,
        renewed_ms=expires - 15_000, expires_ms=expires, now_ms=T, me="b", my_epoch=None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("view", "words", "health"),
    [
        (
            _view("a", expires=T + 9_000),
            "a on forge leads (epoch 3)",
            "ok: following a on forge (epoch 3)",
        ),
        (  # stepped down cleanly (released): the lease view has no leader
            _view(None, expires=T - 1_000),
            "no instance leads right now",
            "ok: following; no instance leads right now",
        ),
        (  # nobody ever led
            _view(None, expires=0, epoch=0),
            "no instance leads right now",
            "ok: following; no instance leads right now",
        ),
        (  # run out, not taken over yet
            _view("a", expires=T - 4_200),
            "no instance leads right now (the lease of a on forge, epoch 3, ran out 4s ago)",
            "ok: following; no instance leads right now (the lease of a on forge, epoch 3, "
            "ran out 4s ago)",
        ),
    ],
)
def test_what_a_follower_says_about_who_leads(view: LeaderView, words: str, health: str) -> None:
    assert (leader_words(view), health_text(view)) == (words, health)


def _config(tmp_path: Path, instance: str, port: int, *, lease: str = "15s") -> Path:
    folder = tmp_path / instance
    folder.mkdir(exist_ok=True)
    path = write_fleet(
        folder,
        {"m": {"kind": "health", "url": f"http://127.0.0.1:{free_port()}/h", "host": "forge"}},
        http={"listen": f"127.0.0.1:{port}"},
    )
    document = yaml.safe_load(path.read_text())
    document["store"] = {"path": str(tmp_path / "shared.db"), "instance": instance, "lease": lease}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


async def _get(url: str) -> tuple[int, str]:
    async with httpx.AsyncClient(verify=default_tls()) as client:
        response = await client.get(url)
    return response.status_code, response.text


async def _role(url: str) -> str | None:
    try:
        async with httpx.AsyncClient(verify=default_tls()) as client:
            role: str | None = (await client.get(f"{url}/status")).json().get("role")
    except (httpx.TransportError, ValueError):
        return None
    return role


async def _serving(run: Running, role: str) -> None:
    await eventually(lambda: _is(run.url, role), within=20, what=f"serving as the {role}")


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Exit code and stderr (stdout carries the in-process daemons' logs)."""
    code = await asyncio.to_thread(main, list(argv))
    return code, capsys.readouterr().err.strip()


async def _metrics_while_state_holds(
    client: httpx.AsyncClient, url: str
) -> tuple[dict[str, Any], str]:
    """`/status`, and `/metrics` read while the endpoints' states it gave held: the leader may
    record a change between two reads (`m` goes down within a second of the start), so a
    `/metrics` read between two `/status` reads that agree is asked for until there is one."""
    read: tuple[dict[str, Any], str] | None = None

    async def held() -> bool:
        nonlocal read
        before = (await client.get(f"{url}/status")).json()
        metrics = (await client.get(f"{url}/metrics")).text
        after = (await client.get(f"{url}/status")).json()
        states = [[e["state"] for e in s["endpoints"]] for s in (before, after)]
        read = (after, metrics) if states[0] == states[1] else None
        return read is not None

    await eventually(held, within=20, what="a /metrics read while the states held")
    assert read is not None
    return read


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[dict[str, Running]]:
    runs = {"a": Running(_config(tmp_path, "a", free_port()))}
    await _serving(runs["a"], "leader")
    runs["b"] = Running(_config(tmp_path, "b", free_port()))
    await _serving(runs["b"], "follower")
    yield runs
    for run in runs.values():
        if not run.task.done():
            await run.end()


async def test_a_follower_names_the_leader_and_refuses_control_then_the_roles_swap(
    tmp_path: Path, pair: dict[str, Running], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = pair["a"], pair["b"]
    assert await _role(a.url) == "leader"
    assert await _get(f"{b.url}/healthz") == (200, f"ok: following a on {HOST} (epoch 1)\n")
    async with httpx.AsyncClient(verify=default_tls()) as client:
        paused = await client.post(
            f"{a.url}/control/pause", json={"why": "upgrading"}, headers={"X-Fleet-Who": "op"}
        )
        assert paused.status_code == 200  # the leader acts; b's board shows it from the store
        status, metrics = await _metrics_while_state_holds(client, b.url)
        control = await client.post(f"{b.url}/control/silence", json={"target": "m", "for": "1h"})
        board = await client.get(f"{b.url}/")
        act = await client.post(f"{b.url}/actions/silence", data={"target": "m", "for": "1h"})
        rules = await client.get(f"{b.url}/rules")
        endpoint = await client.get(f"{b.url}/endpoints/m")
    assert status["role"] == "follower"
    leadership = {k: v for k, v in status["leadership"].items() if k in _STABLE}
    assert leadership == {
        "leader": "a", "host": HOST, "epoch": 1, "current": True, "this_instance": "b",
        "leading": False,
    }  # fmt: skip
    assert [e["name"] for e in status["endpoints"]] == ["m"]
    assert 'fleet_supervisor_leader{instance="b"} 0.0\n' in metrics
    assert "fleet_supervisor_leader_epoch 1.0\n" in metrics
    state = status["endpoints"][0]["state"]
    assert f'fleet_endpoint_state{{endpoint="m",state="{state}"}} 1.0\n' in metrics
    refusal = f"this instance follows: a on {HOST} leads (epoch 1)"
    assert (control.status_code, control.json()) == (
        503,
        {"ok": False, "code": "refused", "text": f"{refusal}; send control requests there",
         "subjects": []},
    )  # fmt: skip
    assert board.status_code == 200
    assert f'<p class="following" id="following">{refusal}: this page is read-only</p>' in (
        board.text
    )
    assert 'action="/actions/' not in board.text  # no action forms
    assert "<li>paused <b>everything</b> by op (http): upgrading</li>" in board.text
    assert act.status_code == 503
    assert f"{refusal}; act on the leader&#39;s page" in act.text
    assert rules.status_code == 200
    assert endpoint.status_code == 200
    assert "· <b>automatic action is paused</b></p>" in endpoint.text
    config = str(b.gate.config.source)
    assert await _cli(capsys, "--config", config, "silence", "m", "--for", "1h") == (
        2,
        f"fleet-supervisor: {refusal}; send control requests there",
    )
    assert await _cli(capsys, "--config", config, "silences") == (
        2,
        f"fleet-supervisor: {refusal}; send control requests there",
    )
    # a stops: b takes over and its leader's server binds the port its follower's held
    await a.end()
    await eventually(lambda: _is(b.url, "leader"), within=10, what="b serving as the leader")
    async with httpx.AsyncClient(verify=default_tls()) as client:
        status = (await client.get(f"{b.url}/status")).json()
    assert (status["leadership"]["leader"], status["leadership"]["epoch"]) == ("b", 2)
    # a again: it follows b
    pair["a"] = a = Running(_config(tmp_path, "a", int(a.url.rsplit(":", 1)[1])))
    await eventually(lambda: _is(a.url, "follower"), within=20, what="a serving as a follower")
    assert await _get(f"{a.url}/healthz") == (200, f"ok: following b on {HOST} (epoch 2)\n")


_STABLE = ("leader", "host", "epoch", "current", "this_instance", "leading")


async def _is(url: str, role: str) -> bool:
    return await _role(url) == role


async def test_a_deposed_leader_serves_as_a_follower_again_on_its_port(tmp_path: Path) -> None:
    a = Running(_config(tmp_path, "a", free_port(), lease="1500ms"))
    try:
        await eventually(lambda: _is(a.url, "leader"), within=20, what="a serving as the leader")
        async with (
            await Store.open(tmp_path / "shared.db") as store,
            store.tx(write=True) as conn,
        ):  # x took the lease (as after a long freeze)
            await conn.execute(
                update(leader_lease).values(
                    epoch=leader_lease.c.epoch + 1, holder="x", host="elsewhere",
                    expires_ms=leader_lease.c.expires_ms + 3_600_000,
                )
            )  # fmt: skip
            # the epoch x holds: a's lease may have lapsed and been claimed again by a before
            # (a loaded run: 1.5 s unrenewed), so not always 2
            epoch = (await conn.execute(select(leader_lease.c.epoch))).scalar_one()
        await eventually(lambda: _is(a.url, "follower"), within=10, what="a following again")
        said = f"ok: following x on elsewhere (epoch {epoch})\n"
        assert await _get(f"{a.url}/healthz") == (200, said)
    finally:
        await a.end()


def _pg_config(tmp_path: Path, url: str) -> Path:
    path = write_fleet(
        tmp_path,
        {
            "m": {"kind": "health", "url": "http://127.0.0.1:9/h", "host": "spark"},
            "n": {"kind": "health", "url": "http://127.0.0.1:9/n", "host": "spark"},
        },
        hosts={"spark": {"address": "127.0.0.1", "user": "fleet"}},
        http={"listen": f"127.0.0.1:{free_port()}"},
    )
    document = yaml.safe_load(path.read_text())
    document["store"] = {"url": url, "instance": "b"}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


AT = datetime(2026, 11, 25, 9, 0, tzinfo=UTC)


async def test_on_postgresql_the_status_is_the_stored_one_and_a_dead_store_is_said(
    tmp_path: Path, pg_server: PgServer
) -> None:
    target = pg_server.database()
    config = load_config(_pg_config(tmp_path, target.url))
    store = await Store.open(target)
    try:
        async with store.tx(write=True) as conn:
            await claim(conn, holder="a", host="forge", epoch=None, lease_ms=600_000)
        await store.save_snapshot(_snapshot(SubjectKind.ENDPOINT, "m", "down", "refused"))
        await store.save_snapshot(_snapshot(SubjectKind.HOST, "spark", "unreachable", "timeout"))
        fleet = StoredFleet(config, store, me="b")
        server = FollowerServer(fleet, listen=config.http.listen, started_at=AT)
        await server.start()
        try:
            await _served(server.url, config, pg_server)
        finally:
            await server.stop()
    finally:
        await store.close()


def _snapshot(kind: SubjectKind, name: str, state: str, reason: str) -> Snapshot:
    return Snapshot(
        kind=kind, name=name, state=state, since=AT, last_reason=reason, fail_streak=3,
        updated_at=AT + timedelta(seconds=5),
    )  # fmt: skip


async def _served(url: str, config: Any, pg_server: PgServer) -> None:
    assert await _get(f"{url}/healthz") == (200, "ok: following a on forge (epoch 1)\n")
    async with httpx.AsyncClient(verify=default_tls()) as client:
        status = (await client.get(f"{url}/status")).json()
        metrics = (await client.get(f"{url}/metrics")).text
    expected = await collect(config)  # what `status --json` says
    assert status["role"] == "follower"
    assert status["hosts"] == expected["hosts"]
    assert status["endpoints"] == expected["endpoints"]  # m stored, n never: unknown
    assert [(e["state"], e["since"]) for e in status["endpoints"]] == [
        ("down", "2026-11-25T09:00:00Z"),
        ("unknown", None),
    ]
    expected["leadership"].pop("line")
    assert {k: v for k, v in status["leadership"].items() if k != "this_instance"} == {
        k: v for k, v in expected["leadership"].items() if k != "this_instance"
    }
    assert status["leadership"]["this_instance"] == "b"
    samples = _samples(metrics)
    assert {name: samples[name] for name in _PG_SERIES} == _PG_SERIES
    pg_server.stop()
    try:
        code, body = await _get(f"{url}/healthz")
        assert code == 503
        assert body.startswith("unhealthy: the store does not answer: "), body
        code, body = await _get(f"{url}/status")
        assert (code, body.split(":")[0]) == (503, "unhealthy")
    finally:
        pg_server.start()
    await eventually(
        lambda: _healthy(url), within=20, what="the follower answering once the store is back"
    )


_PG_SERIES = {
    'fleet_endpoint_state{endpoint="m",state="down"}': 1.0,
    'fleet_endpoint_state{endpoint="m",state="healthy"}': 0.0,
    'fleet_endpoint_fail_streak{endpoint="m"}': 3.0,
    'fleet_endpoint_incident_open{endpoint="m"}': 0.0,
    'fleet_host_reachable{host="spark"}': 0.0,
    "fleet_incidents_open": 0.0,
    'fleet_supervisor_leader{instance="b"}': 0.0,
    "fleet_supervisor_leader_epoch": 1.0,
    "fleet_supervisor_start_time_seconds": AT.timestamp(),
    "fleet_supervisor_up": 1.0,
}


def _samples(metrics: str) -> dict[str, float]:
    """The exposition's samples: series -> value."""
    pairs = (line.rsplit(" ", 1) for line in metrics.splitlines() if not line.startswith("#"))
    return {series: float(value) for series, value in pairs}


async def _healthy(url: str) -> bool:
    return (await _get(f"{url}/healthz"))[0] == 200

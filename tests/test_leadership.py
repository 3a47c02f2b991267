"""Two instances in one process on one store (a SQLite file here; the chaos specs run real
processes on PostgreSQL): the first leads and says so in /status and /metrics, the second
follows; a clean stop releases the lease and the follower leads at once. What the new leader
says in Telegram."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from supervisor.app.leader.elector import Me
from supervisor.app.leader.gate import Gate
from supervisor.app.leader.words import takeover_text
from supervisor.app.root import Supervisor
from supervisor.config import load_config
from supervisor.record.store import Store
from supervisor.record.store.lease import Lease, journal
from tests.conftest import free_port
from tests.helpers import eventually, write_fleet


def _config(tmp_path: Path, instance: str, port: int) -> Path:
    folder = tmp_path / instance
    folder.mkdir()
    path = write_fleet(
        folder,
        {"m": {"kind": "health", "url": f"http://127.0.0.1:{free_port()}/h"}},
        http={"listen": f"127.0.0.1:{port}"},
    )
    document = yaml.safe_load(path.read_text())
    document["store"] = {"path": str(tmp_path / "shared.db"), "instance": instance}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


class Running:
    def __init__(self, path: Path) -> None:
        config = load_config(path)
        self.gate = Gate(config, lambda: Supervisor(config))
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.gate.run(self.stop))
        self.url = f"http://{config.http.listen}"

    async def end(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 30)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Running, Running]]:
    a = Running(_config(tmp_path, "a", free_port()))
    await eventually(lambda: a.gate.supervisor is not None, within=20, what="a leading")
    b = Running(_config(tmp_path, "b", free_port()))
    await eventually(
        lambda: b.gate.elector is not None and b.gate.elector.seen is not None,
        within=20,
        what="b following",
    )
    yield a, b
    for run in (a, b):
        if not run.task.done():
            await run.end()


async def test_the_leader_says_so_and_a_clean_stop_hands_over_at_once(
    tmp_path: Path, pair: tuple[Running, Running]
) -> None:
    a, b = pair
    assert b.gate.supervisor is None  # b runs nothing while it follows
    async with httpx.AsyncClient() as client:
        await eventually(lambda: _answers(client, a.url), within=20, what="a's HTTP")
        status = (await client.get(f"{a.url}/status")).json()["leadership"]
        metrics = (await client.get(f"{a.url}/metrics")).text
    assert (status["leader"], status["epoch"], status["leading"], status["this_instance"]) == (
        "a",
        1,
        True,
        "a",
    )
    assert 'fleet_supervisor_leader{instance="a"} 1.0\n' in metrics
    assert "fleet_supervisor_leader_epoch 1.0\n" in metrics
    await a.end()
    await eventually(lambda: b.gate.supervisor is not None, within=5, what="b leading at once")
    async with await Store.open(tmp_path / "shared.db") as store, store.tx(write=False) as conn:
        events = [(e.epoch, e.holder, e.event, e.detail) for e in await journal(conn)]
    assert events[0] == (1, "a", "took_over", "first lease")
    assert events[1] == (1, "a", "released", "stopped")
    assert events[2][:3] == (2, "b", "took_over")
    assert events[2][3] == f"from a on {socket.gethostname()} (epoch 1, released)"


async def _answers(client: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await client.get(f"{url}/healthz")).status_code in (200, 503)
    except httpx.TransportError:
        return False


def _lease(holder: str, epoch: int, *, renewed: int, released: bool = False) -> Lease:
    return Lease(
        epoch=epoch, holder=holder, host=f"{holder}-box", acquired_ms=0, renewed_ms=renewed,
        expires_ms=renewed + 15_000, released=released, now_ms=renewed,
    )  # fmt: skip


T = 1_764_000_000_000  # 2025-11-24 16:00:00 UTC


@pytest.mark.parametrize(
    ("previous", "text"),
    [
        (None, None),  # the first lease: nothing to say
        (_lease("a", 1, renewed=T - 20_000, released=True), None),  # a clean stop
        (
            _lease("a", 1, renewed=T - 17_000),
            "🔁 <b>b on b-box took over</b> from a on a-box after 17s without a heartbeat "
            "(epoch 2)",
        ),
        (
            _lease("b", 1, renewed=T - 125_000),
            "🔁 <b>supervisor was down</b> from 2025-11-24 15:57:55 UTC to "
            "2025-11-24 16:00:00 UTC (2m5s); b on b-box leads again (epoch 2)",
        ),
    ],
)
def test_what_the_new_leader_says(previous: Lease | None, text: str | None) -> None:
    won = Lease(
        epoch=2, holder="b", host="b-box", acquired_ms=T, renewed_ms=T, expires_ms=T + 15_000,
        released=False, now_ms=T, mine=True, took_over=True, previous=previous,
    )  # fmt: skip
    assert takeover_text(won, Me(holder="b", host="b-box")) == text


async def test_a_failed_start_is_tried_again_not_fatal(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "a", free_port()))
    made: list[Supervisor] = []

    class FailsFirst(Supervisor):
        async def start(self) -> None:
            if len(made) == 1:
                raise RuntimeError("the store went away mid-start")
            await super().start()

    def make() -> Supervisor:
        made.append(FailsFirst(config))
        return made[-1]

    gate = Gate(config.model_copy(update={"store": config.store.model_copy(
        update={"lease": timedelta(seconds=0.6)})}), make)  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(gate.run(stop))
    try:
        await eventually(
            lambda: len(made) == 2 and made[1].daemon is not None,
            within=20,
            what="a second term after the failed start",
        )
        assert gate.terms == 2
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert task.exception() is None

"""The daemon as a real process: SIGKILL in the middle of an incident loses nothing and opens no
duplicate; SIGTERM stops it cleanly."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.record.store.errors import StoreError
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.store import Store
from tests.helpers import eventually, spawn_daemon, write_fleet

pytestmark = pytest.mark.slow


@pytest.fixture
async def vllm() -> AsyncIterator[VllmSim]:
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="m", flavour="vllm")
    await sim.start("127.0.0.1", 0)
    yield sim
    await sim.stop()


async def _state(db: Path, name: str) -> tuple[str, int | None]:
    try:
        store = await Store.open(db, create=False)
    except StoreError:  # the daemon has not created it yet
        return ("", None)
    try:
        snap = await store.snapshot(SubjectKind.ENDPOINT, name)
    finally:
        await store.close()
    return ("", None) if snap is None else (snap.state, snap.incident_id)


async def test_sigkill_mid_incident_then_restart_keeps_the_one_incident(
    tmp_path: Path, vllm: VllmSim
) -> None:
    config = write_fleet(tmp_path, {"m": {"kind": "openai", "url": vllm.url, "model": "m"}})
    db, log = tmp_path / "state" / "supervisor.db", tmp_path / "daemon.log"
    port = int(vllm.url.rsplit(":", 1)[1])
    first = await spawn_daemon(config, log)
    try:
        await eventually(lambda: _is(db, "healthy"), within=20, what="healthy")
        await vllm.stop()
        await eventually(lambda: _is(db, "down"), within=20, what="down")
        _, incident_id = await _state(db, "m")
        assert incident_id is not None
    finally:
        first.kill()  # SIGKILL: no chance to tidy up
        await first.wait()
    assert first.returncode == -signal.SIGKILL

    second = await spawn_daemon(config, log)
    try:
        # the restarted daemon resumes the open incident while the endpoint is still down ...
        store = await Store.open(db, create=False)
        try:
            before = await store.samples("m", limit=1)
            await eventually(
                lambda: _newer_sample(db, before[0].id if before else 0),
                within=20,
                what="a probe by the restarted daemon",
            )
            assert await _state(db, "m") == ("down", incident_id)
            # ... and closes that same incident when the endpoint is back
            await vllm.start("127.0.0.1", port)
            await eventually(lambda: _is(db, "healthy"), within=20, what="healthy again")
            incidents = await store.incidents(subject="m")
        finally:
            await store.close()
        assert [(i.id, i.is_open) for i in incidents] == [(incident_id, False)]
    finally:
        second.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(second.wait(), timeout=15)
    assert code == 0, log.read_text()[-2000:]


async def _is(db: Path, state: str) -> bool:
    return (await _state(db, "m"))[0] == state


async def _newer_sample(db: Path, last_id: int) -> bool:
    store = await Store.open(db, create=False)
    try:
        rows = await store.samples("m", limit=1)
    finally:
        await store.close()
    return bool(rows) and rows[0].id > last_id

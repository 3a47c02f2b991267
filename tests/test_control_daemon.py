"""The control commands against the daemon as a real process: a silence and a pause set from the
CLI hold after SIGTERM and a new start; with no daemon running the CLI says so."""

from __future__ import annotations

import asyncio
import getpass
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.cli import main
from supervisor.core.httpclient import HttpClient
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.store import Store
from tests.helpers import eventually, spawn_daemon, write_fleet
from tests.ports import free_port
from tests.warmstart import WarmProcess

pytestmark = pytest.mark.slow


@pytest.fixture
async def vllm() -> AsyncIterator[VllmSim]:
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="m", flavour="vllm")
    await sim.start("127.0.0.1", 0)
    yield sim
    await sim.stop()


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


async def _answers(url: str) -> bool:
    try:
        async with HttpClient() as client:
            return (await client.get(f"{url}/healthz")).status_code == 200
    except aiohttp.ClientError:
        return False


async def _state(db: Path) -> str:
    async with await Store.open(db, create=False) as store:
        snapshot = await store.snapshot(SubjectKind.ENDPOINT, "ds4")
    return snapshot.state if snapshot is not None else ""


async def _stop(daemon: WarmProcess, log: Path) -> None:
    daemon.send_signal(signal.SIGTERM)
    code = await asyncio.wait_for(daemon.wait(), timeout=15)
    assert code == 0, log.read_text()[-2000:]  # noqa: ASYNC240 - only when it failed


async def test_a_silence_and_a_pause_survive_a_restart_of_the_daemon(
    tmp_path: Path, vllm: VllmSim, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    config = write_fleet(
        tmp_path,
        {"ds4": {"kind": "openai", "url": vllm.url, "model": "m"}},
        http={"listen": f"127.0.0.1:{port}"},
    )
    db, log, url = (
        tmp_path / "state" / "supervisor.db",
        tmp_path / "daemon.log",
        f"http://127.0.0.1:{port}",
    )
    c = ("--config", str(config))
    me = getpass.getuser()
    first = await spawn_daemon(config, log)
    try:
        await eventually(lambda: _answers(url), within=20, what="the daemon's HTTP")
        await eventually(lambda: _is(db, "healthy"), within=20, what="healthy")
        assert await _cli(capsys, *c, "silence", "ds4", "--for", "2h", "--why", "disk swap") == (
            0,
            "silenced ds4 for 2h: nothing is acted on until then",
            "",
        )
        assert await _cli(capsys, *c, "pause", "--why", "upgrading") == (
            0,
            "automatic action is paused: /resume to resume",
            "",
        )
        assert await _cli(capsys, *c, "silence", "ds4", "--for", "1h") == (
            1,
            "",
            "fleet-supervisor: ds4 is already silenced: /unsilence it first",
        )
    finally:
        await _stop(first, log)
    assert await _cli(capsys, *c, "resume") == (
        2,
        "",
        f"fleet-supervisor: no daemon answers on {url} (connection refused): is `fleet-supervisor "
        f"run` running with {config}?",
    )
    second = await spawn_daemon(config, log)
    try:
        await eventually(lambda: _answers(url), within=20, what="the daemon's HTTP again")
        code, listing, _ = await _cli(capsys, *c, "silences")
        lines = listing.splitlines()
        assert code == 0
        assert lines[0].startswith("silence #1 ds4 until ")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", lines[0].split()[4])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", lines[1].split()[3])
        assert lines[0].endswith(f" by {me}: disk swap")
        assert lines[1].startswith("paused fleet-wide since ")
        assert lines[1].endswith(f" by {me}: upgrading")
        assert await _state(db) == "maintenance"
        assert await _cli(capsys, *c, "ack", "99") == (2, "", "fleet-supervisor: no incident 99")
        assert await _cli(capsys, *c, "restart", "nope") == (
            2,
            "",
            "fleet-supervisor: no endpoint 'nope' (endpoints: ds4)",
        )
        assert await _cli(capsys, *c, "resume") == (0, "automatic action is on again", "")
        assert await _cli(capsys, *c, "unsilence", "ds4") == (
            0,
            "unsilenced ds4: it is judged afresh",
            "",
        )
        await eventually(lambda: _is(db, "healthy"), within=20, what="healthy after the silence")
        assert await _cli(capsys, *c, "silences") == (0, "no silences, no pauses", "")
    finally:
        await _stop(second, log)


async def _is(db: Path, state: str) -> bool:
    try:
        return await _state(db) == state
    except Exception:  # the daemon has not created the store yet
        return False


def test_the_control_commands_need_the_daemons_http(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_fleet(tmp_path, {"ds4": {"kind": "openai", "url": "http://x:1", "model": "m"}})
    assert main(["--config", str(config), "pause"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"fleet-supervisor: no daemon to ask: http is disabled in {config} (http.enabled: false); "
        "the control commands reach the daemon through it"
    )

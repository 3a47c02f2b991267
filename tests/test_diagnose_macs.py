"""`fleet-supervisor diagnose kimi --dry-run` on a launchd host: the shipped playbook, a real
Kimi-shaped HTTP server on loopback, and this machine standing in for the Mac (a `local: true`
host with `service_manager: launchd`, macOS's tools replaced by the stand-ins of
tests/macfakes.py). The plan lists the exact `launchctl` commands in order, changing nothing."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests import warmstart
from tests.helpers import write_fleet
from tests.macfakes import MacTools, mac_tools
from tests.ports import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
MODELS = json.dumps({"object": "list", "data": [{"id": "kimi-k2.6-dq3", "object": "model"}]})
JOB = "gui/501/com.fleet.mlx-kimi"


async def zombie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """mlx_lm after its generation thread died: `/health` and `/v1/models` answer at once, a
    completion is read and never answered."""
    try:
        request = await reader.readuntil(b"\r\n\r\n")
        path = request.split(b" ", 2)[1].decode()
        if path.startswith("/v1/chat/completions"):
            await reader.read()  # never answered: until the client gives up and hangs up
            return
        body = MODELS if path.startswith("/v1/models") else '{"status": "ok"}'
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
        writer.write(f"{head}\r\nConnection: close\r\n\r\n{body}".encode())
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def kimi_port() -> AsyncIterator[int]:
    port = free_port()
    server = await asyncio.start_server(zombie, "127.0.0.1", port)
    async with server:
        yield port


async def diagnose(tmp_path: Path, port: int, tools: MacTools) -> tuple[int, list[str]]:
    unit = {
        "host": "m3ultra",
        "unit": "com.fleet.mlx-kimi",
        "domain": "gui/501",
        "plist": "~/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
    }
    endpoint = {
        "kind": "openai",
        "url": f"http://127.0.0.1:{port}",
        "model": "kimi-k2.6-dq3",
        "units": [unit],
    }
    config = write_fleet(
        tmp_path,
        {"kimi": endpoint},
        hosts={"m3ultra": {"local": True, "service_manager": "launchd"}},
        playbook=str(REPO / "playbooks"),
    )
    env = {
        **os.environ,
        "PATH": f"{tools.bin}:{os.environ['PATH']}",
        "FLEET_TEST_LAUNCHD": str(tools.state),
        "HOME": "/Users/milo",
    }
    done = await warmstart.run_async(
        ["--config", str(config), "diagnose", "kimi", "--dry-run"], timeout=60, env=env
    )
    return done.returncode, [*done.stdout.splitlines(), *done.stderr.splitlines()]


def plan(lines: list[str]) -> list[str]:
    start = next(index for index, line in enumerate(lines) if line.startswith("plan ("))
    return lines[start:]


async def test_a_zombie_mlx_lm_gets_term_then_kickstart(tmp_path: Path, kimi_port: int) -> None:
    tools = mac_tools(tmp_path / "mac")
    tools.job(os.getpid(), port=kimi_port)  # this test process serves the port, as the job
    tools.log("2026-11-24 21:14:02,118 - INFO - Starting httpd at 0.0.0.0 on port 8013...\n")
    code, lines = await diagnose(tmp_path, kimi_port, tools)
    assert code == 0, "\n".join(lines)
    assert lines[0] == "probed now: down (timed out after 1s)"
    assert lines[1] == "kimi (down): mlx-zombie matched on com.fleet.mlx-kimi@m3ultra"
    assert plan(lines) == [
        "plan (auto mode, 2 steps, runbook runbooks/mlx-zombie.md):",
        "  1. stop_job_gracefully on kimi",
        f"       [m3ultra] kill -s TERM {os.getpid()}",
        "  2. start_units on kimi",
        f"       [m3ultra] launchctl kickstart {JOB}",
        "nothing was changed (dry run)",
    ]
    # only reads ran: the job is still loaded, nothing was booted out, kicked or killed
    assert {call.split()[0] for call in tools.calls()} == {"print"}


async def test_a_booted_out_job_is_bootstrapped_from_its_plist_then_kickstarted(
    tmp_path: Path,
) -> None:
    tools = mac_tools(tmp_path / "mac")
    code, lines = await diagnose(tmp_path, free_port(), tools)  # nothing listens
    assert code == 0, "\n".join(lines)
    assert lines[0] == "probed now: down (connection refused)"
    assert lines[1] == "kimi (down): launchd-job-dead matched on com.fleet.mlx-kimi@m3ultra"
    assert plan(lines) == [
        "plan (auto mode, 1 steps, runbook runbooks/launchd-job-dead.md):",
        "  1. start_units on kimi",
        "       [m3ultra] launchctl bootstrap gui/501 "
        "/Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
        f"       [m3ultra] launchctl kickstart {JOB}",
        "nothing was changed (dry run)",
    ]
    assert not (tools.state / "loaded").exists()

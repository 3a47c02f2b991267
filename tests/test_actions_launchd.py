"""The unit actions on launchd hosts and `stop_job_gracefully`: as dry-run plans (the exact
`launchctl` lines, sudo only in the system domain) and run for real on this machine against a
`launchctl` stand-in put first on PATH (tests/macfakes.py), which keeps the job's state in files
and reports the pid of a real process the test started (`kill` and `ps` are this machine's own)."""

from __future__ import annotations

import asyncio
import os
import plistlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.tls import default_tls
from supervisor.execute.base import Executor
from supervisor.execute.local import LocalExecutor
from supervisor.playbook.actions.base import ActionContext
from supervisor.playbook.evidence.launchctl import parse_print
from tests.helpers import eventually
from tests.macfakes import MacTools, mac_tools
from tests.ports import free_port
from tests.test_actions import act, dry, plan
from tests.test_actions import context as actions_context

M3ULTRA = Host(name="m3ultra", local=True, service_manager="launchd")
M5MAX = Host(name="m5max", local=True, service_manager="launchd")
SPARK1 = Host(name="spark1", address="192.168.1.11")
KIMI_JOB = UnitRef(
    host="m3ultra",
    unit="com.fleet.mlx-kimi",
    domain="gui/501",
    plist="/Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
)
RERANK_JOB = UnitRef(
    host="m5max",
    unit="com.fleet.mlx-rerank",
    domain="system",
    plist="/Library/LaunchDaemons/com.fleet.mlx-rerank.plist",
)
OLLAMA = UnitRef(host="spark1", unit="ollama.service")
KIMI = Endpoint(
    name="kimi", kind="openai", url="http://192.168.1.10:8013", model="kimi", units=(KIMI_JOB,)
)


def context(executor: Executor, units: tuple[tuple[Host, UnitRef], ...]) -> ActionContext:
    """Every unit of Kimi's endpoint at once (`on: units`)."""
    return actions_context(executor, host=None, units=units, endpoint=KIMI)


@pytest.fixture
def launchd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MacTools:
    tools = mac_tools(tmp_path / "mac")
    monkeypatch.setenv("PATH", f"{tools.bin}:{os.environ['PATH']}")
    monkeypatch.setenv("FLEET_TEST_LAUNCHD", str(tools.state))
    return tools


KIMI_UNITS = ((M3ULTRA, KIMI_JOB),)
RERANK_UNITS = ((M5MAX, RERANK_JOB),)


@pytest.mark.parametrize(
    ("name", "units", "planned", "summary"),
    [
        ("restart_units", KIMI_UNITS,
         [("m3ultra", "launchctl kickstart -k gui/501/com.fleet.mlx-kimi")],
         "would restart com.fleet.mlx-kimi on m3ultra"),
        ("restart_units", RERANK_UNITS,
         [("m5max", "sudo -n launchctl kickstart -k system/com.fleet.mlx-rerank")],
         "would restart com.fleet.mlx-rerank on m5max"),
        ("stop_units", KIMI_UNITS,
         [("m3ultra", "launchctl bootout gui/501/com.fleet.mlx-kimi")],
         "would stop com.fleet.mlx-kimi on m3ultra"),
        ("stop_units", RERANK_UNITS,
         [("m5max", "sudo -n launchctl bootout system/com.fleet.mlx-rerank")],
         "would stop com.fleet.mlx-rerank on m5max"),
    ],
)  # fmt: skip
async def test_launchd_plans(
    name: str,
    units: tuple[tuple[Host, UnitRef], ...],
    planned: list[tuple[str, str]],
    summary: str,
) -> None:
    executor = dry()
    outcome = await act(name, context(executor, units))
    assert (outcome.ok, outcome.summary, plan(executor)) == (True, summary, planned)


async def test_start_plan_bootstraps_a_job_launchd_does_not_hold(launchd: MacTools) -> None:
    executor = dry()
    outcome = await act("start_units", context(executor, KIMI_UNITS))
    assert (outcome.ok, outcome.summary) == (True, "would start com.fleet.mlx-kimi on m3ultra")
    assert plan(executor) == [
        ("m3ultra", "launchctl bootstrap gui/501 "
                    "/Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist"),
        ("m3ultra", "launchctl kickstart gui/501/com.fleet.mlx-kimi"),
    ]  # fmt: skip
    assert launchd.calls() == ["print gui/501/com.fleet.mlx-kimi"]  # reading runs in a dry run
    assert [result.command for result in outcome.commands] == [
        "launchctl print gui/501/com.fleet.mlx-kimi",
        *(command for _, command in plan(executor)),
    ]


async def test_start_of_a_loaded_job_only_kickstarts_it(launchd: MacTools) -> None:
    launchd.job(4242)
    executor = dry()
    await act("start_units", context(executor, KIMI_UNITS))
    assert plan(executor) == [("m3ultra", "launchctl kickstart gui/501/com.fleet.mlx-kimi")]


async def test_start_expands_a_plist_under_the_macs_home(
    launchd: MacTools, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", "/Users/milo")
    unit = UnitRef(
        host="m3ultra",
        unit="com.fleet.mlx-kimi",
        domain="gui/501",
        plist="~/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
    )
    outcome = await act("start_units", context(LocalExecutor(), ((M3ULTRA, unit),)))
    assert (outcome.ok, outcome.summary) == (True, "started com.fleet.mlx-kimi on m3ultra")
    assert [result.command for result in outcome.commands] == [
        "launchctl print gui/501/com.fleet.mlx-kimi",
        "printenv HOME",
        "launchctl bootstrap gui/501 /Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
        "launchctl kickstart gui/501/com.fleet.mlx-kimi",
    ]


async def test_stop_of_a_job_already_booted_out_is_done(launchd: MacTools) -> None:
    stopped = await act("stop_units", context(LocalExecutor(), KIMI_UNITS))
    assert (stopped.ok, stopped.summary) == (True, "stopped com.fleet.mlx-kimi on m3ultra")
    assert launchd.calls() == ["bootout gui/501/com.fleet.mlx-kimi"]


async def test_a_restart_of_a_job_launchd_does_not_hold_bootstraps_it(launchd: MacTools) -> None:
    """`kickstart -k` of a job launchd has not loaded answers only `Could not find service
    "LABEL" in domain for ...`, exit 113: the restart loads it from its plist and starts it."""
    restarted = await act("restart_units", context(LocalExecutor(), KIMI_UNITS))
    assert (restarted.ok, restarted.summary) == (True, "restarted com.fleet.mlx-kimi on m3ultra")
    assert launchd.calls() == [
        "kickstart -k gui/501/com.fleet.mlx-kimi",
        "bootstrap gui/501 /Users/milo/Library/LaunchAgents/com.fleet.mlx-kimi.plist",
        "kickstart gui/501/com.fleet.mlx-kimi",
    ]
    first = restarted.commands[0]
    assert (first.exit_status, first.stderr) == (
        113,
        'Could not find service "com.fleet.mlx-kimi" in domain for user gui: 501\n',
    )
    again = await act("restart_units", context(LocalExecutor(), KIMI_UNITS))  # loaded now
    assert (again.ok, [c.command for c in again.commands]) == (
        True,
        ["launchctl kickstart -k gui/501/com.fleet.mlx-kimi"],
    )


async def test_a_restart_that_cannot_bootstrap_or_fails_otherwise_stops(
    launchd: MacTools,
) -> None:
    unit = UnitRef(host="m3ultra", unit="com.fleet.mlx-kimi", domain="gui/501")  # no plist
    outcome = await act("restart_units", context(LocalExecutor(), ((M3ULTRA, unit),)))
    assert (outcome.ok, outcome.summary) == (
        False,
        "com.fleet.mlx-kimi has no plist to bootstrap: set units[].plist",
    )
    launchd.job(4242)
    (launchd.bin / "launchctl").write_text(
        "#!/bin/bash\necho 'Operation not permitted' >&2\nexit 1\n"
    )
    refused = await act("restart_units", context(LocalExecutor(), KIMI_UNITS))
    assert (refused.ok, refused.summary) == (
        False,
        "launchctl kickstart -k gui/501/com.fleet.mlx-kimi on m3ultra failed: exit 1: "
        "Operation not permitted",
    )


async def test_units_of_two_service_managers_are_not_acted_on_together() -> None:
    units = ((SPARK1, OLLAMA), (M3ULTRA, KIMI_JOB))
    outcome = await act("restart_units", context(dry(), units))
    assert (outcome.ok, outcome.summary) == (
        False,
        "the units (ollama.service on spark1, com.fleet.mlx-kimi on m3ultra) are managed by "
        "launchd and systemd: act on them one at a time (on: unit)",
    )


async def test_a_launchd_unit_without_a_domain_is_refused() -> None:
    unit = UnitRef(host="m3ultra", unit="com.fleet.mlx-kimi")
    outcome = await act("restart_units", context(dry(), ((M3ULTRA, unit),)))
    assert (outcome.ok, outcome.summary) == (
        False,
        "com.fleet.mlx-kimi is not a launchd job (its unit has no domain)",
    )


# --- the graceful stop, with real processes ------------------------------------------------------


@pytest.fixture
async def procs() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    started: list[asyncio.subprocess.Process] = []
    yield started
    for proc in started:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def job_process(
    procs: list[asyncio.subprocess.Process], *, ignore_term: bool = False
) -> asyncio.subprocess.Process:
    trap = "trap '' TERM; " if ignore_term else ""
    proc = await asyncio.create_subprocess_exec("bash", "-c", f"{trap}exec sleep 60")
    procs.append(proc)
    await asyncio.sleep(0.2)  # bash has set its trap
    return proc


async def test_graceful_stop_plan_names_the_pid_and_the_grace(
    launchd: MacTools, procs: list[asyncio.subprocess.Process]
) -> None:
    proc = await job_process(procs)
    launchd.job(proc.pid)
    executor = dry()
    outcome = await act("stop_job_gracefully", context(executor, KIMI_UNITS), grace="90s")
    assert (outcome.ok, outcome.summary, plan(executor)) == (
        True,
        f"would send TERM to com.fleet.mlx-kimi on m3ultra (pid {proc.pid}), then KILL if it "
        "still runs after 1m30s",
        [("m3ultra", f"kill -s TERM {proc.pid}")],
    )
    assert proc.returncode is None


async def test_graceful_stop_sends_term_and_the_job_ends(
    launchd: MacTools, procs: list[asyncio.subprocess.Process]
) -> None:
    proc = await job_process(procs)
    launchd.job(proc.pid)
    outcome = await act("stop_job_gracefully", context(LocalExecutor(), KIMI_UNITS), grace="5s")
    assert (outcome.ok, outcome.summary) == (
        True,
        f"sent TERM to com.fleet.mlx-kimi on m3ultra (pid {proc.pid}); it ended",
    )
    assert await proc.wait() == -15
    assert [result.command for result in outcome.commands] == [
        "launchctl print gui/501/com.fleet.mlx-kimi",
        f"kill -s TERM {proc.pid}",
    ]


async def test_graceful_stop_kills_a_job_that_ignores_term_after_the_grace(
    launchd: MacTools, procs: list[asyncio.subprocess.Process]
) -> None:
    proc = await job_process(procs, ignore_term=True)
    launchd.job(proc.pid)
    loop = asyncio.get_running_loop()
    began = loop.time()
    outcome = await act("stop_job_gracefully", context(LocalExecutor(), KIMI_UNITS), grace="1s")
    took = loop.time() - began
    assert (outcome.ok, outcome.summary) == (
        True,
        f"sent TERM to com.fleet.mlx-kimi on m3ultra (pid {proc.pid}); it still ran after 1s "
        "and got KILL",
    )
    assert await proc.wait() == -9
    assert 1.0 <= took < 5.0
    assert [result.command for result in outcome.commands] == [
        "launchctl print gui/501/com.fleet.mlx-kimi",
        f"kill -s TERM {proc.pid}",
        f"kill -s KILL {proc.pid}",
    ]


async def test_graceful_stop_of_a_job_that_runs_nothing(launchd: MacTools) -> None:
    outcome = await act("stop_job_gracefully", context(LocalExecutor(), KIMI_UNITS))
    assert (outcome.ok, outcome.summary) == (True, "com.fleet.mlx-kimi on m3ultra runs no process")


async def test_graceful_stop_refuses_a_systemd_host() -> None:
    outcome = await act("stop_job_gracefully", context(dry(), ((SPARK1, OLLAMA),)))
    assert (outcome.ok, outcome.summary) == (
        False,
        "spark1 is not a launchd host: use stop_units",
    )


# --- a bounded restart, against the lab's launchctl stand-in and a real hung server -------------


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The lab's `launchctl` (fleet_lab.mac.launchctl: it starts and stops real processes) first
    on PATH, its job state under `tmp_path`; the job killed and booted out at the end."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "launchctl"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m fleet_lab.mac.launchctl "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.setenv("FLEET_LAB_LAUNCHD", str(tmp_path / "launchd"))
    yield tmp_path
    job = "gui/501/com.fleet.mlx-kimi"  # its program ignores TERM: KILL, then unload
    subprocess.run(["launchctl", "kill", "SIGKILL", job], check=False, capture_output=True)
    subprocess.run(["launchctl", "bootout", job], check=False, capture_output=True)


def _hung_job(folder: Path, port: int) -> Path:
    """A plist whose program is the vLLM-shaped server with a hung engine (3 requests frozen:
    its SIGTERM waits for them forever) and launchd's exit timeout at 60 s."""
    arguments = [
        sys.executable, "-m", "fleet_lab.vllm_sim", "--host", "127.0.0.1", "--port", str(port),
        "--model", "kimi", "--engine-hung", "--load-running", "3",
    ]  # fmt: skip
    document = {
        "Label": "com.fleet.mlx-kimi",
        "ProgramArguments": arguments,
        "StandardErrorPath": str(folder / "err.log"),
        "RunAtLoad": True,
        "ExitTimeOut": 60,
    }
    path = folder / "com.fleet.mlx-kimi.plist"
    path.write_bytes(plistlib.dumps(document))
    return path


def _pid() -> int:
    done = subprocess.run(
        ["launchctl", "print", "gui/501/com.fleet.mlx-kimi"], capture_output=True, text=True
    )
    return parse_print(done.stdout).pid


@pytest.mark.slow
async def test_a_restart_of_a_job_that_ignores_term_is_bounded_by_launchctl_kill(
    standin: Path,
) -> None:
    port = free_port()
    plist = _hung_job(standin, port)
    bootstrap = ["launchctl", "bootstrap", "gui/501", str(plist)]
    booted = await asyncio.to_thread(subprocess.run, bootstrap, check=False)
    assert booted.returncode == 0
    hung = _pid()
    async with httpx.AsyncClient(verify=default_tls()) as client:

        async def serving() -> bool:
            try:
                return (await client.get(f"http://127.0.0.1:{port}/v1/models")).is_success
            except httpx.HTTPError:
                return False

        await eventually(serving, what="the job to serve")
        loop = asyncio.get_running_loop()
        began = loop.time()
        outcome = await act("restart_units", context(LocalExecutor(), KIMI_UNITS), stop_within="1s")
        took = loop.time() - began
        assert (outcome.ok, outcome.summary) == (
            True,
            "restarted com.fleet.mlx-kimi on m3ultra; com.fleet.mlx-kimi on m3ultra did not "
            "stop within 1s: it was killed (SIGKILL)",
        )
        assert [(r.command, r.error) for r in outcome.commands] == [
            ("launchctl kickstart -k gui/501/com.fleet.mlx-kimi", "timed out after 1s"),
            ("launchctl kill SIGKILL gui/501/com.fleet.mlx-kimi", ""),
            ("launchctl kickstart gui/501/com.fleet.mlx-kimi", ""),
        ]
        assert took < 10, took
        assert _pid() not in (0, hung)
        await eventually(serving, what="the job to serve again")

"""Every action declares the commands it runs as root (`privileged=`): what a dry run of it
plans with `sudo -n` has one of the declared shapes, so the generated sudoers (and `doctor`'s
`sudo -l`) cover exactly what it runs. Real processes, a real dry-run executor."""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeResult
from supervisor.execute.dryrun import DryRunExecutor
from supervisor.execute.local import LocalExecutor
from supervisor.execute.shape import Shape
from supervisor.playbook.actions.base import ActionContext, ActionScope
from supervisor.playbook.actions.registry import ACTIONS
from tests.helpers import eventually

SPARK = Host(name="spark1", address="192.0.2.11", user="supervisor")
HEAD = UnitRef(host="spark1", unit="vllm-ds4-head.service", container="vllm_ds4")
DS4 = Endpoint(name="ds4", kind="openai", url="http://192.0.2.11:8000", model="m", units=(HEAD,))


async def _no_probe() -> ProbeResult:
    raise AssertionError("not probed")


#: The title of this process's stand-in worker: specs of this module run side by side on other
#: pytest workers, each with a stand-in of its own, and a pattern must find this one only.
TITLE = f"VLLM::Worker_TP0 privileges-spec-{os.getpid()}"


@pytest.fixture
async def worker() -> AsyncIterator[int]:
    """A process titled like a vLLM worker (for kill_processes to plan a signal to)."""
    proc = await asyncio.create_subprocess_exec("bash", "-c", f'exec -a "{TITLE}" "$0" 60', "sleep")
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    await eventually(lambda: cmdline.read_bytes().startswith(TITLE.encode()), what="the exec")
    yield proc.pid
    proc.kill()
    await proc.wait()


def _planned(executor: DryRunExecutor) -> list[list[str]]:
    """The planned commands that run as root (`sudo -n` and the command)."""
    found = []
    for result in executor.planned:
        argv = shlex.split(result.command)
        if argv[:2] == ["sudo", "-n"]:
            found.append(argv[2:])
    return found


@pytest.mark.parametrize(
    ("action", "params", "on_unit"),
    [
        ("restart_units", {}, False),
        ("stop_units", {}, False),
        ("start_units", {"reset_failed": False}, False),
        ("write_execstart_dropin", {"command": "/usr/bin/docker exec vllm_ds4 bash /w/x.sh"}, True),
        ("docker_restart", {}, True),
        ("docker_exec", {"argv": ["touch", "/w/flag"]}, True),
        (
            "kill_processes",
            {"pattern": f"^{TITLE} ", "signal": "TERM"},
            False,
        ),
        ("drop_page_cache", {"shm_globs": []}, False),
        ("shell", {"argv": ["systemctl", "kill", "vllm-ds4-head.service"], "sudo": True}, False),
    ],
)
async def test_what_an_action_runs_as_root_is_what_it_declares(
    worker: int, action: str, params: dict[str, Any], on_unit: bool
) -> None:
    chosen = ACTIONS[action]
    parsed = chosen.params(**params)
    units = ((SPARK, HEAD),)
    unit = HEAD if on_unit else None
    executor = DryRunExecutor(LocalExecutor())
    ctx = ActionContext(
        endpoint=DS4, host=SPARK, unit=unit, units=units, executor=executor,
        timeout=timedelta(seconds=10), facts={}, dry_run=True, clock=SystemClock(),
        probe=_no_probe,
    )  # fmt: skip
    outcome = await chosen.run(ctx, parsed)
    assert outcome.ok, outcome.summary
    declared = chosen.privileged(
        ActionScope(endpoint=DS4, host=SPARK, unit=unit, units=units), parsed
    )
    shapes: list[Shape] = [shape for host, shape in declared if host == SPARK]
    planned = _planned(executor)
    assert planned, "the dry run planned nothing as root"
    for argv in planned:
        assert any(shape.matches(argv) for shape in shapes), (argv, [s.regex() for s in shapes])


async def test_a_service_account_signals_through_the_helper_with_its_units(worker: int) -> None:
    executor = DryRunExecutor(LocalExecutor())
    ctx = ActionContext(
        endpoint=DS4, host=SPARK, unit=None, units=((SPARK, HEAD),), executor=executor,
        timeout=timedelta(seconds=10), facts={}, dry_run=True, clock=SystemClock(),
        probe=_no_probe,
    )  # fmt: skip
    kill = ACTIONS["kill_processes"]
    outcome = await kill.run(ctx, kill.params(pattern=f"^{TITLE} "))
    assert outcome.ok, outcome.summary
    assert [r.command for r in executor.planned] == [
        f"sudo -n /usr/local/libexec/fleet-supervisor/signal KILL {worker} "
        "--unit=vllm-ds4-head.service --container=vllm_ds4"
    ]

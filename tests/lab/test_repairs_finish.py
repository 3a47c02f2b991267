"""Repairs that finish, against the lab's real systemd: a stop of a hung vLLM (its SIGTERM waits
for requests the frozen engine never finishes, and the unit keeps systemd's 90 s TimeoutStopSec)
ends within the step's `stop_within` by a kill of the unit's processes; and a repair whose step
times out between the stop and the start leaves the unit started again and serving, not
stopped, before it calls a person."""

from __future__ import annotations

import asyncio
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fleet_lab.drills import faults
from fleet_lab.drills.config import ENDPOINTS, completes, install_sudoers, write_config
from fleet_lab.drills.run import settle
from fleet_lab.lab import Lab
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.config.supervised import Endpoint, UnitRef
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeResult
from supervisor.core.tls import default_tls
from supervisor.execute.ssh import SshExecutor
from supervisor.judge.machine import State
from supervisor.playbook.actions.base import ActionContext, ActionOutcome
from supervisor.playbook.actions.registry import ACTIONS
from supervisor.record.timeline.repair import Escalation, StepRan, UnitsLeft
from tests.helpers import eventually

pytestmark = pytest.mark.slow

QWEN = "vllm-qwen.service"


async def _no_probe() -> ProbeResult:
    raise AssertionError("this action must not probe")


def _hang(lab: Lab) -> str:
    """Hang the single node's engine (3 requests frozen in it) and make the server read it:
    the hung process's pid."""
    faults.inject_hung_engine(lab)
    pid = faults.qwen_main_pid(lab)
    # it reads its control file now
    httpx.get(f"{ENDPOINTS['qwen'].url}/health", verify=default_tls(), timeout=5)
    return pid


async def _act(lab: Lab, name: str, **params: Any) -> ActionOutcome:
    """Action `name` run as the lab's user, with the sudoers the shipped rules need for qwen."""
    with tempfile.TemporaryDirectory(dir=lab.folder) as folder:
        config = load_config(write_config(lab, Path(folder), endpoint="qwen"))
        await asyncio.to_thread(install_sudoers, lab, config)
    spark1 = lab.fleet_host("spark1")
    unit = UnitRef(host="spark1", unit=QWEN)
    endpoint = Endpoint(
        name="qwen", kind="openai", url=ENDPOINTS["qwen"].url, model="qwen", units=(unit,)
    )
    executor = SshExecutor()
    try:
        ctx = ActionContext(
            endpoint=endpoint,
            host=None,
            unit=None,
            units=((spark1, unit),),
            executor=executor,
            timeout=timedelta(seconds=10),
            facts={},
            dry_run=False,
            clock=SystemClock(),
            probe=_no_probe,
        )
        chosen = ACTIONS[name]
        return await chosen.run(ctx, chosen.params(**params))
    finally:
        await executor.close()


async def test_a_hung_vllm_is_stopped_within_stop_within_by_killing_its_processes(
    lab: Lab,
) -> None:
    await asyncio.to_thread(settle, lab)
    host = lab.host("spark1")
    hung = await asyncio.to_thread(_hang, lab)
    assert host.show(QWEN, "TimeoutStopUSec") == {"TimeoutStopUSec": "1min 30s"}  # the fault's
    try:
        began = time.monotonic()
        outcome = await _act(lab, "stop_units", stop_within="2s")
        took = time.monotonic() - began
        assert outcome.ok, outcome.summary
        assert outcome.summary == (
            f"stopped {QWEN} on spark1; {QWEN} on spark1 did not stop within 2s: its processes "
            "were killed (SIGKILL), it is failed/failed"
        )
        assert [c.command for c in outcome.commands] == [
            f"sudo -n systemctl stop {QWEN}",
            f"sudo -n systemctl kill --signal=SIGKILL {QWEN}",
            f"systemctl show {QWEN} -p ActiveState,SubState,MainPID --no-pager",
        ]
        assert outcome.commands[0].error == "timed out after 2s"
        assert 2 <= took < 6, took
        shown = host.show(QWEN, "ActiveState", "Result", "MainPID")
        assert shown == {"ActiveState": "failed", "Result": "signal", "MainPID": "0"}
        assert (
            "Waiting for connections to close."
            in host.nsenter("journalctl", "-u", QWEN, "--no-pager", "-n", "20").stdout
        )

        started = await _act(lab, "start_units")
        assert started.summary == f"started {QWEN} on spark1"
        assert faults.qwen_main_pid(lab) not in ("0", hung)
        await eventually(lambda: completes("qwen"), within=15, what="qwen to serve")
    finally:
        await asyncio.to_thread(faults.reset, lab)


#: A repair whose middle step times out: the unit is stopped, the step after never runs.
STUCK_RULE = """\
id: hung-stuck-mid-restart
title: the engine is hung (a restart whose middle step hangs)
severity: critical
applies_to: {kinds: [openai], states: [down]}
evidence:
  - {id: progress, collect: progress}
when:
  all:
    - {fact: progress.verdict, op: eq, value: hung}
actions:
  - {action: stop_units, params: {stop_within: 2s}}
  - {action: shell, on: hosts, params: {argv: [sleep, "30"]}}
  - action: start_units
mode: auto
budget: {attempts: 1, window: 1h}
"""


async def test_a_step_that_times_out_mid_restart_leaves_the_unit_started_again(
    lab: Lab, tmp_path: Path
) -> None:
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    (playbook / "stuck.yaml").write_text(STUCK_RULE)
    path = write_config(lab, tmp_path, playbook=playbook, endpoint="qwen")
    document = yaml.safe_load(path.read_text())
    document["remediation"]["command_timeout"] = "3s"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    await asyncio.to_thread(settle, lab)
    config = load_config(path)
    await asyncio.to_thread(install_sudoers, lab, config)
    daemon = Supervisor(config)
    await daemon.start()
    worker = daemon.workers["qwen"]
    try:
        await eventually(lambda: worker.state is State.HEALTHY, within=30, what="healthy")
        hung = await asyncio.to_thread(_hang, lab)
        await eventually(
            lambda: worker.state is State.ESCALATED, within=60, what="qwen to be escalated"
        )
        assert daemon.remediator is not None
        await daemon.remediator.wait()
        assert daemon.store is not None
        incident = worker.record.incident_id
        assert incident is not None
        records = [row.record for row in await daemon.store.timeline(incident)]
    finally:
        await daemon.stop()
    try:
        # not left stopped: the unit runs a new process again, and it serves
        shown = lab.host("spark1").show(QWEN, "ActiveState", "SubState")
        assert shown == {"ActiveState": "active", "SubState": "running"}
        now = faults.qwen_main_pid(lab)
        assert now not in ("0", hung)
        assert completes("qwen")
        steps = [r for r in records if isinstance(r, StepRan)]
        assert [(s.action, s.ok) for s in steps] == [("stop_units", True), ("shell", False)]
        assert steps[1].result == "sleep 30 on spark1 failed: timed out after 3s"
        left = next(r for r in records if isinstance(r, UnitsLeft))
        assert len(left.units) == 1
        unit = left.units[0]
        assert (unit.host, unit.unit, unit.found, unit.after_steps) == (
            "spark1",
            QWEN,
            "active/running",
            "failed/failed",
        )
        assert (unit.left, unit.started, left.verified, left.error) == (
            "active/running",
            True,
            True,
            "",
        )
        assert str(unit.pid) == now
        escalation = next(r for r in records if isinstance(r, Escalation))
        assert records.index(left) < records.index(escalation)
        assert escalation.why == (
            "step 2 (shell on spark1): sleep 30 on spark1 failed: timed out after 3s; "
            f"{QWEN}@spark1 was started again and serves"
        )
    finally:
        await asyncio.to_thread(faults.reset, lab)

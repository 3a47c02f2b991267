"""A person's restart takes the one attempt runner: the same attempt row, step entries and
verification as an automatic repair by a rule that restarts the units. Real vLLM-shaped server,
real SQLite file, real processes; `systemctl` is a script on PATH that logs its arguments (no
systemd runs here), and the test plays systemd by starting the server when it is told to."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.control.model import Code
from supervisor.core.actor import Actor, Via
from supervisor.judge.machine import State
from supervisor.record.store.records import TimelineRow
from supervisor.record.timeline.base import EntryKind
from supervisor.worker import EndpointWorker
from tests.helpers import eventually, write_fleet
from tests.ports import free_port

pytestmark = pytest.mark.slow

SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$FLEET_TEST_SYSTEMCTL_LOG"
"""

RULE = """\
id: restart-it
title: restart the units
severity: warning
applies_to: {states: [down]}
when: {all: [{fact: endpoint.state, op: eq, value: down}]}
actions:
  - action: restart_units
verify: {within: 30s}
mode: auto
"""


async def _systemd(log: Path, sim: VllmSim, port: int) -> None:
    """Start the server each time `systemctl start` was called."""
    started = 0
    while True:
        calls = await asyncio.to_thread(_lines, log)
        starts = calls.count("start vllm-m.service")
        if starts > started:
            started = starts
            await sim.start("127.0.0.1", port)
        await asyncio.sleep(0.05)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _story(rows: list[TimelineRow]) -> list[tuple[EntryKind, str]]:
    """The attempts' entries: their steps and verifications."""
    kept = (EntryKind.ACTION, EntryKind.VERIFICATION)
    return [(r.kind, r.summary) for r in rows if r.kind in kept]


def _state(worker: EndpointWorker) -> State:
    return worker.state


@pytest.mark.sudo
async def test_a_restart_records_what_an_automatic_repair_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "systemctl").write_text(SYSTEMCTL)
    (folder / "systemctl").chmod(0o755)
    calls = tmp_path / "systemctl.log"
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.setenv("FLEET_TEST_SYSTEMCTL_LOG", str(calls))
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    (playbook / "restart.yaml").write_text(RULE)
    port = free_port()
    sim = VllmSim(SimBehaviour(tok_s=2000.0), model="m")
    await sim.start("127.0.0.1", port)
    config = write_fleet(
        tmp_path,
        {
            "m": {
                "kind": "openai",
                "url": f"http://127.0.0.1:{port}",
                "model": "m",
                "units": [{"host": "forge", "unit": "vllm-m.service"}],
            }
        },
        remediation={"verify_every": "100ms"},
        playbook=str(playbook),
        startup_grace="5s",
    )
    systemd = asyncio.create_task(_systemd(calls, sim, port))
    daemon = Supervisor(load_config(config))
    await daemon.start()
    worker = daemon.workers["m"]
    assert daemon.store is not None
    assert daemon.control is not None
    alice = Actor(who="alice", via=Via.CLI)
    try:
        await eventually(lambda: _state(worker) is State.HEALTHY, within=20, what="healthy")
        # an automatic repair
        await sim.stop()
        await eventually(
            lambda: worker.record.incident_id is not None, within=20, what="an incident"
        )
        automatic = worker.record.incident_id
        await eventually(lambda: worker.record.incident_id is None, within=30, what="healed")
        # a person's restart of the same endpoint, automatic action paused
        await daemon.control.pause(actor=alice)
        await sim.stop()
        await eventually(
            lambda: worker.record.incident_id is not None, within=20, what="an incident"
        )
        by_hand = worker.record.incident_id
        await eventually(lambda: _state(worker) is State.DOWN, within=20, what="down")
        assert daemon.remediator is not None
        await daemon.remediator.wait()  # it only records that automatic action is paused
        answer = await daemon.control.restart("m", actor=alice, why="try it")
        assert (answer.code, answer.text) == (Code.DONE, "restarted m: startup grace 5s")
        await eventually(
            lambda: worker.record.incident_id is None, within=30, what="healed by hand"
        )
        await daemon.remediator.wait()
        assert automatic is not None
        assert by_hand is not None
        second = await daemon.store.timeline(by_hand)
        attempts = await daemon.store.attempts("m")
        journal = await daemon.control.journal("m")
    finally:
        await daemon.stop()
        systemd.cancel()
        await sim.stop()
    # a problem back within `reopen_within` reopens the incident: both stories are in it
    assert by_hand == automatic
    step = "step 1 restart_units on m: ok: restarted vllm-m.service on forge"
    story = _story(second)
    assert story == [
        (EntryKind.ACTION, step),
        (EntryKind.VERIFICATION, "verified: restart-it healed it"),
        (EntryKind.ACTION, step),
        (EntryKind.VERIFICATION, "verified: manual-restart healed it"),
    ]
    assert [(a.rule_id, a.outcome) for a in attempts] == [
        ("restart-it", "healed"),
        ("manual-restart", "healed"),
    ]
    assert "down -> starting: restarted by alice" in [r.summary for r in second]
    assert [(j.action, j.who, j.why, j.answer) for j in journal] == [
        ("pause", "alice", "", "automatic action is paused: /resume to resume"),
        ("restart", "alice", "try it", "restarted m: startup grace 5s"),
    ]

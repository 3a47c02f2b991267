"""Drills: inject a catalogue failure into the running lab for real, run the daemon in-process
against it, and report what it detected, diagnosed, did and verified, with the time to detect
(fault injected -> down) and the time to heal (down -> healthy).

Each drill settles the lab first (the pair serving a real completion), starts a `Daemon` on a
fleet config generated into the lab's folder (`drills/NAME/fleet.yaml`, a fresh store each run),
waits for `ds4` to be healthy, injects the fault, waits for the incident to open and for what the
fault expects (healed; left alone yet healthy again; escalated, then a quiet spell in which
nothing more happens), and always undoes its fault afterwards so the next drill (or test) finds a
healthy lab.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

from supervisor.config import load_config
from supervisor.daemon import Daemon
from supervisor.lab import faults
from supervisor.lab.fleet import DS4_MODEL, prepare
from supervisor.lab.lab import ADDRESSES, Lab, LabError
from supervisor.lab.report import DETECTED, DrillReport, DrillStep, first, seconds, steps_of
from supervisor.machine import State
from supervisor.store import EntryKind, SubjectKind

ENDPOINT = "ds4"
DS4_URL = f"http://{ADDRESSES['spark1']}:8000"
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks"
SETTLE_WITHIN_S = 40.0
DRILL_WITHIN_S = 60.0
#: After an escalation: how long nothing more must happen (several probe rounds).
QUIET_S = 3.0

__all__ = ["DrillReport", "DrillStep", "run_drill", "settle", "write_config"]


def write_config(
    lab: Lab, folder: Path, *, playbook: Path = PLAYBOOK, startup_grace: str = "20s"
) -> Path:
    """A fleet config for the lab in `folder` (store in `folder/state`): the DeepSeek pair `ds4`,
    spark1/spark2 over SSH with the lab's key, short probes, remediation for real."""
    hosts: dict[str, object] = {"forge": {"local": True}}
    for name in ADDRESSES:
        host = lab.fleet_host(name)
        hosts[name] = {
            "address": host.address,
            "port": host.port,
            "user": host.user,
            "key": str(host.key),
            "known_hosts": str(host.known_hosts),
        }
    units = [
        {"host": h, "unit": u, "container": faults.CONTAINER, "known_good": k}
        for h, u, k in (
            ("spark2", faults.WORKER_UNIT, faults.WORKER_SCRIPT),
            ("spark1", faults.HEAD_UNIT, faults.HEAD_SCRIPT),
        )
    ]
    document = {
        "store": {"path": "state/supervisor.db"},
        "playbook": {"path": str(playbook)},
        "http": {"enabled": False},
        "remediation": {"dry_run": False, "verify_every": "500ms"},
        "defaults": {
            "probe": {
                "liveness_interval": "500ms",
                "completion_interval": "2s",
                "failures_to_down": 2,
                "timeout": "2s",
                "jitter": "0s",
            },
            "startup_grace": startup_grace,
        },
        "hosts": hosts,
        "endpoints": {
            ENDPOINT: {
                "kind": "openai",
                "url": DS4_URL,
                "model": DS4_MODEL,
                "expect_reasoning": True,
                "units": units,
            }
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _completes() -> bool:
    body = {"model": DS4_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    try:
        reply = httpx.post(f"{DS4_URL}/v1/chat/completions", json=body, timeout=5)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


def settle(lab: Lab, within: float = SETTLE_WITHIN_S) -> None:
    """Undo every drill's fault and return once the head serves a real completion (restarting
    the pair in order once if it does not)."""
    prepare(lab)
    faults.reset(lab)
    deadline = time.monotonic() + within
    restarted = False
    while not _completes():
        if not restarted and time.monotonic() > deadline - within / 2:
            faults.restart_pair(lab)
            restarted = True
        if time.monotonic() > deadline:
            raise LabError(f"the lab's ds4 pair does not serve a completion after {within:g}s")
        time.sleep(0.2)


async def _until(predicate: Callable[[], bool], within: float, what: str) -> str:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return f"timed out after {within:g}s waiting for {what}"
        await asyncio.sleep(0.05)
    return ""


async def _escalated(daemon: Daemon, within: float) -> str:
    """Wait until ds4 is escalated and the repair finished; then nothing more may happen for
    `QUIET_S` (several probe rounds): still escalated, no new repair."""
    worker = daemon.workers[ENDPOINT]
    assert daemon.remediator is not None
    problem = await _until(lambda: worker.state is State.ESCALATED, within, "ds4 to be escalated")
    if problem:
        return problem
    await daemon.remediator.wait()
    await asyncio.sleep(QUIET_S)  # the absence of action is what is checked: a fixed spell
    if worker.state is not State.ESCALATED:
        return f"ds4 left escalated within {QUIET_S:g}s: now {worker.state}"
    return ""


async def _healed(daemon: Daemon, within: float) -> str:
    worker = daemon.workers[ENDPOINT]
    assert daemon.remediator is not None
    problem = await _until(lambda: worker.incident_id is not None, within, "an incident")
    if not problem:
        healed = lambda: worker.incident_id is None and worker.state is State.HEALTHY  # noqa: E731
        problem = await _until(healed, within, "ds4 to heal")
    if not problem:
        await daemon.remediator.wait()
    return problem


async def run_drill(
    lab: Lab, name: str, *, folder: Path | None = None, within: float = DRILL_WITHIN_S
) -> DrillReport:
    """Run drill `name` against the running `lab`; its config and store go under `folder`
    (default: the lab's `drills/NAME`)."""
    fault = faults.get(name)
    folder = folder or lab.folder / "drills" / name
    shutil.rmtree(folder / "state", ignore_errors=True)
    config = load_config(write_config(lab, folder, startup_grace=fault.startup_grace))
    await asyncio.to_thread(settle, lab)
    daemon = Daemon(config)
    await daemon.start()
    worker = daemon.workers[ENDPOINT]
    incident: int | None = None
    host_incident: int | None = None
    try:
        problem = await _until(lambda: worker.state is State.HEALTHY, 30, "ds4 to be healthy")
        if problem:
            raise LabError(f"drill {name}: {problem} before the fault")
        injected = daemon.clock.now()
        await asyncio.to_thread(fault.inject, lab)
        if fault.expect is faults.Expect.ESCALATE:
            problem = await _escalated(daemon, within)
        else:
            problem = await _healed(daemon, within)
        assert daemon.store is not None
        found = await daemon.store.incidents()
        mine = [i.id for i in found if i.subject_kind is SubjectKind.ENDPOINT]
        hosts = [i.id for i in found if i.subject_kind is SubjectKind.HOST]
        incident = mine[-1] if mine else None  # newest first: the drill's first incident
        host_incident = hosts[-1] if hosts else None
        # an unreachable endpoint has no incident of its own: the host's holds its timeline
        shown = incident if incident is not None else host_incident
        timeline = await daemon.store.timeline(shown) if shown is not None else []
        attempts = await daemon.store.attempts(ENDPOINT)
        final_state = worker.state.value
    finally:
        await daemon.stop()
        await asyncio.to_thread(fault.clean, lab)
        await asyncio.to_thread(settle, lab)
    own = [r for r in timeline if r.subject == ENDPOINT]  # a host incident holds the host's too
    down = first(own, EntryKind.TRANSITION, *DETECTED)
    up = first(own, EntryKind.TRANSITION, "-> healthy")
    escalated = first(own, EntryKind.TRANSITION, "-> escalated")
    diagnosis = first(timeline, EntryKind.DIAGNOSIS)
    escalation = first(timeline, EntryKind.DECISION, "escalated: ")
    return DrillReport(
        drill=name,
        rule=fault.rule,
        incident=incident,
        diagnosis=diagnosis.summary if diagnosis else "",
        steps=steps_of(timeline),
        outcome=attempts[-1].outcome if attempts else None,
        detect_s=seconds(injected, down.at if down else None),
        heal_s=seconds(down.at if down else None, up.at if up else None),
        problem=problem,
        expect=fault.expect,
        escalate_s=seconds(down.at if down else None, escalated.at if escalated else None),
        escalation=escalation.summary.removeprefix("escalated: ") if escalation else "",
        host_incident=host_incident,
        final_state=final_state,
        attempts=len(attempts),
    )

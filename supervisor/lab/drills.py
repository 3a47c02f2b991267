"""Drills: inject a catalogue failure into the running lab for real, run the daemon in-process
against it, and report what it detected, diagnosed, did and verified, with the time to detect
(fault injected -> down) and the time to heal (down -> healthy).

Each drill settles the lab first (the pair serving a real completion), starts a `Daemon` on a
fleet config generated into the lab's folder (`drills/NAME/fleet.yaml`, a fresh store each run),
waits for `ds4` to be healthy, injects the fault, waits for the incident to open and close, and
always undoes its fault afterwards so the next drill (or test) finds a healthy lab.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import yaml

from supervisor.config import load_config
from supervisor.daemon import Daemon
from supervisor.lab import faults
from supervisor.lab.fleet import DS4_MODEL, prepare
from supervisor.lab.lab import ADDRESSES, Lab, LabError
from supervisor.machine import State
from supervisor.store import EntryKind, TimelineRow

ENDPOINT = "ds4"
DS4_URL = f"http://{ADDRESSES['spark1']}:8000"
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks"
SETTLE_WITHIN_S = 40.0
DRILL_WITHIN_S = 60.0


def write_config(lab: Lab, folder: Path, *, playbook: Path = PLAYBOOK) -> Path:
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
            "startup_grace": "20s",
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


@dataclass(frozen=True)
class DrillStep:
    summary: str
    exit_statuses: tuple[int | None, ...]


@dataclass(frozen=True)
class DrillReport:
    """What the daemon did about one injected fault."""

    drill: str
    rule: str
    incident: int | None
    diagnosis: str
    steps: tuple[DrillStep, ...]
    outcome: str | None
    detect_s: float | None
    heal_s: float | None
    problem: str = ""

    @property
    def healed(self) -> bool:
        return not self.problem and self.outcome == "healed" and self.detect_s is not None

    def lines(self) -> list[str]:
        """detected / diagnosed / acted / verified, one line each, with the two times."""
        detect = f"{self.detect_s:.1f}s" if self.detect_s is not None else "-"
        heal = f"{self.heal_s:.1f}s" if self.heal_s is not None else "-"
        acted = "; ".join(s.summary for s in self.steps) or "nothing"
        lines = [
            f"drill {self.drill}: {'healed' if self.healed else 'NOT healed'}",
            f"  detected:  incident {self.incident} after {detect}",
            f"  diagnosed: {self.diagnosis or '-'}",
            f"  acted:     {acted}",
            f"  verified:  attempt {self.outcome or '-'}; healed {heal} after it was down",
        ]
        return lines + ([f"  problem:   {self.problem}"] if self.problem else [])


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


def _first(timeline: list[TimelineRow], kind: EntryKind, text: str) -> TimelineRow | None:
    return next((r for r in timeline if r.kind is kind and text in r.summary), None)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return (end - start).total_seconds() if start and end else None


async def run_drill(
    lab: Lab, name: str, *, folder: Path | None = None, within: float = DRILL_WITHIN_S
) -> DrillReport:
    """Run drill `name` against the running `lab`; its config and store go under `folder`
    (default: the lab's `drills/NAME`)."""
    fault = faults.get(name)
    folder = folder or lab.folder / "drills" / name
    shutil.rmtree(folder / "state", ignore_errors=True)
    config = load_config(write_config(lab, folder))
    await asyncio.to_thread(settle, lab)
    daemon = Daemon(config)
    await daemon.start()
    worker = daemon.workers[ENDPOINT]
    incident: int | None = None
    try:
        problem = await _until(lambda: worker.state is State.HEALTHY, 30, "ds4 to be healthy")
        if problem:
            raise LabError(f"drill {name}: {problem} before the fault")
        injected = daemon.clock.now()
        await asyncio.to_thread(fault.inject, lab)
        problem = await _until(lambda: worker.incident_id is not None, within, "an incident")
        incident = worker.incident_id
        if not problem:
            healed = lambda: worker.incident_id is None and worker.state is State.HEALTHY  # noqa: E731
            problem = await _until(healed, within, "ds4 to heal")
        assert daemon.remediator is not None
        assert daemon.store is not None
        if not problem:
            await daemon.remediator.wait()
        timeline = await daemon.store.timeline(incident) if incident is not None else []
        attempts = await daemon.store.attempts(ENDPOINT)
    finally:
        await daemon.stop()
        await asyncio.to_thread(fault.clean, lab)
        await asyncio.to_thread(settle, lab)
    down = _first(timeline, EntryKind.TRANSITION, "-> down")
    up = _first(timeline, EntryKind.TRANSITION, "-> healthy")
    diagnosis = _first(timeline, EntryKind.DIAGNOSIS, "")
    steps = tuple(
        DrillStep(
            summary=row.summary,
            exit_statuses=tuple(
                c.get("exit_status")  # type: ignore[misc]
                for c in row.data.get("commands", [])  # type: ignore[union-attr]
                if isinstance(c, dict)
            ),
        )
        for row in timeline
        if row.kind is EntryKind.ACTION
    )
    return DrillReport(
        drill=name,
        rule=fault.rule,
        incident=incident,
        diagnosis=diagnosis.summary if diagnosis else "",
        steps=steps,
        outcome=attempts[-1].outcome if attempts else None,
        detect_s=_seconds(injected, down.at if down else None),
        heal_s=_seconds(down.at if down else None, up.at if up else None),
        problem=problem,
    )

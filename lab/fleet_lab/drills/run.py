"""Drills: inject a catalogue failure into the running lab for real, run the daemon in-process
against it, and report what it detected, diagnosed, did and verified, with the time to detect
(fault injected -> down) and the time to heal (down -> healthy).

Each drill settles the lab first (the pair serving a real completion), puts in place what its
fault needs beforehand (`Fault.prepare`: the crash loop's job reloaded with KeepAlive), starts a
`Supervisor` on a fleet config generated into the lab's folder (`drills/NAME/fleet.yaml`, a
fresh store each run) whose Telegram notifier talks to a Bot API stub the drill serves (the
daemon logs in as the lab's unprivileged user, and every host first gets the sudoers file
`fleet-supervisor sudoers --host H` generates for that config: `install_sudoers`), waits for
the drilled endpoint (`ds4`, or `qwen` for a host-script unit) to be healthy (an endpoint that
loads on demand: healthy or `idle`, its calm state while nothing is loaded; a route, its router
and its backend too), injects the fault,
waits for the incident to open and for what the fault expects (healed; left alone yet healthy
again; escalated, then a quiet spell in which nothing more happens), and always undoes its fault
afterwards so the next drill (or test) finds a healthy lab.

The daemon hears systemd too (`supervisor.hear.units`): a drill injects its fault only once every
host's unit-event stream is streaming. `run_drill(..., probe=PRODUCTION)` runs a drill with the
production intervals, where only the event path finds a death in seconds. A `busy` drill
(`saturated`) holds its fault for `hold_s` and checks that nothing was done: no attempt, the
unit's MainPID unchanged, the endpoint shown busy, a person told once.

A fault with `routes` (a router or a backend dies under a route) also watches each route from
the injection on: it must be shown blocked by the fault's endpoint (`unreachable`, `blocked by
...`), never open an incident of its own, and be healthy again once the cause healed; the report
holds every incident's subject and the attempts made anywhere but at the cause.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from pathlib import Path

from fleet_lab.drills import faults
from fleet_lab.drills.bot import DELIVER_WITHIN_S, TIMING, DrillBot
from fleet_lab.drills.config import ENDPOINTS, PROBE, completes, install_sudoers, write_config
from fleet_lab.drills.report import (
    DETECTED,
    DrillReport,
    DrillStep,
    at,
    diagnoses_of,
    first,
    seconds,
    steps_of,
)
from fleet_lab.fleet import prepare
from fleet_lab.lab import Lab, LabError
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.config.models import FleetConfig
from supervisor.core.aio import poll
from supervisor.core.streamstatus import STREAMING
from supervisor.judge.machine import State
from supervisor.record.store.records import SubjectKind
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.record.timeline.repair import Escalation
from supervisor.record.timeline.state import Transition

SETTLE_WITHIN_S = 40.0
DRILL_WITHIN_S = 60.0
#: After an escalation: how long nothing more must happen (several probe rounds).
QUIET_S = 3.0


def _last_message(fault: faults.Fault) -> str:
    """The message that ends a drill's thread: the recovery, or the call for a person."""
    if fault.expect is faults.Expect.BUSY:
        return f"🟡 <b>{fault.endpoint}</b>"
    return "🆘" if fault.expect is faults.Expect.ESCALATE else f"✅ <b>{fault.endpoint}</b>"


__all__ = ["PROBE", "DrillReport", "DrillStep", "run_drill", "settle", "write_config"]


def settle(lab: Lab, within: float = SETTLE_WITHIN_S) -> None:
    """Undo every drill's fault and return once every drilled endpoint serves a real completion
    (restarting the pair in order once if ds4 does not)."""
    prepare(lab)
    faults.reset(lab)
    deadline = time.monotonic() + within
    restarted = False
    while not all(completes(name) for name in ENDPOINTS):
        if not restarted and time.monotonic() > deadline - within / 2:
            faults.restart_pair(lab)
            restarted = True
        if time.monotonic() > deadline:
            raise LabError(f"the lab's ds4 pair does not serve a completion after {within:g}s")
        time.sleep(0.2)


async def _until(predicate: Callable[[], bool], within: float, what: str) -> str:
    if await poll(predicate, within, every=0.05):
        return ""
    return f"timed out after {within:g}s waiting for {what}"


def _queued(daemon: Supervisor) -> Callable[[], Awaitable[bool]]:
    async def queued() -> bool:
        return daemon.notifier is not None and bool(await daemon.notifier.outbox.pending())

    return queued


async def _escalated(daemon: Supervisor, name: str, within: float) -> str:
    """Wait until `name` is escalated and the repair finished; then nothing more may happen for
    `QUIET_S` (several probe rounds): still escalated, no new repair."""
    worker = daemon.workers[name]
    assert daemon.remediator is not None
    problem = await _until(
        lambda: worker.state is State.ESCALATED, within, f"{name} to be escalated"
    )
    if problem:
        return problem
    await daemon.remediator.wait()
    await asyncio.sleep(QUIET_S)  # the absence of action is what is checked: a fixed spell
    if worker.state is not State.ESCALATED:
        return f"{name} left escalated within {QUIET_S:g}s: now {worker.state}"
    return ""


async def _looked_again(daemon: Supervisor, name: str, since: datetime, within: float) -> str:
    """Escalated, its evidence changed at `since`: wait until it was diagnosed again (the
    timeline says why it stays escalated)."""
    worker = daemon.workers[name]
    store = daemon.store
    assert store is not None

    async def looked() -> bool:
        rows = await store.timeline(worker.record.incident_id or 0)
        return any(
            isinstance(r.record, Decision)
            and r.record.outcome is Outcome.STILL_ESCALATED
            and r.at >= since
            for r in rows
        )

    if await poll(looked, within, every=0.2):
        return ""
    return f"timed out after {within:g}s waiting for {name} to look at the new evidence"


async def _healed(daemon: Supervisor, name: str, within: float) -> str:
    worker = daemon.workers[name]
    assert daemon.remediator is not None
    problem = await _until(lambda: worker.record.incident_id is not None, within, "an incident")
    if not problem:
        healed = lambda: worker.record.incident_id is None and worker.state is State.HEALTHY  # noqa: E731
        problem = await _until(healed, within, f"{name} to heal")
    if not problem:
        await daemon.remediator.wait()
    return problem


async def _busy(daemon: Supervisor, name: str, within: float, until: float) -> str:
    """Shown busy within `within`, and still busy with no repair until `until` (monotonic)."""
    worker = daemon.workers[name]
    assert daemon.remediator is not None
    problem = await _until(lambda: worker.state is State.BUSY, within, f"{name} to be busy")
    if problem:
        return problem
    left = lambda: worker.state is not State.BUSY or daemon.remediator.running(name)  # noqa: E731
    if await poll(left, max(0.0, until - time.monotonic()), every=0.2):
        return f"{name} left busy before the saturation ended: {worker.state}"
    return ""


#: The states a drilled endpoint is calm in before its fault: healthy, or idle when it loads on
#: demand and nothing is loaded (no probe loads it).
CALM = (State.HEALTHY, State.IDLE)


async def _calm(daemon: Supervisor, names: list[str]) -> str:
    """Every endpoint in `names` is calm (healthy; idle if it loads on demand)."""
    workers = [daemon.workers[name] for name in names]
    return await _until(
        lambda: all(w.state in CALM for w in workers), 30, f"{', '.join(names)} to be healthy"
    )


class _Routes:
    """Watches the fault's routes from the injection on: the reason each was first shown
    blocked for (`unreachable`), and whether it ever opened an incident of its own."""

    def __init__(self, daemon: Supervisor, routes: tuple[str, ...]) -> None:
        self.workers = {name: daemon.workers[name] for name in routes}
        self.blocked: dict[str, str] = {}
        self.opened: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.workers:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            for name, worker in self.workers.items():
                if worker.state is State.UNREACHABLE and worker.record.last_reason:
                    self.blocked.setdefault(name, worker.record.last_reason)
                if worker.record.incident_id is not None:
                    self.opened.add(name)
            await asyncio.sleep(0.05)  # a poll of the workers' states: nothing signals them

    async def healthy(self, within: float) -> str:
        """Each route shown blocked before now, then healthy again within `within`."""
        never = [name for name in self.workers if name not in self.blocked]
        if never:
            return f"{', '.join(never)} never shown blocked"
        workers = self.workers.values()
        return await _until(
            lambda: all(w.state is State.HEALTHY for w in workers),
            within,
            f"{', '.join(self.workers)} to be healthy again",
        )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def _streaming(daemon: Supervisor) -> str:
    """Every host's unit-event stream is following its journal (a death is heard from now)."""
    assert daemon.daemon is not None
    events = daemon.daemon.unit_events
    return await _until(
        lambda: all(s == STREAMING for s in events.status().values()), 30, "the unit events"
    )


async def run_drill(
    lab: Lab,
    name: str,
    *,
    folder: Path | None = None,
    within: float = DRILL_WITHIN_S,
    probe: Mapping[str, object] | None = None,
) -> DrillReport:
    """Run drill `name` against the running `lab`; its config and store go under `folder`
    (default: the lab's `drills/NAME`). The daemon's Telegram notifier talks to a Bot API stub
    served for the drill; the report holds what it received about the drill's incident."""
    fault = faults.get(name)
    folder = folder or lab.folder / "drills" / name
    shutil.rmtree(folder / "state", ignore_errors=True)
    async with DrillBot(folder) as bot:
        path = write_config(
            lab,
            folder,
            startup_grace=fault.startup_grace,
            notify={**bot.notify, **fault.notify},
            endpoint=fault.endpoint,
            probe={**fault.probe, **(probe or {})},
            also=fault.routes,
        )
        config = load_config(path)
        await asyncio.to_thread(install_sudoers, lab, config)
        return await _run(lab, fault, config, bot, fault.within or within)


async def _run(
    lab: Lab, fault: faults.Fault, config: FleetConfig, bot: DrillBot, within: float
) -> DrillReport:
    await asyncio.to_thread(settle, lab)
    if fault.prepare is not None:
        await asyncio.to_thread(fault.prepare, lab)
    daemon = Supervisor(config)
    daemon.notify_timing = TIMING
    await daemon.start()
    name = fault.endpoint
    worker = daemon.workers[name]
    incident: int | None = None
    host_incident: int | None = None
    interrupted = True
    routes = _Routes(daemon, fault.routes)
    try:
        problem = await _calm(daemon, list(daemon.workers))
        problem = problem or await _streaming(daemon)
        if problem:
            raise LabError(f"drill {fault.name}: {problem} before the fault")
        pids = [await asyncio.to_thread(faults.qwen_main_pid, lab)] if name == "qwen" else []
        injected = daemon.clock.now()
        started = time.monotonic()
        routes.start()
        await asyncio.to_thread(fault.inject, lab)
        if fault.then is not None:
            problem = await _escalated(daemon, name, within)
            if problem:
                raise LabError(f"drill {fault.name}: {problem} before the evidence changed")
            changed = daemon.clock.now()
            await asyncio.to_thread(fault.then, lab)
            if fault.expect is faults.Expect.ESCALATE:
                problem = await _looked_again(daemon, name, changed, within)
        if problem:
            pass  # the evidence was looked at in vain: nothing more to wait for
        elif fault.expect is faults.Expect.ESCALATE:
            problem = await _escalated(daemon, name, within)
        elif fault.expect is faults.Expect.BUSY:
            problem = await _busy(daemon, name, within + 60, started + fault.hold_s)
        else:
            problem = await _healed(daemon, name, within)
        if not problem and fault.routes:
            problem = await routes.healthy(within)
        held = time.monotonic() - started
        if pids:
            pids.append(await asyncio.to_thread(faults.qwen_main_pid, lab))
        assert daemon.store is not None
        found = await daemon.store.incidents()
        mine = [i.id for i in found if i.subject_kind is SubjectKind.ENDPOINT]
        hosts = [i.id for i in found if i.subject_kind is SubjectKind.HOST]
        incident = mine[-1] if mine else None  # newest first: the drill's first incident
        host_incident = hosts[-1] if hosts else None
        # an unreachable endpoint has no incident of its own: the host's holds its timeline
        shown = incident if incident is not None else host_incident
        timeline = await daemon.store.timeline(shown) if shown is not None else []
        attempts = await daemon.store.attempts(name)
        elsewhere = [a for a in await daemon.store.attempts() if a.endpoint != name]
        subjects = tuple(i.subject for i in reversed(found))
        samples = await daemon.store.samples(name, limit=500)
        deep = sum(1 for s in samples if s.tier == "deep" and s.at >= injected)
        final_state = worker.state.value
        last = _last_message(fault) if incident is not None else "🔴 host"
        notified = await bot.delivered(shown, last, DELIVER_WITHIN_S, _queued(daemon))
        interrupted = False
    finally:
        routes.stop()
        await daemon.stop()
        await asyncio.to_thread(fault.clean, lab)
        if not interrupted:  # cancelled (Ctrl-C): undo the fault, do not wait for the lab
            await asyncio.to_thread(settle, lab)
    own = [r for r in timeline if r.subject == name]  # a host incident holds the host's too
    down = at(first(own, Transition, lambda t: t.dest in DETECTED))
    up = at(first(own, Transition, lambda t: t.dest == "healthy"))
    escalated = at(first(own, Transition, lambda t: t.dest == "escalated"))
    escalation = first(timeline, Escalation, lambda e: not e.dry_run)
    diagnoses, acted_on = diagnoses_of(timeline)
    return DrillReport(
        drill=fault.name,
        endpoint=name,
        rule=fault.rule,
        incident=incident,
        diagnosis=diagnoses[0] if diagnoses else "",
        steps=steps_of(timeline),
        outcome=attempts[-1].outcome if attempts else None,
        detect_s=seconds(injected, down),
        heal_s=seconds(down, up),
        problem=problem,
        expect=fault.expect,
        escalate_s=seconds(down, escalated),
        escalation=escalation[1].note if escalation else "",
        host_incident=host_incident,
        final_state=final_state,
        attempts=len(attempts),
        notified=notified,
        timeline=tuple(timeline),
        main_pids=tuple(pids),
        deep_checks=deep,
        held_s=held,
        diagnoses=diagnoses,
        acted_on=acted_on,
        incidents=subjects,
        blocked=dict(routes.blocked),
        routes_opened=tuple(sorted(routes.opened)),
        attempts_elsewhere=len(elsewhere),
    )

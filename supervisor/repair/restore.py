"""A repair never leaves a server less alive than it found it.

Before a rule's steps the runner reads what each of the endpoint's units is doing (its service
manager's own word: `systemctl show`, `launchctl print`). When a step fails (a stop that ran out
mid-restart, a refused command), it reads them again, starts every unit that was running then
and is not now (in restart order, `reset-failed` first), waits for a real completion, and
records what each unit was left as (`UnitsLeft`); only then is a person called. A unit that
still runs is never touched here: busy or hung, that is the rules' judgement, not this one's.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

from supervisor.config.supervised import Host, UnitRef
from supervisor.playbook.actions.declare import StopSteps
from supervisor.playbook.actions.steps import Steps
from supervisor.playbook.actions.units import MANAGERS
from supervisor.playbook.evidence.unitstate import UnitState
from supervisor.record.timeline.parts import UnitLeft
from supervisor.record.timeline.repair import UnitsLeft
from supervisor.repair.steps import StepEnv, action_context

Found = tuple[UnitState, ...]
#: a read of a unit's state takes at most this long (an unreachable host must not hold up the
#: repair it comes before by a whole command timeout)
READ_WITHIN = timedelta(seconds=10)


def _reader(env: StepEnv) -> Steps:
    ctx = action_context(env)
    return Steps(replace(ctx, timeout=min(ctx.timeout, READ_WITHIN)))


async def _read(steps: Steps, host: Host, unit: UnitRef) -> UnitState:
    manager = MANAGERS.get(host.service_manager)
    if manager is None:
        why = f"no unit actions for service manager {host.service_manager!r}"
        return UnitState(host=host.name, unit=unit.unit, state="", alive=False, error=why)
    try:
        return await manager.read(steps, host, unit)
    except StopSteps as stop:  # a unit name that reads as an option
        return UnitState(host=host.name, unit=unit.unit, state="", alive=False, error=stop.summary)


async def read_units(env: StepEnv) -> Found:
    """What every unit of the endpoint is doing now, in restart order (never raises)."""
    steps = _reader(env)
    return tuple([await _read(steps, host, unit) for host, unit in steps.ctx.units])


async def _serves(env: StepEnv, within: timedelta, every: timedelta) -> bool:
    """A real completion passes within `within` (tried every `every`)."""
    deadline = env.clock.monotonic() + within.total_seconds()
    while True:
        if (await env.probe()).ok:
            return True
        left = deadline - env.clock.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(every.total_seconds(), left))


async def restore(
    env: StepEnv,
    found: Found,
    *,
    attempt: int,
    rule: str,
    within: timedelta,
    every: timedelta,
) -> UnitsLeft:
    """Start again every unit that ran when `found` and does not now; then wait up to `within`
    for a real completion. What each unit was left as, for the timeline."""
    steps = Steps(action_context(env))
    reads = _reader(env)
    units = steps.ctx.units
    after = [await _read(reads, host, unit) for host, unit in units]
    down = [
        index
        for index, (before, now) in enumerate(zip(found, after, strict=True))
        if before.alive and not now.alive and not now.error
    ]
    error = ""
    for index in down:
        host, unit = units[index]
        try:
            await MANAGERS[host.service_manager].start(steps, ((host, unit),), True)
        except StopSteps as stop:
            error = stop.summary
            break
    verified = None
    if down and not error:
        verified = await _serves(env, within, every)
    left = [await _read(reads, host, unit) for host, unit in units] if down else after
    return UnitsLeft(
        attempt=attempt,
        rule=rule,
        units=tuple(
            UnitLeft(
                host=now.host,
                unit=now.unit,
                found=before.state,
                after_steps=later.state,
                left=now.state,
                pid=now.pid,
                started=index in down,
                error=before.error or later.error or now.error,
            )
            for index, (before, later, now) in enumerate(zip(found, after, left, strict=True))
        ),
        verified=verified,
        error=error,
    )

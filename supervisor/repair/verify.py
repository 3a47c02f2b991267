"""Proving a repair: real completions until one passes (the worker then moves to healthy), or
the time allowed runs out."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from supervisor.core.aio import wait_event
from supervisor.core.clock import Clock
from supervisor.core.events import ProbeOutcome, ProbeTick, Tier
from supervisor.judge.machine import State
from supervisor.worker import EndpointWorker


async def verify(
    worker: EndpointWorker,
    within: timedelta,
    every: timedelta,
    clock: Clock,
    *,
    waiting: State = State.VERIFYING,
) -> bool:
    """Ask `worker` for a real completion every `every` while it is `waiting` (verifying, or
    starting after a person's restart); True once it is healthy, False when `within` ran out (or
    it left `waiting` another way)."""
    deadline = time.monotonic() + within.total_seconds()
    while worker.state is waiting and time.monotonic() < deadline:
        worker.record.changed.clear()
        worker.submit(ProbeTick(endpoint=worker.name, tier=Tier.DEEP, at=clock.now()))
        remaining = max(0.0, deadline - time.monotonic())
        await wait_event(worker.record.changed, min(every.total_seconds(), remaining))
    return worker.state is State.HEALTHY


def answers_degraded(worker: EndpointWorker, since: datetime) -> str:
    """Why `worker`'s latest problem, if seen after `since`, is a degraded real check (it
    answers, not well), or ''.

    Called once verification (begun at `since`) ran out: no check passed meanwhile, so the
    latest problem is what the endpoint does now.
    """
    problem = worker.record.last_problem
    if problem is None or problem.at < since:
        return ""
    if problem.tier is not Tier.DEEP or problem.outcome is not ProbeOutcome.DEGRADED:
        return ""
    return problem.reason

"""Wait until the endpoint's real check passes (a completion for model servers)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import Field

from supervisor.config.fields import PositiveDuration
from supervisor.core.durations import format_duration
from supervisor.playbook.actions.base import ActionContext, ActionOutcome, ActionParams, Target
from supervisor.playbook.actions.declare import StopSteps, action


class WaitParams(ActionParams):
    within: PositiveDuration = Field(description="give up after this long")
    every: PositiveDuration = Field(
        default=timedelta(seconds=10), description="time between probes"
    )


def _probes(count: int) -> str:
    return f"{count} probe" if count == 1 else f"{count} probes"


@action(
    "wait_healthy",
    params=WaitParams,
    target=Target.ENDPOINT,
    doc="probe the endpoint every `every` until its check passes, up to `within`",
)
async def wait_healthy(ctx: ActionContext, params: WaitParams) -> ActionOutcome:
    name = ctx.endpoint.name
    within = format_duration(params.within)
    if ctx.dry_run:
        return ActionOutcome(ok=True, summary=f"would wait up to {within} for a passing completion")
    started = ctx.clock.monotonic()
    deadline = started + params.within.total_seconds()
    count = 0
    while True:
        result = await ctx.probe()
        count += 1
        now = ctx.clock.monotonic()
        if result.ok:
            took = format_duration(now - started)
            return ActionOutcome(
                ok=True,
                summary=f"{name} is healthy: {result.check} passed after {took} ({_probes(count)})",
            )
        if now >= deadline:
            raise StopSteps(
                f"{name} is still not healthy after {within} ({_probes(count)}); "
                f"last {result.check} check: {result.reason or result.outcome}"
            )
        await asyncio.sleep(min(params.every.total_seconds(), deadline - now))

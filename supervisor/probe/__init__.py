"""Probes: one call checks one endpoint at one tier and always returns a `ProbeResult`.

`run_probe` never raises (except `asyncio.CancelledError`): refused connections, HTTP errors,
bad bodies, engine errors in a stream and the probe-wide deadline all become a FAIL or DEGRADED
result with a plain `reason`.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

from supervisor.config.keys import scrub
from supervisor.core.events import ProbeOutcome, ProbeResult, Tier
from supervisor.core.httpclient import HttpClient, HttpError, failure_reason
from supervisor.probe.completion import judge_completion, slow_reason
from supervisor.probe.context import CheckFinding, ProbeContext, ProbeError
from supervisor.probe.http import one_line, timed_out_reason
from supervisor.probe.ondemand import gentle
from supervisor.probe.registry import CHECKS, Check, KindChecks

if TYPE_CHECKING:
    from supervisor.config.supervised import Endpoint
    from supervisor.core.clock import Clock

__all__ = [
    "CHECKS",
    "Check",
    "Finding",
    "KindChecks",
    "ProbeContext",
    "ProbeError",
    "judge_completion",
    "run_probe",
    "slow_reason",
]


async def run_probe(
    endpoint: Endpoint, tier: Tier, client: HttpClient, *, clock: Clock
) -> ProbeResult:
    """Run the endpoint kind's check for `tier` within `endpoint.probe.timeout`."""
    ctx = ProbeContext(endpoint, client, clock)
    at, started = clock.now(), clock.monotonic()
    finding = await _checked(ctx, tier)
    return ProbeResult(
        endpoint=endpoint.name,
        tier=tier,
        check=finding.check,
        outcome=finding.outcome,
        reason=scrub(finding.reason, endpoint),
        at=at,
        latency_s=max(0.0, clock.monotonic() - started),
        http_status=finding.http_status,
        ttft_s=finding.ttft_s,
        tok_s=finding.tok_s,
        tokens=finding.tokens,
        detail=scrub(finding.detail, endpoint),
    )


async def _checked(ctx: ProbeContext, tier: Tier) -> CheckFinding:
    kind = CHECKS.get(ctx.endpoint.kind)
    if kind is None:
        return _failed(ctx, f"no probe for kind '{ctx.endpoint.kind}'")
    check = kind.for_tier(tier)
    if tier is Tier.DEEP and not ctx.endpoint.may_load:
        check = partial(gentle, deep=check)
    try:
        async with asyncio.timeout(ctx.timeout_s):
            return await check(ctx)
    except ProbeError as failure:
        return _failed(ctx, failure.reason, failure.outcome, failure.http_status)
    except TimeoutError:
        return _failed(ctx, timed_out_reason(ctx.timeout_s))
    except HttpError as exc:
        return _failed(ctx, failure_reason(exc))
    except Exception as exc:  # the contract: a probe reports, it never takes its caller down
        return _failed(ctx, f"probe error: {type(exc).__name__}: {one_line(str(exc))}")


def _failed(
    ctx: ProbeContext,
    reason: str,
    outcome: ProbeOutcome = ProbeOutcome.FAIL,
    http_status: int | None = None,
) -> CheckFinding:
    status = http_status if http_status is not None else ctx.http_status
    return CheckFinding(check=ctx.check, outcome=outcome, reason=reason, http_status=status)

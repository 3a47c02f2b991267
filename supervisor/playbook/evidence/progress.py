"""The `progress` collector: is the server making progress? Two reads of `/metrics` a window
apart (see `supervisor.judge.progress`). Restarting rules require `progress.verdict` not `busy`, so
a saturated server is never restarted; the hung-engine rule requires `hung`."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from supervisor.config.fields import PositiveDuration
from supervisor.judge.progress.read import read_progress
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    CollectorParams,
    FactValue,
)
from supervisor.playbook.evidence.declare import collector, found


class ProgressParams(CollectorParams):
    window: PositiveDuration = Field(
        default=timedelta(seconds=5), description="time between the two reads of /metrics"
    )


@collector(
    "progress",
    params=ProgressParams,
    doc="busy, hung, idle or unknown: two reads of `{endpoint.url}/metrics` `window` apart",
    facts={
        "verdict": "`busy` (tokens flowing, requests running or queued), `hung` (requests "
        "running or queued, token counter frozen), `idle` (nothing to do) or `unknown` (no "
        "signal: no vLLM metrics, a counter reset)",
        "reason": "one line, e.g. `busy: 48 running, 20 waiting, 940 tok/s generated`",
        "running": "requests being generated at the second read",
        "waiting": "requests queued at the second read",
        "tok_s": "tokens generated per second across the window",
        "kv_cache_usage_perc": "KV cache in use at the second read, 0-1",
    },
    needs_host=False,
)
async def progress(ctx: CollectContext, params: ProgressParams) -> CollectedEvidence:
    endpoint = ctx.scope.endpoint
    seen = await read_progress(
        endpoint.url,
        endpoint.kind,
        ctx.http,
        clock=ctx.clock,
        window=params.window,
        timeout=ctx.timeout,
        pause=ctx.pause,
    )
    facts: dict[str, FactValue] = {"verdict": seen.verdict.value, "reason": seen.reason}
    for name, value in (
        ("running", seen.running),
        ("waiting", seen.waiting),
        ("tok_s", seen.tok_s),
        ("kv_cache_usage_perc", seen.kv_cache_usage),
    ):
        if value is not None:
            facts[name] = value
    return found(facts)

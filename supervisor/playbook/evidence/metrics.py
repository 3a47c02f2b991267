"""The `metrics` collector: vLLM's Prometheus gauges and counters from `GET {url}/metrics`.

Only the few series rules use are read, with `prometheus_client`'s text parser (see
`supervisor.judge.progress.load`); a page it cannot parse is `available: false` with the parser's
words. A series with several label sets (engines, models, finish reasons) is summed; the KV
cache usage, a fraction per engine, takes the fullest engine instead. A series the server does
not export is absent, not 0. No answer (or not 200) is a fact too: `available: false`.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from supervisor.core.durations import format_duration
from supervisor.core.httpclient import HttpError, failure_reason
from supervisor.judge.progress.load import MetricsFormatError, parse_vllm_metrics
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    FactValue,
    NoEvidenceParams,
)
from supervisor.playbook.evidence.declare import collector, found


def parse_metrics(text: str) -> dict[str, FactValue]:
    """The `metrics` facts of a Prometheus text page (without `available`); raises
    `MetricsFormatError` when it is not Prometheus text."""
    load = parse_vllm_metrics(text, at=datetime.now(UTC))
    facts: dict[str, FactValue] = {}
    for fact, value in (
        ("num_requests_running", load.running),
        ("num_requests_waiting", load.waiting),
        ("generation_tokens_total", load.generation_tokens),
        ("prompt_tokens_total", load.prompt_tokens),
        ("num_preemptions_total", load.preemptions),
        ("kv_cache_usage_perc", load.kv_cache_usage),
    ):
        if value is not None:
            facts[fact] = value
    return facts


def _unavailable(reason: str) -> CollectedEvidence:
    return found({"available": False, "reason": reason})


@collector(
    "metrics",
    params=NoEvidenceParams,
    doc="vLLM's load and token counters: `GET {endpoint.url}/metrics` (no host needed)",
    facts={
        "available": "whether /metrics answered 200",
        "reason": "why it is not available (`HTTP 404`, `timed out after 10s` ...), else ''",
        "num_requests_running": "requests being generated now",
        "num_requests_waiting": "requests queued",
        "kv_cache_usage_perc": "KV cache in use, 0-1 (the fullest engine)",
        "generation_tokens_total": "tokens generated since the server started",
        "prompt_tokens_total": "prompt tokens processed since the server started",
        "num_preemptions_total": "preemptions since the server started",
    },
    needs_host=False,
)
async def metrics(ctx: CollectContext, params: NoEvidenceParams) -> CollectedEvidence:
    endpoint = ctx.scope.endpoint
    url = f"{endpoint.url}/metrics"
    try:
        async with asyncio.timeout(ctx.timeout.total_seconds()):
            response = await ctx.http.get(url, headers=endpoint.request_headers())
    except TimeoutError:
        return _unavailable(f"timed out after {format_duration(ctx.timeout)}")
    except HttpError as exc:
        return _unavailable(f"cannot reach {url}: {failure_reason(exc)}")
    if response.status_code != 200:
        return _unavailable(f"HTTP {response.status_code}")
    try:
        facts = parse_metrics(response.text)
    except MetricsFormatError as exc:
        return _unavailable(str(exc))
    return found({"available": True, "reason": "", **facts})

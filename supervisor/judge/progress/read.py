"""Reading a server's progress over HTTP: two loads a window apart, judged.

vLLM (any `openai`-kind server that serves `/metrics` with vLLM's series): two reads of
`/metrics`. Servers without such metrics (mlx_lm, llama.cpp without `--metrics`, Ollama, a plain
health URL) give `unknown` with the reason: for them only time tells busy from hung (see
docs/states.md, "Detection: events, probes, busy and hung").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.durations import format_duration
from supervisor.core.httpclient import Headers, HttpClient, HttpError, failure_reason
from supervisor.judge.progress.judge import Progress, judge_progress, unknown
from supervisor.judge.progress.load import Load, MetricsFormatError, parse_vllm_metrics

#: the endpoint kinds whose servers may export vLLM's metrics
METRICS_KINDS = frozenset({"openai", "embedding", "rerank"})


class LoadUnavailableError(Exception):
    """`/metrics` did not give a load: its message says why (`HTTP 404`, `timed out after 2s`)."""


async def read_load(
    url: str,
    http: HttpClient,
    *,
    clock: Clock,
    timeout: timedelta,
    headers: Headers | None = None,
) -> Load:
    """One reading of `{url}/metrics`; raises `LoadUnavailableError`."""
    try:
        async with asyncio.timeout(timeout.total_seconds()):
            response = await http.get(f"{url}/metrics", headers=headers)
    except TimeoutError as exc:
        raise LoadUnavailableError(f"timed out after {format_duration(timeout)}") from exc
    except HttpError as exc:
        why = failure_reason(exc)
        raise LoadUnavailableError(f"cannot reach {url}/metrics: {why}") from exc
    if response.status_code != 200:
        raise LoadUnavailableError(f"HTTP {response.status_code}")
    try:
        return parse_vllm_metrics(response.text, at=clock.now())
    except MetricsFormatError as exc:
        raise LoadUnavailableError(str(exc)) from exc


async def read_progress(
    url: str,
    kind: str,
    http: HttpClient,
    *,
    clock: Clock,
    window: timedelta,
    timeout: timedelta,
    pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
    headers: Headers | None = None,
) -> Progress:
    """Busy, hung, idle or unknown across `window` (two reads of `/metrics`)."""
    if kind not in METRICS_KINDS:
        return unknown(f"unknown: `{kind}` endpoints export no progress metrics")
    try:
        first = await read_load(url, http, clock=clock, timeout=timeout, headers=headers)
        if first.generation_tokens is None:
            return unknown("unknown: /metrics has no vllm:generation_tokens_total")
        await pause(window.total_seconds())
        second = await read_load(url, http, clock=clock, timeout=timeout, headers=headers)
    except LoadUnavailableError as exc:
        return unknown(f"unknown: no metrics ({exc})")
    return judge_progress(first, second)


#: the longest one read of `/metrics` may take when the worker asks (a probe's timeout is longer)
READ_TIMEOUT = timedelta(seconds=5)


class ProgressReads:
    """What the worker calls before a failed or slow real check counts: `read_progress` over the
    endpoint's `progress_window` (0s: `unknown`, nothing read)."""

    def __init__(self, http: HttpClient, clock: Clock) -> None:
        self._http = http
        self._clock = clock

    async def __call__(self, endpoint: Endpoint) -> Progress:
        window = endpoint.probe.progress_window
        if not window:
            return unknown("unknown: progress_window is 0s")
        return await read_progress(
            endpoint.url,
            endpoint.kind,
            self._http,
            clock=self._clock,
            window=window,
            timeout=min(endpoint.probe.timeout, READ_TIMEOUT),
            headers=endpoint.request_headers(),
        )

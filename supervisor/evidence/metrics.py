"""The `metrics` collector: vLLM's Prometheus gauges and counters from `GET {url}/metrics`.

Only the few series rules use are read, with a small parser of the text format (no client
library). A series with several label sets (engines, models, finish reasons) is summed; the KV
cache usage, a fraction per engine, takes the fullest engine instead. A series the server does
not export is absent, not 0. No answer (or not 200) is a fact too: `available: false`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import httpx

from supervisor.durations import format_duration
from supervisor.evidence.base import CollectContext, Evidence, FactValue, NoParams
from supervisor.evidence.declare import collector, found

#: Prometheus series -> fact; summed over label sets
SUMMED = {
    "vllm:num_requests_running": "num_requests_running",
    "vllm:num_requests_waiting": "num_requests_waiting",
    "vllm:generation_tokens_total": "generation_tokens_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:num_preemptions_total": "num_preemptions_total",
}
KV_CACHE = "vllm:kv_cache_usage_perc"
KV_CACHE_OLD = "vllm:gpu_cache_usage_perc"  #: its name before vLLM 0.9.2


def _labels_end(text: str) -> int:
    """Index just past the `}` closing the label set `text` starts with; -1 if it never closes."""
    quoted = escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "}" and not quoted:
            return index + 1
    return -1


def samples(text: str) -> Iterator[tuple[str, float]]:
    """`(series name, value)` of every sample line; comments and malformed lines skipped."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cut = min(
            (i for i in (line.find("{"), line.find(" "), line.find("\t")) if i >= 0), default=-1
        )
        if cut <= 0:
            continue
        name, rest = line[:cut], line[cut:]
        if rest.startswith("{"):
            end = _labels_end(rest)
            if end < 0:
                continue
            rest = rest[end:]
        words = rest.split()
        try:
            value = float(words[0]) if words else math.nan
        except ValueError:
            continue
        if not math.isnan(value):
            yield name, value


def parse_metrics(text: str) -> dict[str, FactValue]:
    """The `metrics` facts of a Prometheus text page (without `available`)."""
    sums: dict[str, float] = {}
    kv: dict[str, float] = {}
    for name, value in samples(text):
        fact = SUMMED.get(name)
        if fact is not None:
            sums[fact] = sums.get(fact, 0.0) + value
        elif name in (KV_CACHE, KV_CACHE_OLD):
            kv[name] = max(kv.get(name, value), value)
    facts: dict[str, FactValue] = dict(sums)
    usage = kv.get(KV_CACHE, kv.get(KV_CACHE_OLD))
    if usage is not None:
        facts["kv_cache_usage_perc"] = usage
    return facts


def _unavailable(reason: str) -> Evidence:
    return found({"available": False, "reason": reason})


@collector(
    "metrics",
    params=NoParams,
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
async def metrics(ctx: CollectContext, params: NoParams) -> Evidence:
    url = f"{ctx.scope.endpoint.url}/metrics"
    seconds = ctx.timeout.total_seconds()
    try:
        async with asyncio.timeout(seconds):
            response = await ctx.http.get(url, timeout=seconds)
    except (TimeoutError, httpx.TimeoutException):
        return _unavailable(f"timed out after {format_duration(ctx.timeout)}")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return _unavailable(f"cannot reach {url}: {str(exc) or type(exc).__name__}")
    if response.status_code != 200:
        return _unavailable(f"HTTP {response.status_code}")
    return found({"available": True, "reason": "", **parse_metrics(response.text)})

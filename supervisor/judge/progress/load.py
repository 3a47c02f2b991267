"""One reading of a server's load, parsed with `prometheus_client`'s text parser.

vLLM labels its series by engine and model; a series with several label sets is summed, except the
KV cache usage (a fraction per engine), where the fullest engine counts. A series the server does
not export is None, not 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

#: sample name -> Load field; summed over label sets
SUMMED = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:num_preemptions_total": "preemptions",
}
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  #: new name, then pre-0.9.2


class MetricsFormatError(ValueError):
    """The page is not Prometheus text (the parser's own words follow)."""


@dataclass(frozen=True, kw_only=True)
class Load:
    """What a server reported at `at`; None where it exports no such series."""

    at: datetime
    running: float | None = None
    waiting: float | None = None
    generation_tokens: float | None = None  #: a counter: tokens generated since it started
    prompt_tokens: float | None = None
    preemptions: float | None = None
    kv_cache_usage: float | None = None  #: 0-1, the fullest engine


def _samples(text: str) -> Iterable[tuple[str, float]]:
    # prometheus_client (~5 MB) only once a `/metrics` page is read (none in a healthy fleet)
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not math.isnan(sample.value):  # NaN: no value (vLLM before a first request)
                    yield sample.name, float(sample.value)
    except ValueError as exc:  # the parser raises ValueError on any malformed line
        raise MetricsFormatError(f"not Prometheus text: {exc}") from exc


def parse_vllm_metrics(text: str, *, at: datetime) -> Load:
    """The load in a vLLM `/metrics` page; raises `MetricsFormatError` on a malformed page."""
    sums: dict[str, float] = {}
    kv: dict[str, float] = {}
    for name, value in _samples(text):
        field = SUMMED.get(name)
        if field is not None:
            sums[field] = sums.get(field, 0.0) + value
        elif name in KV_CACHE:
            kv[name] = max(kv.get(name, value), value)
    usage = next((kv[name] for name in KV_CACHE if name in kv), None)
    return Load(at=at, kv_cache_usage=usage, **sums)

"""The simulated server's `/metrics`: vLLM's names and labels, counting what it really served."""

from __future__ import annotations

import bisect
import time
from collections import Counter
from dataclasses import dataclass, field

#: vLLM's buckets for `vllm:time_to_first_token_seconds`
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
FINISHED_REASONS = ("stop", "length", "abort", "error")


@dataclass(kw_only=True)
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  #: per bucket, not cumulative
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.buckets):
            self.counts[index] += 1
        self.total += value
        self.count += 1


@dataclass(kw_only=True)
class SimMetrics:
    """Gauges and counters; the chat handler updates them as requests run and finish."""

    running: int = 0
    waiting: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    success: Counter[str] = field(default_factory=Counter)  #: by finished_reason
    ttft: Histogram = field(default_factory=lambda: Histogram(buckets=TTFT_BUCKETS))
    #: other users' load (see `SimBehaviour.load_*`): shown beside our own requests
    load_running: int = 0
    load_waiting: int = 0
    load_tokens: float = 0.0  #: tokens the other users got so far
    _load_at: float | None = None

    def advance_load(self, *, running: int, waiting: int, tok_s: float, hung: bool) -> None:
        """Bring the other users' load up to now: their tokens grow at `tok_s` unless the engine
        is hung (then every counter stays where it is)."""
        now = time.monotonic()
        if self._load_at is not None and not hung:
            self.load_tokens += tok_s * (now - self._load_at)
        self._load_at = now
        self.load_running, self.load_waiting = running, waiting

    @property
    def kv_cache_usage(self) -> float:
        return min(1.0, 0.05 * self.running + 0.02 * self.load_running)

    def render(self, model: str, engine: str = "0") -> str:
        """Prometheus text format, as vLLM's prometheus_client registry prints it."""
        labels = f'model_name="{_escape(model)}",engine="{engine}"'
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        def sample(name: str, value: float, extra: str = "") -> None:
            out.append(f"{name}{{{labels}{extra}}} {float(value)!r}")

        running, waiting = self.running + self.load_running, self.waiting + self.load_waiting
        generation = self.generation_tokens + int(self.load_tokens)
        gauges = (
            ("num_requests_running", running, "Number of requests in model execution batches."),
            ("num_requests_waiting", waiting, "Number of requests waiting to be processed."),
            (
                "kv_cache_usage_perc",
                self.kv_cache_usage,
                "KV-cache usage. 1 means 100 percent usage.",
            ),
        )
        for name, value, text in gauges:
            family(f"vllm:{name}", "gauge", text)
            sample(f"vllm:{name}", value)
        counters = (
            (
                "num_preemptions",
                self.preemptions,
                "Cumulative number of preemption from the engine.",
            ),
            ("prompt_tokens", self.prompt_tokens, "Number of prefill tokens processed."),
            ("generation_tokens", generation, "Number of generation tokens processed."),
        )
        for name, value, text in counters:
            family(f"vllm:{name}_total", "counter", text)
            sample(f"vllm:{name}_total", value)
        family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
        for reason in FINISHED_REASONS:
            extra = f',finished_reason="{reason}"'
            sample("vllm:request_success_total", self.success[reason], extra)
        name = "vllm:time_to_first_token_seconds"
        family(name, "histogram", "Histogram of time to first token in seconds.")
        cumulative = 0
        for bound, count in zip(self.ttft.buckets, self.ttft.counts, strict=True):
            cumulative += count
            sample(f"{name}_bucket", cumulative, f',le="{bound!r}"')
        sample(f"{name}_bucket", self.ttft.count, ',le="+Inf"')
        sample(f"{name}_count", self.ttft.count)
        sample(f"{name}_sum", self.ttft.total)
        return "\n".join(out) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

"""Plain-words renderings of records for the timeline and the logs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from supervisor.core.actor import Actor, Via
from supervisor.core.events import ProbeResult, UnitSignal
from supervisor.judge.machine import Change
from supervisor.judge.progress.judge import Progress
from supervisor.record.store.records import TimelineEntry
from supervisor.record.timeline.base import JSONValue
from supervisor.record.timeline.codec import encode
from supervisor.record.timeline.parts import ProbeSample, ProgressSample
from supervisor.record.timeline.state import Probe, Transition
from supervisor.record.timeline.unit import UnitHeard


def probe_sample(result: ProbeResult) -> ProbeSample:
    """A probe result as the timeline keeps it (figures rounded)."""
    return ProbeSample(
        at=result.at,
        tier=result.tier.value,
        check=result.check,
        outcome=result.outcome.value,
        reason=result.reason,
        latency_s=round(result.latency_s, 3),
        http_status=result.http_status,
        ttft_s=None if result.ttft_s is None else round(result.ttft_s, 3),
        tok_s=None if result.tok_s is None else round(result.tok_s, 1),
        tokens=result.tokens,
        detail=result.detail or None,
    )


def probe_data(result: ProbeResult) -> dict[str, JSONValue]:
    """A probe result as JSON (`probe --json`): the timeline's payload of it."""
    return encode(probe_sample(result))


def probe_line(result: ProbeResult) -> str:
    """`deep completion ok: ttft 0.41s, 38.2 tok/s`, `liveness health fail: connection refused`."""
    return f"{result.tier} {result.check} {result.outcome}: {_said(result)}"


def _said(result: ProbeResult) -> str:
    """Its reason, else its figures: `connection refused`, `ttft 0.41s, 38.2 tok/s`, `12 ms`."""
    if result.reason:
        return result.reason
    figures = []
    if result.ttft_s is not None:
        figures.append(f"ttft {result.ttft_s:.2f}s")
    if result.tok_s is not None:
        figures.append(f"{result.tok_s:.1f} tok/s")
    if not figures:
        figures.append(f"{result.latency_s * 1000:.0f} ms")
    return ", ".join(figures)


def resolution_text(result: ProbeResult) -> str:
    """How an incident closed, from the probe that closed it."""
    what = {
        "completion": "completion",
        "embedding": "embedding",
        "rerank": "rerank",
        "speech": "speech",
        "transcription": "transcription",
        "round trip": "speech round trip",
    }.get(result.check, "health check")
    return f"{what} passed ({_said(result)})"


def progress_sample(progress: Progress | None) -> ProgressSample | None:
    """What the server was doing, as the timeline keeps it."""
    if progress is None:
        return None
    return ProgressSample(
        verdict=progress.verdict.value,
        reason=progress.reason,
        running=progress.running,
        waiting=progress.waiting,
        tok_s=progress.tok_s,
        generation_tokens=progress.generation_tokens,
        kv_cache_usage=progress.kv_cache_usage,
        window_s=progress.window_s,
    )


def probe_entry(
    result: ProbeResult,
    note: str,
    *,
    subject: str,
    count: int = 1,
    last_at: datetime | None = None,
    progress: Progress | None = None,
) -> TimelineEntry:
    """The timeline entry of a probe inside an incident: `deep completion fail: ... (note)`; a
    run of `count` identical results, the last seen at `last_at`."""
    record = Probe(
        sample=probe_sample(result),
        note=note,
        count=count,
        last_at=last_at if count > 1 else None,
        progress=progress_sample(progress),
    )
    return TimelineEntry(at=result.at, subject=subject, record=record)


_FIELDS = ("host", "why", "rule", "runbook", "reason", "who", "via", "until")
"""Transition extras that are fields of their own; anything else goes to `extra`."""


def _actor(extra: Mapping[str, str]) -> Actor | None:
    """The person a transition's producer named (`who`, and `via` when it knows it)."""
    who, via = extra.get("who"), extra.get("via")
    if not who:
        return None
    return Actor(who=who, via=Via(via) if via else None)


def transition_entry(
    change: Change,
    note: str,
    result: ProbeResult | None,
    *,
    subject: str,
    at: datetime,
    extra: Mapping[str, str],
    streak: Sequence[ProbeResult] | None,
    progress: Progress | None = None,
) -> TimelineEntry:
    """The timeline entry of a state change: `down -> remediating: note`, with the probe that
    caused it and, when it opens an incident, the whole streak of failed probes."""
    until = extra.get("until")
    record = Transition(
        source=change.source,
        dest=change.dest,
        trigger=change.trigger,
        note=note,
        rule=extra.get("rule") or None,
        actor=_actor(extra),
        probe=None if result is None else probe_sample(result),
        probes=None if streak is None else tuple(probe_sample(r) for r in streak),
        host=extra.get("host"),
        why=extra.get("why"),
        runbook=extra.get("runbook"),
        until=None if until is None else datetime.fromisoformat(until),
        reason=extra.get("reason"),
        progress=progress_sample(progress),
        extra={k: v for k, v in extra.items() if k not in _FIELDS},
    )
    return TimelineEntry(at=at, subject=subject, record=record)


def unit_entry(
    signal: UnitSignal,
    verdict: str,
    *,
    judged: bool = True,
    count: int = 1,
    last_at: datetime | None = None,
    last_line: str | None = None,
) -> TimelineEntry:
    """The timeline entry of a unit event: what systemd said, the unit's lines, the verdict; a
    run of `count` identical events, the last seen at `last_at` saying `last_line`."""
    record = UnitHeard(
        host=signal.host,
        unit=signal.unit,
        event=signal.kind,
        line=signal.line,
        message=signal.message,
        verdict=verdict,
        judged=judged,
        lines=signal.lines,
        result=signal.result or None,
        exit_status=signal.exit_status,
        n_restarts=signal.n_restarts,
        source=signal.source,
        cursor=signal.cursor or None,
        count=count,
        last_at=last_at if count > 1 else None,
        last_line=last_line if count > 1 else None,
    )
    return TimelineEntry(at=signal.at, subject=signal.endpoint, record=record)

"""Plain-words renderings of records for the timeline and the logs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from supervisor.events import ProbeResult
from supervisor.machine import Change
from supervisor.store import EntryKind, JSONValue, TimelineEntry


def probe_data(result: ProbeResult) -> dict[str, JSONValue]:
    """A probe result as timeline data (JSON)."""
    data: dict[str, JSONValue] = {
        "at": result.at.isoformat(),
        "tier": result.tier.value,
        "check": result.check,
        "outcome": result.outcome.value,
        "reason": result.reason,
        "latency_s": round(result.latency_s, 3),
    }
    for key, value in (
        ("http_status", result.http_status),
        ("ttft_s", None if result.ttft_s is None else round(result.ttft_s, 3)),
        ("tok_s", None if result.tok_s is None else round(result.tok_s, 1)),
        ("tokens", result.tokens),
    ):
        if value is not None:
            data[key] = value
    if result.detail:
        data["detail"] = result.detail
    return data


def probe_line(result: ProbeResult) -> str:
    """`deep completion ok: ttft 0.41s, 38.2 tok/s`, `liveness health fail: connection refused`."""
    head = f"{result.tier} {result.check} {result.outcome}"
    if result.reason:
        return f"{head}: {result.reason}"
    figures = []
    if result.ttft_s is not None:
        figures.append(f"ttft {result.ttft_s:.2f}s")
    if result.tok_s is not None:
        figures.append(f"{result.tok_s:.1f} tok/s")
    if not figures:
        figures.append(f"{result.latency_s * 1000:.0f} ms")
    return f"{head}: {', '.join(figures)}"


def resolution_text(result: ProbeResult) -> str:
    """How an incident closed, from the probe that closed it."""
    what = {"completion": "completion", "embedding": "embedding", "rerank": "rerank"}.get(
        result.check, "health check"
    )
    figures = probe_line(result).split(": ", 1)[1]
    return f"{what} passed ({figures})"


def probe_entry(result: ProbeResult, note: str, *, subject: str) -> TimelineEntry:
    """The timeline entry of a probe inside an incident: `deep completion fail: ... (note)`."""
    summary = f"{result.tier} {result.check} {result.outcome}"
    summary += f": {result.reason}" if result.reason else ""
    return TimelineEntry(
        kind=EntryKind.PROBE,
        at=result.at,
        subject=subject,
        summary=f"{summary} ({note})",
        data=probe_data(result),
    )


def transition_entry(
    change: Change,
    note: str,
    result: ProbeResult | None,
    *,
    subject: str,
    at: datetime,
    extra: Mapping[str, str],
    streak: Sequence[ProbeResult] | None,
) -> TimelineEntry:
    """The timeline entry of a state change: `down -> remediating: note`, with the probe that
    caused it and, when it opens an incident, the whole streak of failed probes."""
    data: dict[str, JSONValue] = {"trigger": change.trigger.value, **extra}
    if result is not None:
        data["probe"] = probe_data(result)
    if streak is not None:
        data["probes"] = [probe_data(r) for r in streak]
    summary = f"{change.source} -> {change.dest}: {note}"
    return TimelineEntry(
        kind=EntryKind.TRANSITION, at=at, subject=subject, summary=summary, data=data
    )

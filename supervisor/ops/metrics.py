"""Prometheus text exposition (format 0.0.4) of a `FleetView`, written by hand: no client
library at run time. Every metric is a gauge except `fleet_remediations_total`.

| metric | labels | meaning |
|---|---|---|
| `fleet_supervisor_up` | | 1 while the daemon serves |
| `fleet_supervisor_start_time_seconds` | | when the daemon started (Unix time) |
| `fleet_endpoint_state` | endpoint, state | 1 for the endpoint's current state, 0 for the others |
| `fleet_endpoint_probe_latency_seconds` | endpoint, tier | latest probe latency of a tier |
| `fleet_endpoint_ttft_seconds` | endpoint | time to first token of the latest passing completion |
| `fleet_endpoint_tokens_per_second` | endpoint | decode rate of the latest passing completion |
| `fleet_endpoint_fail_streak` | endpoint | consecutive failed probes |
| `fleet_endpoint_last_ok_timestamp_seconds` | endpoint | when the real check last passed |
| `fleet_endpoint_incident_open` | endpoint | 1 while the endpoint has an open incident |
| `fleet_incidents_open` | | open incidents (endpoints and hosts) |
| `fleet_remediations_total` | rule, result | remediation attempts by rule and result |
| `fleet_host_reachable` | host | 1 when the host answers (or is not watched), 0 when not |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from supervisor.machine import State
from supervisor.ops.view import FleetView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class _Family:
    name: str
    kind: str
    help: str
    samples: list[tuple[Mapping[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((labels, value))


def escape(value: str) -> str:
    """A label value as the text format wants it: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if value != value:  # NaN
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _lines(family: _Family) -> Iterable[str]:
    yield f"# HELP {family.name} {family.help}"
    yield f"# TYPE {family.name} {family.kind}"
    for labels, value in family.samples:
        text = ",".join(f'{key}="{escape(val)}"' for key, val in labels.items())
        yield (
            f"{family.name}{{{text}}} {_number(value)}"
            if text
            else f"{family.name} {_number(value)}"
        )


def render(view: FleetView) -> str:
    """The /metrics body."""
    up = _Family("fleet_supervisor_up", "gauge", "1 while the daemon serves")
    up.add(1)
    start = _Family(
        "fleet_supervisor_start_time_seconds", "gauge", "when the daemon started (Unix time)"
    )
    start.add(view.started_at.timestamp())
    state = _Family(
        "fleet_endpoint_state", "gauge", "1 for the endpoint's current state, 0 for the others"
    )
    latency = _Family(
        "fleet_endpoint_probe_latency_seconds", "gauge", "latency of the latest probe of a tier"
    )
    ttft = _Family(
        "fleet_endpoint_ttft_seconds", "gauge", "time to first token of the latest good completion"
    )
    toks = _Family(
        "fleet_endpoint_tokens_per_second", "gauge", "decode rate of the latest good completion"
    )
    streak = _Family("fleet_endpoint_fail_streak", "gauge", "consecutive failed probes")
    last_ok = _Family(
        "fleet_endpoint_last_ok_timestamp_seconds", "gauge", "when the real check last passed"
    )
    incident = _Family(
        "fleet_endpoint_incident_open", "gauge", "1 while the endpoint has an open incident"
    )
    for e in view.endpoints:
        snap = e.snapshot
        for candidate in State:
            state.add(
                1 if snap.state == candidate.value else 0, endpoint=snap.name, state=candidate
            )
        for tier, seconds in sorted(e.latency_s.items()):
            latency.add(seconds, endpoint=snap.name, tier=tier)
        if snap.last_ttft_s is not None:
            ttft.add(snap.last_ttft_s, endpoint=snap.name)
        if snap.last_tok_s is not None:
            toks.add(snap.last_tok_s, endpoint=snap.name)
        streak.add(snap.fail_streak, endpoint=snap.name)
        if snap.last_ok_at is not None:
            last_ok.add(snap.last_ok_at.timestamp(), endpoint=snap.name)
        incident.add(1 if snap.incident_id is not None else 0, endpoint=snap.name)
    open_incidents = _Family(
        "fleet_incidents_open", "gauge", "open incidents (endpoints and hosts)"
    )
    open_incidents.add(view.open_incidents)
    remediations = _Family(
        "fleet_remediations_total", "counter", "remediation attempts by rule and result"
    )
    for (rule, result), count in view.remediations.items():
        remediations.add(count, rule=rule, result=result)
    reachable = _Family(
        "fleet_host_reachable", "gauge", "1 when the host answers (or is not watched), else 0"
    )
    for host in view.hosts:
        reachable.add(1 if host.reachable else 0, host=host.name)
    families = (
        up, start, state, latency, ttft, toks, streak, last_ok, incident, open_incidents,
        remediations, reachable,
    )  # fmt: skip
    return "".join(line + "\n" for family in families for line in _lines(family))

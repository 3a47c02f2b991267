"""/metrics: a `FleetView` through `prometheus_client` (a custom collector over the live daemon's
view, exposed by the library's own text writer). Every metric is a gauge except
`fleet_remediations_total`.

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
| `fleet_endpoint_availability` | endpoint, window | serving / supervised time, `24h` `7d` `30d` |
| `fleet_host_availability` | host, window | the same for a host |
| `fleet_endpoint_mttr_seconds` | endpoint | mean time to repair (incidents opened in 30 d) |
| `fleet_rule_mttr_seconds` | rule | the same per rule that diagnosed them |
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from supervisor.judge.machine import State
from supervisor.record.store.records import SubjectKind
from supervisor.tell.web.view import FleetView

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class FleetCollector(Collector):
    """The metric families of one view of the fleet."""

    def __init__(self, view: FleetView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view = self.view
        up = _gauge("fleet_supervisor_up", "1 while the daemon serves")
        up.add_metric([], 1)
        start = _gauge("fleet_supervisor_start_time_seconds", "when the daemon started (Unix time)")
        start.add_metric([], view.started_at.timestamp())
        yield from (up, start)
        yield from self._endpoints()
        open_incidents = _gauge("fleet_incidents_open", "open incidents (endpoints and hosts)")
        open_incidents.add_metric([], view.open_incidents)
        remediations = CounterMetricFamily(
            "fleet_remediations",
            "remediation attempts by rule and result",
            labels=["rule", "result"],
        )
        for (rule, result), count in view.remediations.items():
            remediations.add_metric([rule, result], count)
        reachable = _gauge(
            "fleet_host_reachable", "1 when the host answers (or is not watched), else 0", ("host",)
        )
        for host in view.hosts:
            reachable.add_metric([host.name], 1 if host.reachable else 0)
        yield from (open_incidents, remediations, reachable)
        yield from self._availability()

    def _availability(self) -> Iterator[Metric]:
        doc = "time serving / time supervised over the window (silences apart)"
        endpoints = _gauge("fleet_endpoint_availability", doc, ("endpoint", "window"))
        hosts = _gauge("fleet_host_availability", doc, ("host", "window"))
        for (kind, name), found in self.view.availability.items():
            family = endpoints if kind is SubjectKind.ENDPOINT else hosts
            for window in found.windows.values():
                if window.ratio is not None:
                    family.add_metric([name, window.name], window.ratio)
        doc = "mean time to repair, incidents opened in the last 30 days"
        by_endpoint = _gauge("fleet_endpoint_mttr_seconds", doc, ("endpoint",))
        for name, repair in self.view.repairs.by_subject.items():
            if repair.mean_s is not None:
                by_endpoint.add_metric([name], repair.mean_s)
        by_rule = _gauge("fleet_rule_mttr_seconds", doc, ("rule",))
        for rule, repair in self.view.repairs.by_rule.items():
            if repair.mean_s is not None:
                by_rule.add_metric([rule], repair.mean_s)
        yield from (endpoints, hosts, by_endpoint, by_rule)

    def _endpoints(self) -> Iterator[Metric]:
        one = ("endpoint",)
        state = _gauge(
            "fleet_endpoint_state",
            "1 for the endpoint's current state, 0 for the others",
            ("endpoint", "state"),
        )
        latency = _gauge(
            "fleet_endpoint_probe_latency_seconds",
            "latency of the latest probe of a tier",
            ("endpoint", "tier"),
        )
        ttft = _gauge(
            "fleet_endpoint_ttft_seconds", "time to first token of the latest good completion", one
        )
        toks = _gauge(
            "fleet_endpoint_tokens_per_second", "decode rate of the latest good completion", one
        )
        streak = _gauge("fleet_endpoint_fail_streak", "consecutive failed probes", one)
        last_ok = _gauge(
            "fleet_endpoint_last_ok_timestamp_seconds", "when the real check last passed", one
        )
        incident = _gauge(
            "fleet_endpoint_incident_open", "1 while the endpoint has an open incident", one
        )
        for e in self.view.endpoints:
            snap = e.snapshot
            for candidate in State:
                state.add_metric([snap.name, candidate.value], 1 if snap.state == candidate else 0)
            for tier, seconds in sorted(e.latency_s.items()):
                latency.add_metric([snap.name, tier], seconds)
            if snap.last_ttft_s is not None:
                ttft.add_metric([snap.name], snap.last_ttft_s)
            if snap.last_tok_s is not None:
                toks.add_metric([snap.name], snap.last_tok_s)
            streak.add_metric([snap.name], snap.fail_streak)
            if snap.last_ok_at is not None:
                last_ok.add_metric([snap.name], snap.last_ok_at.timestamp())
            incident.add_metric([snap.name], 1 if snap.incident_id is not None else 0)
        yield from (state, latency, ttft, toks, streak, last_ok, incident)


def render_metrics(view: FleetView, *more: Collector) -> bytes:
    """The /metrics body: the fleet's families, then those of `more` collectors (leadership)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in (FleetCollector(view), *more):
        registry.register(collector)
    return generate_latest(registry)

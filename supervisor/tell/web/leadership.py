"""Leadership for scrapers: three gauges, a `prometheus_client` collector beside the fleet's (what
it reads is `supervisor.record.store.who_leads`)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from supervisor.record.store.who_leads import LeaderView


class LeadershipCollector(Collector):
    def __init__(self, view: LeaderView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view = self.view
        leader = GaugeMetricFamily(
            "fleet_supervisor_leader",
            "1 while this instance holds the lease, else 0",
            labels=["instance"],
        )
        leader.add_metric([view.me], int(view.leading))
        epoch = GaugeMetricFamily(
            "fleet_supervisor_leader_epoch", "the lease's epoch (one more at every takeover)"
        )
        epoch.add_metric([], view.epoch)
        remaining = max(0.0, (view.expires_ms - view.now_ms) / 1000) if view.current else 0.0
        lease = GaugeMetricFamily(
            "fleet_supervisor_lease_remaining_seconds", "how long the lease holds unrenewed"
        )
        lease.add_metric([], remaining)
        yield from (leader, epoch, lease)

"""Leadership for scrapers: three gauges in the text exposition format. One small function so
that it can move with the rest of /metrics (`leadership_metrics` is the only place that writes
its text; what it reads is `supervisor.store.lease_view`)."""

from __future__ import annotations

from supervisor.ops.metrics import escape
from supervisor.store.lease_view import LeaderView


def leadership_metrics(view: LeaderView) -> str:
    """Three gauges in the text exposition format."""
    instance = escape(view.me)
    remaining = max(0.0, (view.expires_ms - view.now_ms) / 1000) if view.current else 0.0
    return (
        "# HELP fleet_supervisor_leader 1 while this instance holds the lease, else 0\n"
        "# TYPE fleet_supervisor_leader gauge\n"
        f'fleet_supervisor_leader{{instance="{instance}"}} {int(view.leading)}\n'
        "# HELP fleet_supervisor_leader_epoch the lease's epoch (one more at every takeover)\n"
        "# TYPE fleet_supervisor_leader_epoch gauge\n"
        f"fleet_supervisor_leader_epoch {view.epoch}\n"
        "# HELP fleet_supervisor_lease_remaining_seconds how long the lease holds unrenewed\n"
        "# TYPE fleet_supervisor_lease_remaining_seconds gauge\n"
        f"fleet_supervisor_lease_remaining_seconds {remaining:g}\n"
    )

"""What the daemon knows right now, as frozen records: read by /metrics and /status.

Live state (each endpoint's state, TTFT, tok/s; each host's reachability) comes from the
workers and host watchers in memory; history (latest probe latency per tier, open incidents,
remediation attempts by rule and result) comes from the store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from supervisor.core.streamstatus import StreamStatus, events_fields
from supervisor.core.timefmt import iso
from supervisor.judge.machine import HostState
from supervisor.record.availability import Availability, Repair, Repairs, availability, repairs
from supervisor.record.store.records import Snapshot, SubjectKind
from supervisor.record.store.store import Store

if TYPE_CHECKING:
    from supervisor.tell.web.source import FleetSource


RUNNING = "running"
"""The result of a remediation attempt that has not finished."""


@dataclass(frozen=True, kw_only=True)
class EndpointView:
    snapshot: Snapshot
    kind: str
    url: str
    latency_s: Mapping[str, float]  #: the latest probe latency per tier (liveness, deep)


@dataclass(frozen=True, kw_only=True)
class HostView:
    name: str
    local: bool
    state: str
    since: datetime | None
    incident_id: int | None
    last_reason: str
    events: StreamStatus | None = None  #: its unit-event stream: streaming, polling (why), ...

    @property
    def reachable(self) -> bool:
        return self.state != HostState.UNREACHABLE


@dataclass(frozen=True, kw_only=True)
class FleetView:
    at: datetime
    started_at: datetime
    endpoints: tuple[EndpointView, ...]
    hosts: tuple[HostView, ...]
    open_incidents: int
    remediations: Mapping[tuple[str, str], int]  #: (rule, result) -> attempts
    availability: Mapping[tuple[SubjectKind, str], Availability]  #: 24h, 7d, 30d
    repairs: Repairs  #: the time to repair per subject and per rule (30 d)


async def gather(daemon: FleetSource, started_at: datetime) -> FleetView:
    """The fleet as the live daemon sees it."""
    store = daemon.store
    endpoints = []
    for name, worker in list(daemon.workers.items()):
        endpoint = worker.endpoint
        endpoints.append(
            EndpointView(
                snapshot=worker.snapshot(),
                kind=endpoint.kind,
                url=endpoint.url,
                latency_s=await _latencies(store, name),
            )
        )
    hosts = host_views(daemon)
    counts = Counter((a.rule_id, a.outcome or RUNNING) for a in await store.attempts())
    now = daemon.clock.now()
    subjects = [(SubjectKind.ENDPOINT, e.snapshot.name) for e in endpoints]
    subjects += [(SubjectKind.HOST, h.name) for h in hosts]
    return FleetView(
        availability=await availability(store, subjects, now=now),
        repairs=await repairs(store, now=now),
        at=daemon.clock.now(),
        started_at=started_at,
        endpoints=tuple(endpoints),
        hosts=hosts,
        open_incidents=len(await store.incidents(open_only=True)),
        remediations=dict(sorted(counts.items())),
    )


def host_views(daemon: FleetSource) -> tuple[HostView, ...]:
    """Every configured host as its watcher sees it (no watcher: state `unknown`)."""
    hosts = []
    streams = daemon.unit_events.status()
    for name, host in daemon.config.hosts.items():
        watcher = daemon.hosts.get(name)
        hosts.append(
            HostView(
                name=name,
                local=host.local,
                state=watcher.state if watcher else "unknown",  # as `status`: no watcher, no state
                since=watcher.since if watcher else None,
                incident_id=watcher.incident_id if watcher else None,
                last_reason=watcher.last_reason if watcher else "",
                events=streams.get(name),
            )
        )
    return tuple(hosts)


async def _latencies(store: Store, endpoint: str) -> dict[str, float]:
    latest: dict[str, float] = {}
    for sample in await store.samples(endpoint, limit=20):  # newest first
        latest.setdefault(sample.tier, sample.latency_s)
    return latest


def status_document(view: FleetView) -> dict[str, Any]:
    """The `status --json` document (same keys as `supervisor.cli.status.collect`), live."""
    endpoints = []
    for e in view.endpoints:
        snap = e.snapshot
        endpoints.append(
            {
                "name": snap.name,
                "kind": e.kind,
                "url": e.url,
                "state": snap.state,
                "since": iso(snap.since),
                "incident_id": snap.incident_id,
                "last_reason": snap.last_reason,
                "last_ok_at": iso(snap.last_ok_at),
                "last_ttft_s": snap.last_ttft_s,
                "last_tok_s": snap.last_tok_s,
                "fail_streak": snap.fail_streak,
                "availability": view.availability[(SubjectKind.ENDPOINT, snap.name)].document(),
                "repair": view.repairs.by_subject.get(snap.name, Repair()).document(),
            }
        )
    hosts = [
        {
            "name": h.name,
            "local": h.local,
            "state": h.state,
            "since": iso(h.since),
            "incident_id": h.incident_id,
            "last_reason": h.last_reason,
            **events_fields(h.events),
            "availability": view.availability[(SubjectKind.HOST, h.name)].document(),
        }
        for h in view.hosts
    ]
    return {
        "generated_at": iso(view.at),
        "endpoints": endpoints,
        "hosts": hosts,
        "repair_by_rule": {rule: r.document() for rule, r in view.repairs.by_rule.items()},
    }

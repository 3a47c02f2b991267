"""`incidents` and `timeline ID`: the incident record, read from the store."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from supervisor.cli.common import CliError, load, open_store
from supervisor.cli.render import dump, table, when
from supervisor.config.models import FleetConfig
from supervisor.core.clock import utcnow
from supervisor.core.durations import format_duration
from supervisor.core.timefmt import iso
from supervisor.record.store.records import IncidentRow, TimelineRow
from supervisor.record.timeline.state import Transition


def incident_doc(row: IncidentRow) -> dict[str, Any]:
    """One incident in `--json` output (shape documented in docs/json.md)."""
    duration = row.duration
    return {
        "id": row.id,
        "subject_kind": row.subject_kind.value,
        "subject": row.subject,
        "opened_at": iso(row.opened_at),
        "closed_at": iso(row.closed_at),
        "duration_s": None if duration is None else round(duration.total_seconds(), 3),
        "cause": row.cause,
        "symptom": row.symptom,
        "diagnosis": row.diagnosis or None,
        "resolution": row.resolution,
        "state": row.last_state,
        "entries": row.entries,
    }


def entry_doc(row: TimelineRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "at": iso(row.at),
        "kind": row.kind.value,
        "type": row.record.tag,
        "version": row.record.version,
        "subject": row.subject,
        "summary": row.summary,
        "data": dict(row.data),
    }


def main_list(args: argparse.Namespace) -> int:
    config = load(args)
    rows = asyncio.run(_incidents(config, args))
    if args.json:
        print(dump({"incidents": [incident_doc(r) for r in rows]}))
        return 0
    if not rows:
        print("no incidents")
        return 0
    now = utcnow()
    lines = [
        [
            f"#{r.id}",
            r.subject,
            "open" if r.is_open else "closed",
            when(r.opened_at),
            format_duration((r.closed_at or now) - r.opened_at),
            r.last_state,
            r.cause,
        ]
        for r in rows
    ]
    print(table(["ID", "SUBJECT", "STATUS", "OPENED", "LASTED", "STATE", "CAUSE"], lines))
    return 0


async def _incidents(config: FleetConfig, args: argparse.Namespace) -> list[IncidentRow]:
    store = await open_store(config)
    try:
        since = utcnow() - args.since if args.since is not None else None
        return await store.incidents(subject=args.endpoint, since=since, open_only=args.open)
    finally:
        await store.close()


def main_timeline(args: argparse.Namespace) -> int:
    config = load(args)
    incident, rows = asyncio.run(_timeline(config, args.id))
    if args.json:
        print(dump({"incident": incident_doc(incident), "timeline": [entry_doc(r) for r in rows]}))
        return 0
    status = "open" if incident.is_open else f"closed {when(incident.closed_at)}"
    print(f"incident #{incident.id} {incident.subject}: {incident.cause} ({status})")
    if incident.resolution:
        print(f"resolved: {incident.resolution}")
    for row in rows:
        print("\n".join(entry_lines(row)))
    return 0


def entry_lines(row: TimelineRow) -> list[str]:
    """One timeline entry for people: its summary, then the probes that caused it, if any."""
    lines = [f"  {when(row.at)}  {row.kind.value:<12} {row.summary}"]
    if row.type != Transition.TAG:  # decode only what may carry probes
        return lines
    record = row.record
    if isinstance(record, Transition):
        for probe in record.probes or ():
            what = f"{probe.tier} {probe.check}: {probe.reason}"
            lines.append(f"{'':26}{probe.at.strftime('%H:%M:%S')} {what}")
    return lines


async def _timeline(config: FleetConfig, incident_id: int) -> tuple[IncidentRow, list[TimelineRow]]:
    store = await open_store(config)
    try:
        incident = await store.incident(incident_id)
        if incident is None:
            raise CliError(f"no incident #{incident_id}")
        return incident, await store.timeline(incident_id)
    finally:
        await store.close()

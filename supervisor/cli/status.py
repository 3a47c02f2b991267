"""`status`: every configured endpoint and host, as the store last saw it."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from supervisor.cli.common import load, open_store
from supervisor.cli.render import ago, dump, num, table
from supervisor.config.models import FleetConfig
from supervisor.core.clock import utcnow
from supervisor.core.streamstatus import StreamPhase, events_fields
from supervisor.core.timefmt import iso
from supervisor.record.availability import Repair, availability, repairs
from supervisor.record.store.cursors import read_streams
from supervisor.record.store.doctor import last_doctor_run
from supervisor.record.store.records import Snapshot, SubjectKind
from supervisor.record.store.room import unwritable
from supervisor.record.store.target import store_target
from supervisor.record.store.who_leads import leader_view, leadership_document, leadership_line


def main(args: argparse.Namespace) -> int:
    config = load(args)
    document = asyncio.run(collect(config))
    print(dump(document) if args.json else render_status(document))
    return 0


async def collect(config: FleetConfig) -> dict[str, Any]:
    """The `status --json` document (its shape is documented in docs/json.md)."""
    store = await open_store(config)
    try:
        snapshots = {(s.kind, s.name): s for s in await store.snapshots()}
        leader = await leader_view(store)
        streams = (await read_streams(store)).status  # the leader's journal streams, as saved
        now = utcnow()
        subjects = [(SubjectKind.ENDPOINT, name) for name in config.endpoints]
        subjects += [(SubjectKind.HOST, name) for name in config.hosts]
        found = await availability(store, subjects, now=now)
        fixed = await repairs(store, now=now)
        doctor = await last_doctor_run(store)
    finally:
        await store.close()
    endpoints = []
    for name, endpoint in config.endpoints.items():
        snap = snapshots.get((SubjectKind.ENDPOINT, name))
        endpoints.append(
            {"name": name, "kind": endpoint.kind, "url": endpoint.url, **_fields(snap)}
            | {
                "last_ok_at": iso(snap.last_ok_at) if snap else None,
                "last_ttft_s": snap.last_ttft_s if snap else None,
                "last_tok_s": snap.last_tok_s if snap else None,
                "fail_streak": snap.fail_streak if snap else 0,
                "availability": found[(SubjectKind.ENDPOINT, name)].document(),
                "repair": fixed.by_subject.get(name, Repair()).document(),
            }
        )
    hosts = [
        {"name": name, "local": host.local, **_fields(snapshots.get((SubjectKind.HOST, name)))}
        | events_fields(streams.get(name))
        | {"availability": found[(SubjectKind.HOST, name)].document()}
        for name, host in config.hosts.items()
    ]
    problem = unwritable(store_target(config.store))
    return {
        "generated_at": iso(now),
        "endpoints": endpoints,
        "hosts": hosts,
        "repair_by_rule": {rule: r.document() for rule, r in fixed.by_rule.items()},
        "leadership": leadership_document(leader) | {"line": leadership_line(leader)},
        "doctor": None
        if doctor is None
        else {
            "at": iso(doctor.at),
            "ok": doctor.ok,
            "summary": doctor.summary,
            "line": doctor.line(),
        },
        "store": {"writable": not problem, "problem": problem or None},
    }


def _fields(snap: Snapshot | None) -> dict[str, Any]:
    return {
        "state": snap.state if snap else "unknown",
        "since": iso(snap.since) if snap else None,
        "incident_id": snap.incident_id if snap else None,
        "last_reason": snap.last_reason if snap else "",
    }


def render_status(document: dict[str, Any]) -> str:
    from datetime import datetime

    now = utcnow()

    def parse(value: str | None) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))

    rows = [
        [
            e["name"],
            e["state"],
            ago(parse(e["since"]), now),
            "-" if e["incident_id"] is None else f"#{e['incident_id']}",
            num(e["last_ttft_s"], "{:.2f}s"),
            num(e["last_tok_s"], "{:.1f}"),
            e["last_reason"] or "-",
        ]
        for e in document["endpoints"]
    ]
    out = table(["ENDPOINT", "STATE", "SINCE", "INCIDENT", "TTFT", "TOK/S", "LAST PROBLEM"], rows)
    remote = [h for h in document["hosts"] if not h["local"]]
    if remote:
        host_rows = [
            [h["name"], h["state"], ago(parse(h["since"]), now), h["last_reason"] or "-"]
            for h in remote
        ]
        out += "\n\n" + table(["HOST", "STATE", "SINCE", "LAST PROBLEM"], host_rows)
    line: str = document["leadership"]["line"]
    doctor = document.get("doctor")
    if doctor is not None:
        line += f"\n{doctor['line']}" + ("" if doctor["ok"] else ": run `fleet-supervisor doctor`")
    store = document.get("store") or {}
    if store.get("problem"):
        line += f"\nstore: cannot be written: {store['problem']}"
    return f"{out}\n\n{line}" + polling_warnings(document["hosts"])


def polling_warnings(hosts: list[dict[str, Any]]) -> str:
    """A line per host whose unit-event stream fell back to polling (deaths are then seen only
    every 30 s, or by the probes)."""
    lines = [
        f"warning: host {h['name']} unit events: {h['events']}"
        for h in hosts
        if h.get("events_phase") == StreamPhase.POLLING
    ]
    return "\n\n" + "\n".join(lines) if lines else ""

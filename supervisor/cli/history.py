"""`rules draft INCIDENT` and `rules replay`: rules against the fleet's own history.

`draft` writes a rule, its fixture and a runbook stub from the stored evidence of one incident
(its last diagnosis that gathered some); `replay` evaluates a playbook on the stored evidence of
every diagnosis of the incidents of the last `--since` and prints where its decisions differ
from those taken then (exit 1 when one does, as a failed check).
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from supervisor.cli.common import CliError, load, open_store
from supervisor.cli.render import dump
from supervisor.config.models import FleetConfig
from supervisor.core.clock import utcnow
from supervisor.core.durations import format_duration
from supervisor.core.timefmt import iso
from supervisor.playbook.draft import DraftError, draft_rule, write_draft
from supervisor.playbook.history import Round, rounds_of
from supervisor.playbook.loader import Playbook, load_playbook
from supervisor.playbook.model import RULE_ID
from supervisor.playbook.registries import collectors_or_default
from supervisor.playbook.replay import ReplayReport, replay
from supervisor.record.store.records import IncidentRow

DEFAULT_SINCE = timedelta(days=30)


def main_draft(args: argparse.Namespace, folder: Path) -> int:
    config = load(args)
    playbook = load_playbook(folder)
    out = Path(args.out) if args.out else folder
    incident, rounds = asyncio.run(_incident(config, args.incident))
    with_evidence = [r for r in rounds if any(not e.error for e in r.evidence)]
    if not with_evidence:
        raise CliError(
            f"incident #{incident.id} has no stored evidence (no diagnosis gathered any): "
            "nothing to draft a rule from"
        )
    round_ = with_evidence[-1]
    rule_id = args.rule_id or f"{_slug(round_.endpoint)}-incident-{incident.id}"
    if not RULE_ID.fullmatch(rule_id):
        raise CliError(
            f"invalid rule id {rule_id!r} (use lowercase letters, digits and '-', "
            "starting with either)"
        )
    _check_new(rule_id, playbook, out)
    try:
        draft = draft_rule(
            round_,
            rule_id=rule_id,
            opened=iso(incident.opened_at) or "",
            config=config,
            playbook=playbook,
            collectors=collectors_or_default(None),
            alone=out.resolve() != folder.resolve(),
        )
        written = write_draft(draft, out)
    except DraftError as exc:
        raise CliError(str(exc)) from None
    decided = round_.decided or "no rule"
    print(
        f"drafted {rule_id} from incident #{incident.id} ({round_.endpoint} {round_.state}, "
        f"when {decided} matched): {draft.conditions} conditions on {draft.scope}, "
        "mode confirm"
    )
    print("\n".join(f"wrote {path}" for path in written))
    fixture = out / "tests" / f"{rule_id}.yaml"
    print(f"next: fleet-supervisor rules test {fixture} --playbook {out}")
    print(f"      fleet-supervisor rules replay --playbook {out}")
    return 0


def _slug(name: str) -> str:
    """An endpoint name as a rule id's words: `Qwen_3.5` -> `qwen-3-5`."""
    words = "".join(c if c.isascii() and c.isalnum() else " " for c in name.lower()).split()
    return "-".join(words) or "endpoint"


def _check_new(rule_id: str, playbook: Playbook, out: Path) -> None:
    for rules in (playbook, load_playbook(out) if out.is_dir() else Playbook()):
        rule = rules.by_id.get(rule_id)
        if rule is not None:
            raise CliError(f"rule {rule_id!r} already exists ({rule.source}): choose another --id")
        broken = next((p.file for p in rules.errors if p.rule_id == rule_id), None)
        if broken is not None:
            raise CliError(f"rule {rule_id!r} already exists ({broken}): choose another --id")


async def _incident(config: FleetConfig, incident_id: int) -> tuple[IncidentRow, list[Round]]:
    store = await open_store(config)
    try:
        incident = await store.incident(incident_id)
        if incident is None:
            raise CliError(f"no incident #{incident_id}")
        return incident, rounds_of(incident_id, await store.timeline(incident_id))
    finally:
        await store.close()


def main_replay(args: argparse.Namespace, folder: Path) -> int:
    config = load(args)
    playbook = load_playbook(folder)
    if playbook.unreadable:
        raise CliError(playbook.lines()[0])
    since: timedelta = args.since or DEFAULT_SINCE
    start = utcnow() - since
    report = asyncio.run(_replay(config, playbook, start))
    if getattr(args, "json", False):
        print(dump(_json(report, playbook, start)))
    else:
        print("\n".join(_lines(report, playbook, since)))
    return 1 if report.differences or playbook.errors else 0


async def _replay(config: FleetConfig, playbook: Playbook, since: datetime) -> ReplayReport:
    store = await open_store(config)
    try:
        incidents = sorted(await store.incidents(since=since), key=lambda row: row.id)
        rounds = [
            found
            for incident in incidents
            for found in rounds_of(incident.id, await store.timeline(incident.id))
        ]
    finally:
        await store.close()
    return await replay(rounds, playbook, config, collectors_or_default(None))


def _lines(report: ReplayReport, playbook: Playbook, since: timedelta) -> list[str]:
    lines = _difference_lines(report)
    lines.extend(line for change in report.changes() for line in change.lines())
    lines.extend(f"skipped {why}" for why in report.skipped)
    lines.extend(playbook.lines())
    count = len(report.differences)
    verdict = f"{count} differ{'s' if count == 1 else ''}" if count else "no decision differs"
    lines.append(
        f"replayed {_count(len(report.replayed), 'diagnosis', 'diagnoses')} of "
        f"{_count(report.incidents, 'incident', 'incidents')} of the last "
        f"{format_duration(since)} against {playbook.folder}: {verdict}"
    )
    return lines


def _difference_lines(report: ReplayReport) -> list[str]:
    """A line per differing diagnosis; the same difference in several diagnoses of one
    incident (an escalated endpoint looked again and decided the same) once, counted."""
    counted: dict[str, int] = {}
    for replayed in report.differences:
        line = replayed.line()
        counted[line] = counted.get(line, 0) + 1
    return [line if n == 1 else f"{line} ({n} diagnoses)" for line, n in counted.items()]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _json(report: ReplayReport, playbook: Playbook, since: datetime) -> dict[str, Any]:
    return {
        "playbook": str(playbook.folder),
        "since": iso(since),
        "incidents": report.incidents,
        "diagnoses": len(report.replayed),
        "differences": [
            {
                "incident": r.round.incident_id,
                "endpoint": r.round.endpoint,
                "state": r.round.state,
                "at": iso(r.round.at),
                "decided": r.round.decided,
                "now": r.now,
                "not_gathered": list(r.missing),
            }
            for r in report.differences
        ],
        "rules": [
            {
                "rule": change.rule,
                "now_matches": list(change.now_matches),
                "no_longer_matches": list(change.no_longer_matches),
            }
            for change in report.changes()
        ],
        "skipped": list(report.skipped),
        "problems": playbook.lines(),
    }

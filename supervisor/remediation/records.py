"""Timeline entries for what a repair found and did: the diagnosis with every rule tried, every
evidence run with its commands, every step with its command lines, exit codes and output tails."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from supervisor.evidence.base import FactValue
from supervisor.executor import CommandResult
from supervisor.playbook.results import Diagnosis, EvidenceRun
from supervisor.remediation.steps import StepRun
from supervisor.store import EntryKind, JSONValue, TimelineEntry


def command_data(result: CommandResult) -> dict[str, JSONValue]:
    return {
        "host": result.host,
        "command": result.command,
        "exit_status": result.exit_status,
        "duration_s": round(result.duration_s, 3),
        "error": result.error,
        "dry_run": result.dry_run,
        "output_tail": result.output_tail(),
    }


def _fact(value: FactValue) -> JSONValue:
    return list(value) if isinstance(value, tuple) else value


def facts_data(facts: Mapping[str, FactValue]) -> dict[str, JSONValue]:
    return {name: _fact(value) for name, value in facts.items()}


def diagnosis_entry(diagnosis: Diagnosis, subject: str, at: datetime) -> TimelineEntry:
    lines = diagnosis.lines()
    rule = diagnosis.matched.rule.id if diagnosis.matched else None
    return TimelineEntry(
        kind=EntryKind.DIAGNOSIS,
        at=at,
        subject=subject,
        summary=lines[0],
        data={"rule": rule, "lines": list(lines[1:])},
    )


def evidence_entry(run: EvidenceRun, subject: str, at: datetime) -> TimelineEntry:
    found = run.evidence
    status = found.error or f"{len(found.facts)} facts"
    return TimelineEntry(
        kind=EntryKind.EVIDENCE,
        at=at,
        subject=subject,
        summary=f"{run.collector} ({run.evidence_id}) on {run.scope}: {status}",
        data={
            "collector": run.collector,
            "scope": run.scope,
            "error": found.error,
            "facts": facts_data(found.facts),
            "commands": [command_data(c) for c in found.commands],
        },
    )


def step_entry(run: StepRun, subject: str, at: datetime, *, dry_run: bool) -> TimelineEntry:
    outcome = run.outcome
    verdict = "planned" if dry_run else ("ok" if outcome.ok else "failed")
    return TimelineEntry(
        kind=EntryKind.ACTION,
        at=at,
        subject=subject,
        summary=f"step {run.index + 1} {run.action} on {run.target}: {verdict}: {outcome.summary}",
        data={
            "action": run.action,
            "target": run.target,
            "ok": outcome.ok,
            "needs_person": outcome.needs_person,
            "commands": [command_data(c) for c in outcome.commands],
        },
    )


def note(
    kind: EntryKind, subject: str, at: datetime, summary: str, **data: JSONValue
) -> TimelineEntry:
    return TimelineEntry(kind=kind, at=at, subject=subject, summary=summary, data=data)

"""Timeline records of what a repair found and did: the diagnosis with every rule tried, every
evidence run with its commands, every step with its command lines, exit codes and output tails."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import cast

from supervisor.execute.base import CommandResult
from supervisor.playbook.evidence.base import FactValue
from supervisor.playbook.evidence.restarts import Restart
from supervisor.playbook.results import DiagnosisResult, EvidenceRun
from supervisor.record.store.records import TimelineEntry
from supervisor.record.timeline.base import JSONValue, Record
from supervisor.record.timeline.parts import CommandRun
from supervisor.record.timeline.repair import Diagnosis as DiagnosisRecord
from supervisor.record.timeline.repair import Evidence, Settled, StepRan
from supervisor.repair.steps import StepRun


def command_run(result: CommandResult) -> CommandRun:
    return CommandRun(
        host=result.host,
        command=result.command,
        exit_status=result.exit_status,
        duration_s=round(result.duration_s, 3),
        error=result.error,
        dry_run=result.dry_run,
        output_tail=result.output_tail(),
    )


def _fact(value: FactValue) -> JSONValue:
    return list(value) if isinstance(value, tuple) else value


def facts_data(facts: Mapping[str, FactValue]) -> dict[str, JSONValue]:
    return {name: _fact(value) for name, value in facts.items()}


def entry(record: Record, subject: str, at: datetime) -> TimelineEntry:
    return TimelineEntry(at=at, subject=subject, record=record)


def diagnosis_entry(diagnosis: DiagnosisResult, subject: str, at: datetime) -> TimelineEntry:
    match = diagnosis.matched
    record = DiagnosisRecord(
        endpoint=diagnosis.endpoint,
        state=diagnosis.state,
        rule=match.rule.id if match else None,
        title=match.rule.title if match else "",
        scopes=tuple(r.scope.label for r in match.scopes) if match else (),
        facts={r.scope.label: facts_data(r.facts.values) for r in match.scopes} if match else {},
        lines=tuple(diagnosis.lines()[1:]),
    )
    return entry(record, subject, at)


def evidence_entry(run: EvidenceRun, subject: str, at: datetime) -> TimelineEntry:
    found = run.evidence
    record = Evidence(
        evidence_id=run.evidence_id,
        collector=run.collector,
        scope=run.scope,
        error=found.error,
        facts=facts_data(found.facts),
        commands=tuple(command_run(c) for c in found.commands),
        params=cast(dict[str, JSONValue], dict(run.params)),  # model_dump(mode="json")
    )
    return entry(record, subject, at)


def step_entry(run: StepRun, subject: str, at: datetime, *, dry_run: bool) -> TimelineEntry:
    outcome = run.outcome
    record = StepRan(
        index=run.index,
        action=run.action,
        target=run.target,
        ok=outcome.ok,
        planned=dry_run,
        result=outcome.summary,
        needs_person=outcome.needs_person,
        commands=tuple(command_run(c) for c in outcome.commands),
    )
    return entry(record, subject, at)


def settled_entry(restart: Restart, subject: str, at: datetime) -> TimelineEntry:
    record = Settled(
        scope=restart.scope,
        host=restart.host,
        unit=restart.unit,
        outcome=restart.outcome.value,
        before=restart.before,
        after=restart.after,
        waited_s=restart.waited_s,
        bound_s=restart.bound_s,
        waited_for=restart.waited_for,
    )
    return entry(record, subject, at)

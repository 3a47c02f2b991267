"""The rules in force for the page: each valid rule (mode, severity, what it applies to, its
actions, status with warnings), each file a problem disabled, and the rule's last matches (the
latest diagnosis entries that named it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from supervisor.playbook.loader import Playbook
from supervisor.playbook.problems import Level
from supervisor.record.store import TimelineRow
from supervisor.record.timeline import Diagnosis

MATCHES_SHOWN = 3


@dataclass(frozen=True, kw_only=True)
class Match:
    at: datetime
    endpoint: str
    incident_id: int


@dataclass(frozen=True, kw_only=True)
class RuleRow:
    id: str
    file: str
    title: str = ""
    mode: str = "-"
    severity: str = "-"
    applies: str = "-"
    actions: str = "-"
    status: str = "ok"
    problems: tuple[str, ...] = ()
    matches: tuple[Match, ...] = ()


def rule_rows(playbook: Playbook, diagnoses: list[TimelineRow]) -> list[RuleRow]:
    matches: dict[str, list[Match]] = {}
    for row in diagnoses:  # newest first
        record = row.record
        if isinstance(record, Diagnosis) and record.rule is not None:
            found = matches.setdefault(record.rule, [])
            if len(found) < MATCHES_SHOWN:
                found.append(Match(at=row.at, endpoint=row.subject, incident_id=row.incident_id))
    rows = []
    for rule in playbook.rules:
        warnings = tuple(
            str(p) for p in playbook.problems if p.file == rule.source and p.level is Level.WARNING
        )
        scope = rule.applies_to
        applies = [
            f"{key} {','.join(values)}"
            for key, values in (("kinds", scope.kinds), ("endpoints", scope.endpoints))
            if values
        ]
        applies.append(f"states {','.join(str(s) for s in scope.states)}")
        rows.append(
            RuleRow(
                id=rule.id,
                file=rule.source,
                title=rule.title,
                mode=str(rule.mode),
                severity=str(rule.severity),
                applies="; ".join(applies),
                actions=", ".join(step.action for step in rule.actions) or "-",
                status=f"ok ({len(warnings)} warnings)" if warnings else "ok",
                problems=warnings,
                matches=tuple(matches.get(rule.id, ())),
            )
        )
    for file in playbook.disabled:
        problems = tuple(str(p) for p in playbook.errors if p.file == file)
        rows.append(
            RuleRow(id=file.rsplit("/", 1)[-1], file=file, status="disabled", problems=problems)
        )
    return rows

"""The rules in force for the page: each valid rule (mode, severity, what it applies to, its
actions, status with warnings), each file a problem disabled, and what each rule did lately: the
incidents it matched, how each ended (healed, escalated, not verified), and the median time
from an incident's opening to the verification that healed it. Read in one query."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import select

from supervisor.core.durations import format_duration
from supervisor.playbook.loader import Playbook
from supervisor.playbook.problems import Level
from supervisor.record.store.schema import incidents, timeline
from supervisor.record.store.store import Store
from supervisor.record.timeline.codec import decode
from supervisor.record.timeline.repair import Diagnosis, Escalation, Verification

MATCHES_SHOWN = 3
WINDOW = timedelta(days=30)
"""How far back the page looks for a rule's matches."""


class Ending(StrEnum):
    """How an incident a rule matched ended, as far as that rule goes: the last word of its
    verifications and escalations in the incident."""

    HEALED = "healed"  #: its repair was verified by a real completion
    ESCALATED = "escalated"  #: a person was called (budget spent, a step failed, confirm, manual)
    NOT_VERIFIED = "not verified"  #: its repair ran, no real completion passed in time
    OPEN = "open"  #: none of these yet, the incident is open
    NO_REPAIR = "no repair"  #: none of these, the incident closed (it came back, a dry run)

    @property
    def css(self) -> str:
        return _CSS.get(self, "muted")


_CSS = {Ending.HEALED: "ok", Ending.ESCALATED: "error", Ending.NOT_VERIFIED: "error"}


@dataclass(frozen=True, kw_only=True)
class Match:
    at: datetime  #: when the rule first matched in the incident
    endpoint: str
    incident_id: int
    ending: Ending = Ending.OPEN
    heal_s: float | None = None  #: from the incident's opening to the verification that healed it


@dataclass(frozen=True, kw_only=True)
class RuleHistory:
    """What one rule did within the window: its incidents, newest first."""

    matches: tuple[Match, ...] = ()

    def count(self, ending: Ending) -> int:
        return sum(match.ending is ending for match in self.matches)

    @property
    def median_heal_s(self) -> float | None:
        heals = [m.heal_s for m in self.matches if m.heal_s is not None]
        return statistics.median(heals) if heals else None

    @property
    def summary(self) -> str:
        """`3 incidents: 2 healed, 1 escalated; median 42s to heal`."""
        if not self.matches:
            return ""
        count = len(self.matches)
        endings = [f"{self.count(e)} {e}" for e in Ending if self.count(e)]
        line = f"{count} incident{'s' if count > 1 else ''}: {', '.join(endings)}"
        median = self.median_heal_s
        if median is not None:
            line += f"; median {format_duration(median)} to heal"
        return line


@dataclass
class _Seen:
    at: datetime
    endpoint: str
    incident_id: int
    opened_at: datetime
    closed: bool
    ending: Ending | None = None
    healed_at: datetime | None = None


async def rule_histories(store: Store, *, since: datetime) -> dict[str, RuleHistory]:
    """Rule id -> what it matched since `since` and how each incident ended: the diagnosis,
    verification and escalation entries of that window with their incidents, in one query."""
    query = (
        select(
            timeline.c.incident_id,
            timeline.c.at,
            timeline.c.subject,
            timeline.c.type,
            timeline.c.version,
            timeline.c.data,
            incidents.c.opened_at,
            incidents.c.closed_at,
        )
        .join(incidents, incidents.c.id == timeline.c.incident_id)
        .where(timeline.c.type.in_(_TYPES), timeline.c.at >= since)
        .order_by(timeline.c.id)
    )
    seen: dict[tuple[str, int], _Seen] = {}
    async with store.tx(write=False) as conn:
        rows = (await conn.execute(query)).all()
    for row in rows:
        record = decode(row.type, row.version, row.data)
        key_rule = getattr(record, "rule", None)
        if not isinstance(key_rule, str):
            continue
        key = (key_rule, row.incident_id)
        if isinstance(record, Diagnosis):
            seen.setdefault(
                key,
                _Seen(
                    at=row.at,
                    endpoint=row.subject,
                    incident_id=row.incident_id,
                    opened_at=row.opened_at,
                    closed=row.closed_at is not None,
                ),
            )
            continue
        found = seen.get(key)
        if found is None:
            continue  # a person's /restart: no diagnosis matched it
        if isinstance(record, Verification):
            found.ending = Ending.HEALED if record.ok else Ending.NOT_VERIFIED
            found.healed_at = row.at if record.ok else None
        elif isinstance(record, Escalation) and not record.dry_run:
            found.ending, found.healed_at = Ending.ESCALATED, None
    per_rule: dict[str, list[Match]] = {}
    for (rule_id, _), found in seen.items():
        per_rule.setdefault(rule_id, []).append(_match(found))
    return {
        rule_id: RuleHistory(matches=tuple(sorted(found, key=_newest)))
        for rule_id, found in per_rule.items()
    }


_TYPES = (Diagnosis.TAG, Verification.TAG, Escalation.TAG)


def _match(found: _Seen) -> Match:
    ending = found.ending or (Ending.NO_REPAIR if found.closed else Ending.OPEN)
    heal = found.healed_at
    return Match(
        at=found.at,
        endpoint=found.endpoint,
        incident_id=found.incident_id,
        ending=ending,
        heal_s=(heal - found.opened_at).total_seconds() if heal is not None else None,
    )


def _newest(match: Match) -> tuple[float, int]:
    return (-match.at.timestamp(), -match.incident_id)


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
    history: RuleHistory = field(default_factory=RuleHistory)

    @property
    def matches(self) -> tuple[Match, ...]:
        """The latest incidents it matched (newest first)."""
        return self.history.matches[:MATCHES_SHOWN]


def rule_rows(playbook: Playbook, histories: Mapping[str, RuleHistory]) -> list[RuleRow]:
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
                history=histories.get(rule.id, RuleHistory()),
            )
        )
    for file in playbook.disabled:
        problems = tuple(str(p) for p in playbook.errors if p.file == file)
        rows.append(
            RuleRow(id=file.rsplit("/", 1)[-1], file=file, status="disabled", problems=problems)
        )
    return rows

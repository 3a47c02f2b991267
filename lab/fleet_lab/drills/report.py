"""What a drill saw the daemon do about one injected fault, built from the incident's timeline:
detected, diagnosed, acted, verified (or escalated), with the times between them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from fleet_lab.drills.bot import Notified
from fleet_lab.drills.faults import Expect
from supervisor.record.store.records import TimelineRow
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.repair import Diagnosis, StepRan

#: The states a transition into says the daemon noticed the fault.
DETECTED = ("down", "unreachable", "degraded", "busy")

R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class DrillStep:
    summary: str
    exit_statuses: tuple[int | None, ...]
    commands: tuple[str, ...] = ()  #: `[host] command` of each command it ran, in order


@dataclass(frozen=True)
class DrillReport:
    """What the daemon did about one injected fault."""

    drill: str
    rule: str
    incident: int | None
    diagnosis: str  #: the first diagnosis of the incident
    steps: tuple[DrillStep, ...]
    outcome: str | None
    detect_s: float | None
    heal_s: float | None
    problem: str = ""
    expect: Expect = Expect.HEAL
    escalate_s: float | None = None  #: detected -> escalated
    escalation: str = ""  #: the decision that called a person
    host_incident: int | None = None  #: a host's own incident opened during the drill
    final_state: str = ""
    attempts: int = 0  #: repair attempts the daemon started for the endpoint
    endpoint: str = "ds4"  #: the endpoint the drill is about
    notified: Notified = field(
        default_factory=Notified
    )  #: what the Bot API stub received about the incident
    timeline: tuple[TimelineRow, ...] = ()  #: the incident's (or the host incident's) timeline
    main_pids: tuple[str, ...] = ()  #: the drilled unit's MainPID before the fault and at the end
    deep_checks: int | None = None  #: real checks the daemon sent from the fault to the end
    held_s: float | None = None  #: how long the fault was held (a saturation)
    #: every diagnosis of the incident, in order, and the one its first step followed ("" for
    #: none): a fault may pass through a state another rule rightly waits out first
    diagnoses: tuple[str, ...] = ()
    acted_on: str = ""
    incidents: tuple[str, ...] = ()  #: every incident's subject, oldest first
    #: a route the fault blocks -> the reason it was first shown unreachable for
    blocked: Mapping[str, str] = field(default_factory=dict)
    routes_opened: tuple[str, ...] = ()  #: routes that opened an incident of their own
    attempts_elsewhere: int = 0  #: repair attempts at any endpoint but the drilled one

    @property
    def healed(self) -> bool:
        return not self.problem and self.outcome == "healed" and self.detect_s is not None

    @property
    def passed(self) -> bool:
        """The daemon did what the fault's `expect` asks (the tests check the details)."""
        if self.problem or self.detect_s is None or not self.notified.count:
            return False
        if self.blocked and (
            self.routes_opened or self.attempts_elsewhere or set(self.incidents) != {self.endpoint}
        ):
            return False  # a route's failure was the cause's: no incident, no repair of its own
        if self.expect is Expect.HEAL:
            return self.healed
        if self.expect is Expect.LEAVE_ALONE:
            return not self.steps and not self.escalation and self.heal_s is not None
        if self.expect is Expect.BUSY:
            unchanged = len(set(self.main_pids)) == 1 and len(self.main_pids) == 2
            return self.final_state == "busy" and not self.attempts and not self.steps and unchanged
        return bool(self.escalation) and self.final_state == "escalated" and self.attempts <= 1

    def lines(self) -> list[str]:
        """detected / diagnosed / acted / verified, one line each, with the times."""
        detect = f"{self.detect_s:.1f}s" if self.detect_s is not None else "-"
        heal = f"{self.heal_s:.1f}s" if self.heal_s is not None else "-"
        acted = "; ".join(s.summary for s in self.steps) or "nothing"
        verdict = "passed" if self.passed else "FAILED"
        if self.expect is Expect.HEAL:
            verdict = "healed" if self.healed else "NOT healed"
        lines = [
            f"drill {self.drill} (must {self.expect}): {verdict}",
            f"  detected:  incident {self.incident} after {detect}"
            + (f" (host incident {self.host_incident})" if self.host_incident else ""),
            f"  diagnosed: {self.diagnosis or '-'}",
            f"  acted:     {acted}",
        ]
        if self.expect is Expect.ESCALATE:
            after = f"{self.escalate_s:.1f}s" if self.escalate_s is not None else "-"
            lines.append(f"  escalated: {self.escalation or '-'} ({after} after it was detected)")
            lines.append(f"  finally:   {self.final_state or '-'}")
        else:
            lines.append(
                f"  verified:  attempt {self.outcome or '-'}; healed {heal} after detection"
            )
        for route, reason in self.blocked.items():
            lines.append(f"  route:     {route} {reason}; healthy again with it")
        lines.append(f"  notified:  {self.notified.count} Telegram message(s) about it")
        if self.notified.count:
            lines.append(f"  first:     {self.notified.first.replace(chr(10), ' / ')}")
        return lines + ([f"  problem:   {self.problem}"] if self.problem else [])


def first(
    timeline: list[TimelineRow], of: type[R], where: Callable[[R], bool] | None = None
) -> tuple[TimelineRow, R] | None:
    """The first row whose record is an `of` for which `where` holds, with that record."""
    for row in timeline:
        record = row.record
        if isinstance(record, of) and (where is None or where(record)):
            return row, record
    return None


def at(found: tuple[TimelineRow, object] | None) -> datetime | None:
    """When the row `first` found was written (None when it found none)."""
    return found[0].at if found else None


def seconds(start: datetime | None, end: datetime | None) -> float | None:
    return (end - start).total_seconds() if start and end else None


def steps_of(timeline: list[TimelineRow]) -> tuple[DrillStep, ...]:
    """The action steps the daemon ran, with each command's exit status."""
    return tuple(
        DrillStep(
            summary=row.record.summary,
            exit_statuses=tuple(c.exit_status for c in row.record.commands),
            commands=tuple(f"[{c.host}] {c.command}" for c in row.record.commands),
        )
        for row in timeline
        if isinstance(row.record, StepRan)
    )


def diagnoses_of(timeline: list[TimelineRow]) -> tuple[tuple[str, ...], str]:
    """Every diagnosis's summary in order, and the last one before the first step ran."""
    said: list[str] = []
    acted_on = ""
    for row in timeline:
        if isinstance(row.record, Diagnosis):
            said.append(row.record.summary)
        elif isinstance(row.record, StepRan) and not acted_on and said:
            acted_on = said[-1]
    return tuple(said), acted_on

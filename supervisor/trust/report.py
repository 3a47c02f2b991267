"""What an observe-only period (`run --dry-run`) saw, from the store: the incidents (cause,
how long), what it would have done (rule, commands), what it could not have done (a person
needed, evidence it could not gather, a command the generated sudoers does not allow, a step
that failed), and the endpoints that were busy and for how long. `fleet-supervisor report`."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from supervisor.core.durations import format_duration
from supervisor.judge.machine import State
from supervisor.playbook.evidence.declare import NO_CONTAINER, NO_HOST, NO_UNIT
from supervisor.record.store.records import IncidentRow, TimelineRow
from supervisor.record.store.store import Store
from supervisor.record.timeline.decision import Decision
from supervisor.record.timeline.repair import Escalation, Evidence, StepRan
from supervisor.record.timeline.state import Transition

if TYPE_CHECKING:
    from supervisor.trust.needs import Needs

#: evidence errors that only say a collector does not fit the scope (not a failure)
NOT_HERE = (NO_UNIT, NO_HOST, NO_CONTAINER, "is not a systemd host", "is not a launchd host")


@dataclass(frozen=True, kw_only=True)
class Line:
    incident: int
    subject: str
    at: datetime
    text: str


@dataclass(frozen=True, kw_only=True)
class Busy:
    subject: str
    spells: int
    total: timedelta
    longest: timedelta


@dataclass(frozen=True, kw_only=True)
class Report:
    since: datetime
    until: datetime
    incidents: tuple[IncidentRow, ...]
    would: tuple[Line, ...]
    could_not: tuple[Line, ...]
    busy: tuple[Busy, ...]

    def document(self) -> dict[str, Any]:
        def lines(items: tuple[Line, ...]) -> list[dict[str, Any]]:
            return [
                {"incident": i.incident, "subject": i.subject, "at": _iso(i.at), "text": i.text}
                for i in items
            ]

        return {
            "since": _iso(self.since),
            "until": _iso(self.until),
            "incidents": [
                {
                    "id": i.id,
                    "subject": i.subject,
                    "opened_at": _iso(i.opened_at),
                    "closed_at": _iso(i.closed_at) if i.closed_at else None,
                    "duration_s": i.duration.total_seconds() if i.duration else None,
                    "cause": i.cause,
                    "state": i.last_state,
                }
                for i in self.incidents
            ],
            "would_have_done": lines(self.would),
            "could_not_have_done": lines(self.could_not),
            "busy": [
                {
                    "subject": b.subject,
                    "spells": b.spells,
                    "total_s": b.total.total_seconds(),
                    "longest_s": b.longest.total_seconds(),
                }
                for b in self.busy
            ],
        }


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


@dataclass
class _Walk:
    """One incident's timeline, read in order."""

    incident: IncidentRow
    until: datetime
    needs: Needs
    roots: frozenset[str]
    would: list[Line] = field(default_factory=list)
    could_not: list[Line] = field(default_factory=list)
    busy: list[timedelta] = field(default_factory=list)
    _busy_from: datetime | None = None

    def line(self, row: TimelineRow, text: str) -> Line:
        return Line(incident=self.incident.id, subject=self.incident.subject, at=row.at, text=text)

    def take(self, row: TimelineRow) -> None:
        record = row.record
        handlers = {
            Transition: self._transition,
            Decision: self._decision,
            StepRan: self._step,
            Escalation: self._escalation,
            Evidence: self._evidence,
        }
        handler = handlers.get(type(record))
        if handler is not None:
            handler(row, record)

    def end(self) -> None:
        if self._busy_from is not None:
            end = self.incident.closed_at or self.until
            self.busy.append(max(timedelta(0), end - self._busy_from))

    def _transition(self, row: TimelineRow, record: Any) -> None:
        if record.of_host:
            return
        if self._busy_from is not None:
            self.busy.append(max(timedelta(0), row.at - self._busy_from))
            self._busy_from = None
        if record.dest == State.BUSY:
            self._busy_from = row.at

    def _decision(self, row: TimelineRow, record: Any) -> None:
        if record.is_plan:
            plan = "; ".join(record.plan) or "nothing to run"
            self.would.append(self.line(row, f"rule {record.rule}: {plan}"))

    def _step(self, row: TimelineRow, record: Any) -> None:
        if not record.ok:
            self.could_not.append(
                self.line(row, f"step {record.action} on {record.target} failed: {record.result}")
            )
        for command in record.commands:
            if command.dry_run:
                refused = self._refused(command.host, command.command)
                if refused:
                    self.could_not.append(self.line(row, refused))

    def _refused(self, host: str, line: str) -> str:
        try:
            argv = shlex.split(line)
        except ValueError:
            return ""
        if argv[:2] != ["sudo", "-n"] or host in self.roots:
            return ""
        command = argv[2:]
        if any(need.shape.matches(command) for need in self.needs.on(host)):
            return ""
        return (
            f"`{shlex.join(command)}` on {host} as root: not in the sudoers the rules generate "
            "(fleet-supervisor sudoers)"
        )

    def _escalation(self, row: TimelineRow, record: Any) -> None:
        rule = f"rule {record.rule}: " if record.rule else ""
        self.could_not.append(self.line(row, f"{rule}a person needed: {record.note}"))

    def _evidence(self, row: TimelineRow, record: Any) -> None:
        if record.error and not any(part in record.error for part in NOT_HERE):
            self.could_not.append(
                self.line(
                    row,
                    f"evidence {record.evidence_id} ({record.collector}) on {record.scope}: "
                    f"{record.error}",
                )
            )


async def build_report(
    store: Store, *, since: datetime, until: datetime, needs: Needs, roots: frozenset[str]
) -> Report:
    """The report of everything opened or closed since `since` (or still open). `roots`: the
    hosts that log in as root (their commands need no sudoers)."""
    incidents = sorted(await store.incidents(since=since), key=lambda i: i.id)
    would: list[Line] = []
    could_not: list[Line] = []
    busy: dict[str, list[timedelta]] = {}
    for incident in incidents:
        walk = _Walk(incident=incident, until=until, needs=needs, roots=roots)
        for row in await store.timeline(incident.id):
            walk.take(row)
        walk.end()
        would.extend(walk.would)
        could_not.extend(walk.could_not)
        if walk.busy:
            busy.setdefault(incident.subject, []).extend(walk.busy)
    spells = tuple(
        Busy(subject=name, spells=len(times), total=sum(times, timedelta(0)), longest=max(times))
        for name, times in sorted(busy.items())
    )
    return Report(
        since=since,
        until=until,
        incidents=tuple(incidents),
        would=tuple(would),
        could_not=tuple(could_not),
        busy=spells,
    )


def _took(value: timedelta) -> str:
    """A duration rounded to the second (`3m12s`), `0s` for less."""
    return format_duration(timedelta(seconds=round(value.total_seconds())))


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S")


def render_report(report: Report, *, window: str) -> str:
    opened = len(report.incidents)
    still = sum(1 for i in report.incidents if i.closed_at is None)
    out = [
        f"Observe-only report, last {window} (since {_when(report.since)} UTC): "
        f"{opened} incident{'s' if opened != 1 else ''}, {still} still open",
        "",
        "INCIDENTS",
    ]
    for i in report.incidents:
        took = _took(i.duration) if i.duration is not None else "still open"
        out.append(f"  #{i.id} {i.subject}  {_when(i.opened_at)}  {took}  {i.cause}")
    if not report.incidents:
        out.append("  none")
    sections = (
        ("WOULD HAVE DONE", report.would),
        ("COULD NOT HAVE DONE", report.could_not),
    )
    for title, lines in sections:
        out += ["", title]
        out += [
            f"  #{line.incident} {line.subject}  {_when(line.at)}  {line.text}" for line in lines
        ]
        if not lines:
            out.append("  nothing")
    out += ["", "BUSY (load, never repaired)"]
    out += [
        f"  {b.subject}: busy {b.spells} time{'s' if b.spells != 1 else ''}, "
        f"{_took(b.total)} in all (longest {_took(b.longest)})"
        for b in report.busy
    ]
    if not report.busy:
        out.append("  never")
    return "\n".join(out)

"""Availability from the store: for each endpoint and host, over the last 24 h, 7 d and 30 d, the
time it served, the time it did not, the time it was silenced (maintenance) and the time nobody
supervised it (the daemon was not running, or had not judged it yet); availability is time
serving / time supervised, silences and unsupervised time left out of both. Also the incidents
per day (with their causes) and the mean time to repair per subject and per rule.

Read from `state_log` (every state a subject entered, in milliseconds: one indexed lookup per
subject for its state when the longest window opens, then the changes inside it, summed per
state by the database with a window function) and from `incidents` (by their opening time's
index): a year of history costs only the rows inside the window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from enum import StrEnum
from functools import lru_cache

from sqlalchemy import BigInteger, and_, bindparam, case, func, literal, or_, select, union_all
from sqlalchemy.sql.expression import BindParameter, Executable

from supervisor.judge.machine import State
from supervisor.record.store import Store, SubjectKind
from supervisor.record.store.history import UNSUPERVISED, ms
from supervisor.record.store.schema import incidents, state_log


class Counted(StrEnum):
    """What a state counts as."""

    SERVING = "serving"
    DOWN = "down"
    SILENCED = "silenced"
    UNSUPERVISED = "unsupervised"


COUNTS: Mapping[str, Counted] = {
    State.HEALTHY: Counted.SERVING,
    State.BUSY: Counted.SERVING,  # answers, under load
    State.DEGRADED: Counted.SERVING,  # answers, badly (shown apart on the board)
    State.STARTING: Counted.DOWN,  # failing inside its startup grace
    State.DOWN: Counted.DOWN,
    State.UNREACHABLE: Counted.DOWN,
    State.REMEDIATING: Counted.DOWN,
    State.VERIFYING: Counted.DOWN,
    State.ESCALATED: Counted.DOWN,
    State.MAINTENANCE: Counted.SILENCED,
    State.UNKNOWN: Counted.UNSUPERVISED,
    UNSUPERVISED: Counted.UNSUPERVISED,
    "reachable": Counted.SERVING,  # a host's (`supervisor.hear.reachability`)
    "unreachable": Counted.DOWN,
}
"""state -> what its time counts as (a state not listed: unsupervised)."""

WINDOWS: tuple[tuple[str, timedelta], ...] = (
    ("24h", timedelta(hours=24)),
    ("7d", timedelta(days=7)),
    ("30d", timedelta(days=30)),
)
LONGEST = WINDOWS[-1][1]
DAYS = 30
"""Days in the incident history bar."""

COMPOUND = 100
"""Subjects per statement: SQLite allows 500 terms in a compound SELECT."""

Subject = tuple[SubjectKind, str]


@dataclass(frozen=True, kw_only=True)
class Window:
    """Seconds spent in each count over one window."""

    name: str
    length_s: float
    serving_s: float = 0.0
    down_s: float = 0.0
    silenced_s: float = 0.0
    unsupervised_s: float = 0.0

    @property
    def supervised_s(self) -> float:
        return self.serving_s + self.down_s

    @property
    def ratio(self) -> float | None:
        """Time serving / time supervised; None when nobody supervised it."""
        return self.serving_s / self.supervised_s if self.supervised_s > 0 else None

    @property
    def percent(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return "–"
        return "100%" if ratio >= 1 else f"{min(ratio * 100, 99.99):.2f}%"

    def document(self) -> dict[str, float | None]:
        return {
            "availability": None if self.ratio is None else round(self.ratio, 6),
            "serving_s": round(self.serving_s, 3),
            "down_s": round(self.down_s, 3),
            "silenced_s": round(self.silenced_s, 3),
            "unsupervised_s": round(self.unsupervised_s, 3),
        }


@dataclass(frozen=True, kw_only=True)
class Availability:
    kind: SubjectKind
    name: str
    windows: Mapping[str, Window]

    def __getitem__(self, window: str) -> Window:
        return self.windows[window]

    def document(self) -> dict[str, dict[str, float | None]]:
        return {name: w.document() for name, w in self.windows.items()}


def _empty(kind: SubjectKind, name: str) -> Availability:
    return Availability(
        kind=kind,
        name=name,
        windows={w: Window(name=w, length_s=d.total_seconds()) for w, d in WINDOWS},
    )


@lru_cache(maxsize=8)
def _statements(subjects: tuple[Subject, ...]) -> tuple[Executable, ...]:
    """Per hundred subjects: the state each was in when the longest window opened (a LIMIT 1
    read backwards on the (kind, subject, at) index) and the changes inside it, as spans
    (a change to the next, or to the end), summed per state for every window."""
    start: BindParameter[int] = bindparam("start", type_=BigInteger)
    end: BindParameter[int] = bindparam("end", type_=BigInteger)
    starts: dict[str, BindParameter[int]] = {
        w: bindparam(f"start_{w}", type_=BigInteger) for w, _ in WINDOWS
    }
    columns = (
        state_log.c.id,
        state_log.c.subject_kind,
        state_log.c.subject,
        state_log.c.state,
        state_log.c.at_ms,
    )
    statements: list[Executable] = []
    for first in range(0, len(subjects), COMPOUND):
        chunk = subjects[first : first + COMPOUND]
        before = [
            select(*columns)
            .where(
                state_log.c.subject_kind == kind.value,
                state_log.c.subject == name,
                state_log.c.at_ms <= start,
            )
            .order_by(state_log.c.at_ms.desc(), state_log.c.id.desc())
            .limit(1)
            .subquery()
            .select()
            for kind, name in chunk
        ]
        inside = select(*columns).where(
            state_log.c.at_ms > start,
            state_log.c.at_ms <= end,
            or_(
                *(
                    and_(
                        state_log.c.subject_kind == kind.value,
                        state_log.c.subject.in_([n for k, n in chunk if k is kind]),
                    )
                    for kind in {k for k, _ in chunk}
                )
            ),
        )
        changes = union_all(*before, inside).subquery()
        following = func.lead(changes.c.at_ms).over(
            partition_by=(changes.c.subject_kind, changes.c.subject),
            order_by=(changes.c.at_ms, changes.c.id),
        )
        spans = select(
            changes.c.subject_kind,
            changes.c.subject,
            changes.c.state,
            changes.c.at_ms.label("begins"),
            func.coalesce(following, end).label("ends"),
        ).subquery()
        sums = [
            func.sum(
                case(
                    (spans.c.begins >= starts[w], spans.c.ends - spans.c.begins),
                    (spans.c.ends > starts[w], spans.c.ends - starts[w]),
                    else_=literal(0),
                )
            ).label(f"w_{w}")
            for w, _ in WINDOWS
        ]
        statements.append(
            select(spans.c.subject_kind, spans.c.subject, spans.c.state, *sums).group_by(
                spans.c.subject_kind, spans.c.subject, spans.c.state
            )
        )
    return tuple(statements)


async def availability(
    store: Store, subjects: Sequence[Subject], *, now: datetime
) -> dict[Subject, Availability]:
    """Each subject's windows (24h, 7d, 30d) ending at `now`, in one read transaction."""
    end = ms(now)
    params = {"start": end - round(LONGEST.total_seconds() * 1000), "end": end}
    params |= {f"start_{w}": end - round(d.total_seconds() * 1000) for w, d in WINDOWS}
    seconds: dict[Subject, dict[str, dict[Counted, float]]] = defaultdict(
        lambda: {w: defaultdict(float) for w, _ in WINDOWS}
    )
    async with store.tx(write=False) as conn:
        for statement in _statements(tuple(subjects)):
            for row in (await conn.execute(statement, params)).all():
                counted = COUNTS.get(row.state, Counted.UNSUPERVISED)
                key = (SubjectKind(row.subject_kind), row.subject)
                for w, _ in WINDOWS:
                    seconds[key][w][counted] += float(getattr(row, f"w_{w}") or 0) / 1000
    found = {}
    for kind, name in subjects:
        windows = {}
        for w, length in WINDOWS:
            spent = seconds[(kind, name)][w] if (kind, name) in seconds else {}
            known = sum(spent.values())
            windows[w] = Window(
                name=w,
                length_s=length.total_seconds(),
                serving_s=spent.get(Counted.SERVING, 0.0),
                down_s=spent.get(Counted.DOWN, 0.0),
                silenced_s=spent.get(Counted.SILENCED, 0.0),
                # before its first state: nobody knew it
                unsupervised_s=spent.get(Counted.UNSUPERVISED, 0.0)
                + max(length.total_seconds() - known, 0.0),
            )
        found[(kind, name)] = Availability(kind=kind, name=name, windows=windows)
    return found


# -- incidents: per day, and the time to repair ------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Day:
    """One day of the history bar: the incidents that opened that day (UTC), with causes."""

    day: date
    incidents: tuple[tuple[int, str], ...] = ()  #: (id, cause)

    @property
    def causes(self) -> str:
        return "; ".join(f"#{i} {cause}" for i, cause in self.incidents)


@dataclass(frozen=True, kw_only=True)
class Repair:
    """Mean time to repair over the incidents that opened in the window and closed."""

    count: int = 0
    total_s: float = 0.0
    still_open: int = 0

    @property
    def mean_s(self) -> float | None:
        return self.total_s / self.count if self.count else None

    def add(self, opened: datetime, closed: datetime | None) -> Repair:
        if closed is None:
            return Repair(count=self.count, total_s=self.total_s, still_open=self.still_open + 1)
        spent = (closed - opened).total_seconds()
        return Repair(
            count=self.count + 1, total_s=self.total_s + spent, still_open=self.still_open
        )

    def document(self) -> dict[str, float | int | None]:
        mean = self.mean_s
        return {
            "mttr_s": None if mean is None else round(mean, 3),
            "repaired": self.count,
            "open": self.still_open,
        }


NO_RULE = "(no rule matched)"


def rule_of(diagnosis: str | None) -> str:
    """The rule id of an incident's `diagnosis` (`rule-id: its title`)."""
    return diagnosis.split(":", 1)[0] if diagnosis else NO_RULE


@dataclass(frozen=True, kw_only=True)
class Repairs:
    by_subject: Mapping[str, Repair] = field(default_factory=dict)
    by_rule: Mapping[str, Repair] = field(default_factory=dict)


async def repairs(store: Store, *, now: datetime, window: timedelta = LONGEST) -> Repairs:
    """MTTR per subject and per rule over the incidents opened within `window` of `now`."""
    query = select(
        incidents.c.subject, incidents.c.diagnosis, incidents.c.opened_at, incidents.c.closed_at
    ).where(incidents.c.opened_at >= now - window)
    by_subject: dict[str, Repair] = defaultdict(Repair)
    by_rule: dict[str, Repair] = defaultdict(Repair)
    async with store.tx(write=False) as conn:
        for row in (await conn.execute(query)).all():
            by_subject[row.subject] = by_subject[row.subject].add(row.opened_at, row.closed_at)
            rule = rule_of(row.diagnosis)
            by_rule[rule] = by_rule[rule].add(row.opened_at, row.closed_at)
    return Repairs(by_subject=dict(by_subject), by_rule=dict(sorted(by_rule.items())))


async def days(store: Store, subject: str, *, now: datetime, count: int = DAYS) -> list[Day]:
    """The last `count` days (UTC, today last), each with the incidents of `subject` that
    opened on it and their causes (the matched rule once there is one, else the symptom)."""
    today = now.date()
    first = today - timedelta(days=count - 1)
    since = datetime.combine(first, datetime.min.time(), tzinfo=now.tzinfo)
    query = (
        select(incidents.c.id, incidents.c.opened_at, incidents.c.cause, incidents.c.diagnosis)
        .where(incidents.c.subject == subject, incidents.c.opened_at >= since)
        .order_by(incidents.c.opened_at)
    )
    found: dict[date, list[tuple[int, str]]] = defaultdict(list)
    async with store.tx(write=False) as conn:
        for row in (await conn.execute(query)).all():
            found[row.opened_at.date()].append((row.id, row.diagnosis or row.cause))
    return [
        Day(
            day=first + timedelta(days=i), incidents=tuple(found.get(first + timedelta(days=i), ()))
        )
        for i in range(count)
    ]

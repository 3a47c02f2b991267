"""Availability from the store: for each endpoint and host, over the last 24 h, 7 d and 30 d, the
time it served, the time it did not, the time it was silenced (maintenance) and the time nobody
supervised it (the daemon was not running, or had not judged it yet); availability is time
serving / time supervised, silences and unsupervised time left out of both. Also the incidents
per day (with their causes) and the mean time to repair per subject and per rule.

Read from `state_log` (every state a subject entered, in milliseconds, with the running sums of
the time it had spent in each count before then): a window's time is the difference of the sums
at its two ends, one indexed read each, whatever the length of the history; and from
`incidents` (by their opening time's index).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache
from itertools import pairwise
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Row,
    Text,
    cast,
    func,
    select,
    text,
    type_coerce,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.elements import TextClause

from supervisor.record.store.history import Counted, counted, ms
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.schema import incidents
from supervisor.record.store.store import Store

WINDOWS: tuple[tuple[str, timedelta], ...] = (
    ("24h", timedelta(hours=24)),
    ("7d", timedelta(days=7)),
    ("30d", timedelta(days=30)),
)
LONGEST = WINDOWS[-1][1]
DAYS = 30
"""Days in the incident history bar."""

CHUNK = 500
"""Subjects per statement (two bound values each: well under SQLite's 32766)."""

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


BOUNDARIES = ("end", *(f"start_{w}" for w, _ in WINDOWS))
"""The times each subject's running sums are read at: now, and where each window opens."""


@lru_cache(maxsize=16)
def _statement(count: int, boundaries: tuple[str, ...] = BOUNDARIES) -> TextClause:
    """For each of `count` subjects and each of `boundaries` its latest row at or before that
    time: the subjects and the boundaries as two VALUES lists, each pair's row found by a
    correlated LIMIT 1 read backwards on the (kind, subject, at, id) index (one statement, one
    plan). Plain text: a VALUES list is compiled again at every call by SQLAlchemy, text is not."""
    wanted = ", ".join(f"(:kind_{i}, :name_{i})" for i in range(count))
    bounds = ", ".join(f"('{b}', CAST(:b_{b} AS BIGINT))" for b in boundaries)
    sums = ", ".join(f"l.{c.column}" for c in Counted)
    # only placeholders and our own names go into the text: every value is bound
    return text(
        f"WITH wanted(kind, name) AS (VALUES {wanted}),"  # noqa: S608
        f" bounds(boundary, t) AS (VALUES {bounds})"
        f" SELECT bounds.boundary, l.subject_kind, l.subject, l.state, l.at_ms, {sums}"
        " FROM wanted CROSS JOIN bounds JOIN state_log AS l ON l.id = ("
        " SELECT i.id FROM state_log AS i WHERE i.subject_kind = wanted.kind"
        " AND i.subject = wanted.name AND i.at_ms <= bounds.t"
        " ORDER BY i.at_ms DESC, i.id DESC LIMIT 1)"
    )


async def _rows(
    store: Store, subjects: Sequence[Subject], bounds: Mapping[str, int]
) -> dict[tuple[str, str, str], Row[Any]]:
    """Each subject's latest row at or before each of `bounds` (boundary name -> Unix ms), by
    (kind, name, boundary); a pair with no row yet (before the subject's first) is missing."""
    boundaries = tuple(bounds)
    named_bounds = {f"b_{b}": t for b, t in bounds.items()}
    rows: dict[tuple[str, str, str], Row[Any]] = {}
    async with store.tx(write=False) as conn:
        for chunk in range(0, len(subjects), CHUNK):
            part = subjects[chunk : chunk + CHUNK]
            named: dict[str, int | str] = dict(named_bounds)
            for i, (kind_of, called) in enumerate(part):
                named[f"kind_{i}"], named[f"name_{i}"] = kind_of.value, called
            statement = _statement(len(part), boundaries)
            for row in (await conn.execute(statement, named)).all():
                rows[(row[1], row[2], row[0])] = row
    return rows


def _sums(row: Row[Any] | None, at: int) -> list[float]:
    """Seconds spent in each count (in `Counted` order) before `at`, from the subject's latest
    row before it (columns: boundary, kind, subject, state, at_ms, then the sums)."""
    if row is None:
        return [0.0] * len(ORDER)
    values: tuple[Any, ...] = tuple(row)
    spent = [float(v) for v in values[5:]]
    spent[ORDER[counted(values[3])]] += at - values[4]
    return [v / 1000 for v in spent]


ORDER = {c: i for i, c in enumerate(Counted)}


async def availability(
    store: Store, subjects: Sequence[Subject], *, now: datetime
) -> dict[Subject, Availability]:
    """Each subject's windows (24h, 7d, 30d) ending at `now`: the difference of its running
    sums at the window's two ends (4 index reads per subject, in one statement)."""
    end = ms(now)
    params = {"end": end}
    params |= {f"start_{w}": end - round(d.total_seconds() * 1000) for w, d in WINDOWS}
    rows = await _rows(store, subjects, params)
    found = {}
    for subject in subjects:
        key = (subject[0].value, subject[1])
        last = _sums(rows.get((*key, "end")), end)
        windows = {}
        for w, length in WINDOWS:
            opened = f"start_{w}"
            first = _sums(rows.get((*key, opened)), params[opened])
            spent = {c: last[ORDER[c]] - first[ORDER[c]] for c in Counted}
            known = sum(spent.values())
            windows[w] = Window(
                name=w,
                length_s=length.total_seconds(),
                serving_s=spent[Counted.SERVING],
                down_s=spent[Counted.DOWN],
                silenced_s=spent[Counted.SILENCED],
                # before its first row: nobody knew it
                unsupervised_s=spent[Counted.UNSUPERVISED]
                + max(length.total_seconds() - known, 0.0),
            )
        found[subject] = Availability(kind=subject[0], name=subject[1], windows=windows)
    return found


# -- incidents: per day, and the time to repair ------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Day:
    """One day of the history bar: the incidents that opened that day (UTC), with causes, and
    the seconds of it somebody watched the subject (serving, down or silenced). A day nobody
    watched (before supervision began, or the daemon off all day) is `not supervised`: neither
    up nor down."""

    day: date
    incidents: tuple[tuple[int, str], ...] = ()  #: (id, cause)
    watched_s: float = 0.0

    @property
    def causes(self) -> str:
        return "; ".join(f"#{i} {cause}" for i, cause in self.incidents)

    @property
    def status(self) -> str:
        """`incidents`, `not supervised` or `no incident`."""
        if self.incidents:
            return "incidents"
        return "no incident" if self.watched_s > 0 else "not supervised"


@dataclass(frozen=True, kw_only=True)
class Repair:
    """Mean time to repair over the incidents that opened in the window and closed."""

    count: int = 0
    total_s: float = 0.0
    still_open: int = 0

    @property
    def mean_s(self) -> float | None:
        return self.total_s / self.count if self.count else None

    def __add__(self, other: Repair) -> Repair:
        return Repair(
            count=self.count + other.count,
            total_s=self.total_s + other.total_s,
            still_open=self.still_open + other.still_open,
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


def _seconds(dialect: str, later: ColumnElement[Any], earlier: ColumnElement[Any]) -> Any:
    """Seconds between two stored times (UTC ISO text) in the database's own words."""
    if dialect == "postgresql":
        stamp = postgresql.TIMESTAMP(timezone=True)
        return func.extract("epoch", cast(later, stamp) - cast(earlier, stamp))
    return (func.julianday(later) - func.julianday(earlier)) * 86400.0


async def repairs(store: Store, *, now: datetime, window: timedelta = LONGEST) -> Repairs:
    """MTTR per subject and per rule over the incidents opened within `window` of `now`, summed
    by the database per (subject, diagnosis) on the opening time's index."""
    # the window's incidents first (by the opening time's index; MATERIALIZED, or SQLite scans
    # the whole table in subject order to spare itself the GROUP BY's sort)
    recent = (
        select(
            incidents.c.subject,
            incidents.c.diagnosis,
            type_coerce(incidents.c.opened_at, Text).label("opened"),
            type_coerce(incidents.c.closed_at, Text).label("closed"),
        )
        .where(incidents.c.opened_at >= now - window)
        .cte("recent")
        .prefix_with("MATERIALIZED")
    )
    by_subject: dict[str, Repair] = defaultdict(Repair)
    by_rule: dict[str, Repair] = defaultdict(Repair)
    async with store.tx(write=False) as conn:
        took = _seconds(conn.dialect.name, recent.c.closed, recent.c.opened)
        query = select(
            recent.c.subject,
            recent.c.diagnosis,
            func.count(recent.c.closed).label("repaired"),
            func.count().label("all"),
            func.coalesce(func.sum(took), 0).label("total"),
        ).group_by(recent.c.subject, recent.c.diagnosis)
        for row in (await conn.execute(query)).all():
            part = Repair(
                count=row.repaired,
                total_s=round(float(row.total), 3),  # julianday is exact to about 10 µs
                still_open=row.all - row.repaired,
            )
            by_subject[row.subject] = by_subject[row.subject] + part
            rule = rule_of(row.diagnosis)
            by_rule[rule] = by_rule[rule] + part
    return Repairs(by_subject=dict(by_subject), by_rule=dict(sorted(by_rule.items())))


async def days(
    store: Store,
    subject: str,
    *,
    now: datetime,
    count: int = DAYS,
    kind: SubjectKind = SubjectKind.ENDPOINT,
) -> list[Day]:
    """The last `count` days (UTC, today last), each with the incidents of `subject` that
    opened on it and their causes (the matched rule once there is one, else the symptom), and
    the time of it somebody watched the subject: the running sums of `state_log` at each
    midnight (one indexed read each), nothing before the subject's first row."""
    today = now.date()
    first = today - timedelta(days=count - 1)
    since = datetime.combine(first, datetime.min.time(), tzinfo=now.tzinfo)
    starts = [ms(since + timedelta(days=i)) for i in range(count)]
    bounds = {f"d{i}": t for i, t in enumerate(starts)} | {"end": ms(now)}
    rows = await _rows(store, [(kind, subject)], bounds)
    sums = [_sums(rows.get((kind.value, subject, b)), t) for b, t in bounds.items()]
    watched = [
        sum(later[ORDER[c]] - earlier[ORDER[c]] for c in Counted if c is not Counted.UNSUPERVISED)
        for earlier, later in pairwise(sums)
    ]
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
            day=(day := first + timedelta(days=i)),
            incidents=tuple(found.get(day, ())),
            watched_s=round(watched[i], 3),
        )
        for i in range(count)
    ]

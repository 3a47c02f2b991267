"""The board's rows: every endpoint (state and since, last TTFT and tok/s, a sparkline of its
stored samples, its open incident, its availability over 24 h, 7 d and 30 d and its time to
repair) and every host (its availability too), from the live daemon and a few queries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from supervisor.record.availability import (
    Availability,
    Repair,
    Repairs,
    Subject,
    availability,
    repairs,
)
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.store import Store
from supervisor.tell.web.page.reads import Point, recent_points
from supervisor.tell.web.page.spark import sparkline
from supervisor.tell.web.page.states import TONES, Tone, tone_of
from supervisor.tell.web.view import HostView

if TYPE_CHECKING:
    from supervisor.tell.web.source import FleetSource

SPARK_WINDOW = timedelta(hours=6)
"""How far back the sparklines look."""


@dataclass(frozen=True, kw_only=True)
class EndpointRow:
    name: str
    kind: str
    host: str
    state: str
    since: datetime
    reason: str
    ttft_s: float | None
    tok_s: float | None
    incident_id: int | None
    spark_tok: str  #: an inline SVG (safe markup built by `spark`)
    spark_ttft: str
    availability: Availability
    repair: Repair

    @property
    def tone(self) -> str:
        return tone_of(self.state)


@dataclass(frozen=True, kw_only=True)
class HostRow:
    view: HostView
    availability: Availability


@dataclass(frozen=True, kw_only=True)
class Board:
    at: datetime
    endpoints: tuple[EndpointRow, ...]
    hosts: tuple[HostRow, ...]
    by_rule: Mapping[str, Repair]  #: the time to repair per rule (30 d)

    def count(self, tone: str) -> int:
        return sum(1 for e in self.endpoints if e.tone == tone)

    def counts(self) -> list[tuple[Tone, int]]:
        """Each tone (worst first) with how many endpoints show it."""
        return [(tone, self.count(tone.name)) for tone in TONES.values()]


def _tok(points: Sequence[Point]) -> list[float]:
    return [p.tok_s for p in points if p.tok_s is not None]


def _ttft(points: Sequence[Point]) -> list[float]:
    return [p.ttft_s for p in points if p.ttft_s is not None]


HISTORY_MAX_AGE = timedelta(seconds=30)
"""How old the board's availability and repair figures may be: they move by seconds a day, the
states beside them are live (the endpoint page, `status` and /metrics read them afresh)."""


class History:
    """The board's availability and repair figures, read again once older than
    `HISTORY_MAX_AGE` or when the fleet's subjects change."""

    def __init__(self) -> None:
        self._read: tuple[datetime, tuple[Subject, ...], dict[Subject, Availability], Repairs]
        self._read = (datetime.min.replace(tzinfo=UTC), (), {}, Repairs())

    async def get(
        self, store: Store, subjects: Sequence[Subject], now: datetime
    ) -> tuple[dict[Subject, Availability], Repairs]:
        at, known, found, fixed = self._read
        if tuple(subjects) != known or not timedelta(0) <= now - at < HISTORY_MAX_AGE:
            found = await availability(store, subjects, now=now)
            fixed = await repairs(store, now=now)
            self._read = (now, tuple(subjects), found, fixed)
        return found, fixed


async def board(
    daemon: FleetSource, hosts: tuple[HostView, ...], figures: History | None = None
) -> Board:
    now = daemon.clock.now()
    workers = list(daemon.workers.items())
    history = await recent_points(daemon.store, [n for n, _ in workers], since=now - SPARK_WINDOW)
    subjects = [(SubjectKind.ENDPOINT, n) for n, _ in workers]
    subjects += [(SubjectKind.HOST, h.name) for h in hosts]
    found, fixed = await (figures or History()).get(daemon.store, subjects, now)
    rows = []
    for name, worker in workers:
        snap = worker.snapshot()
        points = history.get(name, [])
        rows.append(
            EndpointRow(
                name=name,
                kind=worker.endpoint.kind,
                host=worker.endpoint.host or "-",
                state=snap.state,
                since=snap.since,
                reason=snap.last_reason,
                ttft_s=snap.last_ttft_s,
                tok_s=snap.last_tok_s,
                incident_id=snap.incident_id,
                spark_tok=sparkline(_tok(points), label=f"{name} tok/s"),
                spark_ttft=sparkline(_ttft(points), label=f"{name} TTFT"),
                availability=found[(SubjectKind.ENDPOINT, name)],
                repair=fixed.by_subject.get(name, Repair()),
            )
        )
    return Board(
        at=now,
        endpoints=tuple(rows),
        hosts=tuple(HostRow(view=h, availability=found[(SubjectKind.HOST, h.name)]) for h in hosts),
        by_rule=fixed.by_rule,
    )

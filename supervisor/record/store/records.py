"""What goes into the store and what comes back: frozen, keyword-only, aware UTC timestamps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property

from supervisor.record.timeline.base import EntryKind, JSONValue, Record
from supervisor.record.timeline.codec import decode, encode


class SubjectKind(StrEnum):
    """What a snapshot or an incident is about."""

    ENDPOINT = "endpoint"  #: a served thing (a vLLM, mlx_lm or Ollama endpoint, a health URL)
    HOST = "host"  #: a machine that runs endpoints


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The current state of one endpoint or host."""

    kind: SubjectKind
    name: str
    state: str  #: e.g. "healthy", "down"; the store does not interpret it
    since: datetime  #: when it entered `state`
    incident_id: int | None = None  #: the open incident, if any
    fail_streak: int = 0
    degraded_streak: int = 0
    grace_until: datetime | None = None
    last_ok_at: datetime | None = None
    last_ttft_s: float | None = None
    last_tok_s: float | None = None
    last_reason: str = ""
    updated_at: datetime


class _Carries:
    """What an entry and a row read from the record they carry."""

    record: Record

    @property
    def kind(self) -> EntryKind:
        return self.record.kind

    @property
    def summary(self) -> str:
        """One plain line rendered from the record, e.g. `healthy -> down: connection refused`."""
        return self.record.summary

    @property
    def data(self) -> Mapping[str, JSONValue]:
        """The record's JSON payload (what `timeline --json` shows)."""
        return encode(self.record)


@dataclass(frozen=True, kw_only=True)
class TimelineEntry(_Carries):
    """One thing that happened, to be appended to an incident's timeline."""

    at: datetime
    subject: str  #: endpoint or host name this entry is about
    record: Record  #: what happened (`supervisor.record.timeline`)


@dataclass(frozen=True, kw_only=True)
class IncidentRow:
    """A stored incident: opened when a subject left healthy, closed when it was verified."""

    id: int
    subject_kind: SubjectKind
    subject: str
    opened_at: datetime
    closed_at: datetime | None
    symptom: str  #: what opened it, e.g. "connection refused"
    diagnosis: str = ""  #: the latest rule that matched, e.g. "stale-listener: old workers ..."
    resolution: str | None  #: how it closed, e.g. "completion passed (ttft 0.4s, 41.0 tok/s)"
    last_state: str  #: the subject's state at its latest transition inside it
    entries: int  #: number of timeline entries

    @property
    def duration(self) -> timedelta | None:
        """How long it was open (never negative, even across a backward clock jump); None while
        it still is."""
        if self.closed_at is None:
            return None
        return max(self.closed_at - self.opened_at, timedelta(0))

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    @property
    def cause(self) -> str:
        """The diagnosis once a rule matched, the symptom before."""
        return self.diagnosis or self.symptom


@dataclass(frozen=True, kw_only=True)
class TimelineRow:
    """A stored timeline entry: its kind and summary as stored (the summary was rendered from the
    record when it was written), its record decoded when first read (`supervisor.record.timeline.
    Unknown` when this code cannot type it), so listing a long timeline decodes nothing."""

    id: int
    incident_id: int
    at: datetime
    subject: str
    kind: EntryKind
    summary: str
    type: str  #: the record's tag
    version: int  #: its payload's version
    data: Mapping[str, JSONValue]  #: its payload

    @cached_property
    def record(self) -> Record:
        return decode(self.type, self.version, self.data, kind=self.kind.value, text=self.summary)

    @classmethod
    def of(
        cls, record: Record, *, id: int, incident_id: int, at: datetime, subject: str
    ) -> TimelineRow:
        """The row a record is stored as (tests, and readers that build rows themselves)."""
        return cls(
            id=id,
            incident_id=incident_id,
            at=at,
            subject=subject,
            kind=record.kind,
            summary=record.summary,
            type=record.tag,
            version=record.version,
            data=encode(record),
        )


@dataclass(frozen=True, kw_only=True)
class SampleRow:
    """A stored ProbeResult (see `supervisor.core.events`), without its `detail`."""

    id: int
    endpoint: str
    at: datetime
    tier: str
    check: str
    outcome: str
    reason: str
    latency_s: float
    http_status: int | None
    ttft_s: float | None
    tok_s: float | None
    tokens: int | None


@dataclass(frozen=True, kw_only=True)
class AttemptRow:
    """One remediation attempt: which rule, when, and how it ended (None while running)."""

    id: int
    endpoint: str
    rule_id: str
    incident_id: int | None
    started_at: datetime
    finished_at: datetime | None
    outcome: str | None
    epoch: int | None = None  #: the leader's epoch it ran under (None: unfenced)


@dataclass(frozen=True, kw_only=True)
class OutboxRow:
    id: int
    created_at: datetime
    chat_id: int
    incident_id: int | None
    kind: str
    text: str
    parts_sent: int = 0  #: parts of a long text already delivered
    attempts: int = 0  #: failed tries so far
    last_error: str = ""
    sent_at: datetime | None = None
    message_id: int | None = None  #: Telegram's id of the first part
    given_up: bool = False  #: Telegram refused it for good (e.g. chat not found)
    epoch: int | None = None  #: the leader's epoch it was composed under (None: unfenced)

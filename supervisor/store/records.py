"""What goes into the store and what comes back: frozen, keyword-only, aware UTC timestamps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeAlias

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
"""A value that survives a JSON round trip (timeline entry details)."""


class SubjectKind(StrEnum):
    """What a snapshot or an incident is about."""

    ENDPOINT = "endpoint"  #: a served thing (a vLLM, mlx_lm or Ollama endpoint, a health URL)
    HOST = "host"  #: a machine that runs endpoints


class EntryKind(StrEnum):
    """What one timeline entry records."""

    TRANSITION = "transition"  #: the subject's state changed (e.g. healthy -> down)
    PROBE = "probe"  #: a probe result worth keeping in the incident (the failing one, say)
    DECISION = "decision"  #: what the engine chose to do or not to do, and why
    EVIDENCE = "evidence"  #: something gathered before acting (command, exit code, output tail)
    DIAGNOSIS = "diagnosis"  #: which playbook rule matched (or that none did)
    ACTION = "action"  #: a remediation step that was run, with its outcome
    VERIFICATION = "verification"  #: the check after an action (a real completion)
    NOTIFICATION = "notification"  #: a message sent to a person (or that failed to send)
    NOTE = "note"  #: anything a person or the daemon adds by hand (an ack, a comment)


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


@dataclass(frozen=True, kw_only=True)
class TimelineEntry:
    """One thing that happened, to be appended to an incident's timeline."""

    kind: EntryKind
    at: datetime
    subject: str  #: endpoint or host name this entry is about
    summary: str  #: one plain line, e.g. "healthy -> down: connection refused (3 probes)"
    data: Mapping[str, JSONValue] = field(default_factory=dict)  #: details, stored as JSON


@dataclass(frozen=True, kw_only=True)
class IncidentRow:
    """A stored incident: opened when a subject left healthy, closed when it was verified."""

    id: int
    subject_kind: SubjectKind
    subject: str
    opened_at: datetime
    closed_at: datetime | None
    cause: str  #: the symptom that opened it, e.g. "connection refused"
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


@dataclass(frozen=True, kw_only=True)
class TimelineRow:
    """A stored timeline entry."""

    id: int
    incident_id: int
    at: datetime
    kind: EntryKind
    subject: str
    summary: str
    data: Mapping[str, JSONValue]


@dataclass(frozen=True, kw_only=True)
class SampleRow:
    """A stored ProbeResult (see `supervisor.events`), without its `detail`."""

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

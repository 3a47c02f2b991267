"""What the control API takes and gives: its answer, and the stored silences and pauses (who acts
is `supervisor.core.actor.Actor`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Code(StrEnum):
    """How an action ended (HTTP maps these to its status codes)."""

    DONE = "done"  #: it happened (or there was nothing left to do)
    REFUSED = "refused"  #: not now: already silenced, a repair runs, not available here
    NOT_FOUND = "not_found"  #: no such endpoint, host or incident
    BAD_REQUEST = "bad_request"  #: an argument is wrong (a silence ending in the past)


@dataclass(frozen=True, kw_only=True)
class Answer:
    """What one action did, in one line for a person, and the endpoints it concerned."""

    code: Code
    text: str
    subjects: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is Code.DONE


@dataclass(frozen=True, kw_only=True)
class SilenceRow:
    """A stored silence: in force from `at` until `until`, unless ended early."""

    id: int
    target: str  #: the matcher: an endpoint name, a glob, `host:NAME` or `all`
    who: str
    via: str
    why: str
    at: datetime
    until: datetime
    ended_at: datetime | None = None
    ended_by: str = ""

    def active(self, now: datetime) -> bool:
        return self.ended_at is None and now < self.until


@dataclass(frozen=True, kw_only=True)
class PauseRow:
    """Automatic action paused, fleet-wide (`scope` is `*`) or for one endpoint."""

    scope: str
    who: str
    via: str
    why: str
    at: datetime


@dataclass(frozen=True, kw_only=True)
class JournalRow:
    """One control action as recorded: done or refused, with who, why and its answer."""

    id: int
    at: datetime
    action: str  #: silence, unsilence, pause, resume, ack, restart
    target: str
    subjects: tuple[str, ...]
    who: str
    via: str
    why: str
    until: datetime | None
    code: str
    answer: str


FLEET = "*"
"""The scope of a fleet-wide pause."""

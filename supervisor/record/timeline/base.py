"""What every timeline record shares: its type tag, its payload version, its coarse kind, and the
registry that maps a tag back to its class.

A record is a frozen, keyword-only dataclass whose fields are the facts of one thing that
happened; its `summary` (the one line people read) is rendered from those fields, never parsed
back. `at` and `subject` are not part of a record: they belong to the entry that carries it
(`supervisor.record.store.records.TimelineEntry`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, TypeAlias, TypeVar

from pydantic import JsonValue

JSONValue: TypeAlias = JsonValue
"""A value that survives a JSON round trip (bool, int, float, str, None, lists and string-keyed
objects of them): pydantic's, which the codec reads and writes."""


class EntryKind(StrEnum):
    """The coarse family of a timeline entry (a column of its own, for queries and listings)."""

    TRANSITION = "transition"  #: the subject's state changed (e.g. healthy -> down)
    PROBE = "probe"  #: a probe result worth keeping in the incident (the failing one, say)
    DECISION = "decision"  #: what the engine chose to do or not to do, and why
    EVIDENCE = "evidence"  #: something gathered before acting (command, exit code, output tail)
    DIAGNOSIS = "diagnosis"  #: which playbook rule matched (or that none did)
    ACTION = "action"  #: a remediation step that was run, with its outcome
    ATTEMPT = "attempt"  #: a repair attempt started or finished
    VERIFICATION = "verification"  #: the check after an action (a real completion)
    NOTIFICATION = "notification"  #: a message sent to a person (or that failed to send)
    NOTE = "note"  #: anything a person or the daemon adds (an ack, a silence, a comment)


def kind_of(stored: str) -> EntryKind:
    """The kind a stored row names; `note` for one this code does not know."""
    try:
        return EntryKind(stored)
    except ValueError:
        return EntryKind.NOTE


@dataclass(frozen=True, kw_only=True)
class Record:
    """One typed timeline record. Subclasses set `TAG`, `VERSION` and `KIND` and render
    `summary` from their fields."""

    TAG: ClassVar[str]
    VERSION: ClassVar[int] = 1
    KIND: ClassVar[EntryKind]

    @property
    def tag(self) -> str:
        return self.TAG

    @property
    def version(self) -> int:
        return self.VERSION

    @property
    def kind(self) -> EntryKind:
        return self.KIND

    @property
    def summary(self) -> str:
        raise NotImplementedError

    @classmethod
    def upgrade(cls, version: int, payload: Mapping[str, JSONValue]) -> Mapping[str, JSONValue]:
        """A payload stored at an older `version` in the shape of this one (keys renamed, values
        nested): a record class whose payload changed overrides it. Stored rows are never
        rewritten (the timeline is append-only): an old row is upgraded each time it is read."""
        return payload


REGISTRY: dict[str, type[Record]] = {}
"""Type tag -> record class: the one table decoding reads."""

R = TypeVar("R", bound=type[Record])


def register(cls: R) -> R:
    """Class decorator: add a record class to `REGISTRY` under its `TAG` (once)."""
    if cls.TAG in REGISTRY:
        raise ValueError(f"timeline tag {cls.TAG!r} is registered twice")
    REGISTRY[cls.TAG] = cls
    return cls

"""The writes a `ResilientStore` keeps while its store refuses them, as data: one frozen record
per kind of write (a transition, an entry appended, a snapshot saved, an outbox row ...), so
that they can be queued in memory, written to a spill file, read back by another process and
replayed (`supervisor.record.store.apply` runs each's statements).

A write that returns an id (an incident's, an entry's, an attempt's) carries the *placeholder*
handed out for it while it was queued (a negative number); the writes after it that name that
id carry the placeholder, mapped to the real id when it is known. Outbox rows kept in memory
have negative ids of their own (`supervisor.record.store.held_outbox`), mapped the same way.

On disk each is one JSON line: ``{"seq": 7, "write": "transition", "data": {...}}``; a timeline
entry's record is written by the timeline's codec (`supervisor.record.timeline.codec`), the
rest by pydantic from the dataclasses' fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, TypeAlias, get_args

from pydantic import PlainSerializer, PlainValidator, ValidationError

from supervisor.core.events import ProbeResult
from supervisor.record.store.records import OutboxRow, Snapshot, SubjectKind, TimelineEntry
from supervisor.record.timeline.base import JSONValue
from supervisor.record.timeline.codec import adapter, decode, encode


class SpillLineError(ValueError):
    """A line of a spill file that cannot be read back (torn by a crash, or not ours)."""


def _entry_json(entry: TimelineEntry) -> dict[str, JSONValue]:
    record = entry.record
    return {
        "at": entry.at.isoformat(),
        "subject": entry.subject,
        "type": record.tag,
        "version": record.version,
        "kind": record.kind.value,
        "summary": record.summary,
        "data": encode(record),
    }


def _entry_of(value: object) -> TimelineEntry:
    if isinstance(value, TimelineEntry):
        return value
    if not isinstance(value, Mapping):
        raise ValueError("a timeline entry is an object")
    data = value["data"]
    if not isinstance(data, Mapping):
        raise ValueError("a timeline entry's data is an object")
    record = decode(
        str(value["type"]),
        int(value["version"]),
        data,
        kind=str(value["kind"]),
        text=str(value["summary"]),
    )
    at = datetime.fromisoformat(str(value["at"]))
    return TimelineEntry(at=at, subject=str(value["subject"]), record=record)


Entry: TypeAlias = Annotated[
    TimelineEntry,
    PlainValidator(_entry_of),
    PlainSerializer(_entry_json, return_type=Any),
]
"""A timeline entry: its record by the timeline's codec (tag, version, payload, summary)."""


@dataclass(frozen=True, kw_only=True)
class SaveSnapshot:
    NAME: ClassVar[str] = "save_snapshot"
    DROPPABLE: ClassVar[bool] = True  #: a later snapshot replaces it
    snapshot: Snapshot
    sample: ProbeResult | None = None


@dataclass(frozen=True, kw_only=True)
class TransitionWrite:
    NAME: ClassVar[str] = "transition"
    DROPPABLE: ClassVar[bool] = False
    snapshot: Snapshot
    entry: Entry
    open_cause: str | None = None
    close_resolution: str | None = None
    reopen_within: timedelta | None = None
    placeholder: int | None = None  #: stands for the incident's id


@dataclass(frozen=True, kw_only=True)
class AppendWrite:
    NAME: ClassVar[str] = "append"
    DROPPABLE: ClassVar[bool] = False
    incident_id: int
    entry: Entry
    placeholder: int | None = None  #: stands for the entry's id


@dataclass(frozen=True, kw_only=True)
class Supervising:
    NAME: ClassVar[str] = "supervising"
    DROPPABLE: ClassVar[bool] = False
    started: datetime
    subjects: tuple[tuple[SubjectKind, str, str], ...]


@dataclass(frozen=True, kw_only=True)
class Supervised:
    NAME: ClassVar[str] = "supervised"
    DROPPABLE: ClassVar[bool] = True  #: the run's next heartbeat replaces it
    started: datetime
    at: datetime


@dataclass(frozen=True, kw_only=True)
class AddSample:
    NAME: ClassVar[str] = "add_sample"
    DROPPABLE: ClassVar[bool] = True
    result: ProbeResult


@dataclass(frozen=True, kw_only=True)
class PruneSamples:
    NAME: ClassVar[str] = "prune_samples"
    DROPPABLE: ClassVar[bool] = True
    older_than: datetime


@dataclass(frozen=True, kw_only=True)
class StartAttempt:
    NAME: ClassVar[str] = "start_attempt"
    DROPPABLE: ClassVar[bool] = False
    endpoint: str
    rule_id: str
    incident_id: int | None
    at: datetime
    epoch: int | None  #: the leader's epoch it ran under
    placeholder: int | None = None  #: stands for the attempt's id


@dataclass(frozen=True, kw_only=True)
class FinishAttempt:
    NAME: ClassVar[str] = "finish_attempt"
    DROPPABLE: ClassVar[bool] = False
    attempt_id: int
    at: datetime
    outcome: str


@dataclass(frozen=True, kw_only=True)
class OutboxCursor:
    """The composer's first cursor (the timeline's end when it first ran), unless one is set."""

    NAME: ClassVar[str] = "outbox_cursor"
    DROPPABLE: ClassVar[bool] = False
    last: int


@dataclass(frozen=True, kw_only=True)
class KeptState:
    """What the composer remembers about one incident, and whether it has something timed."""

    incident_id: int
    state: dict[str, Any]  #: JSON (a tuple in it is written as a list)
    active: bool


@dataclass(frozen=True, kw_only=True)
class OutboxRows:
    """What one round of the composer made: messages (as composed, memory ids), its memories
    of incidents, and its cursor (`past_held`: moved past the held entries it composed, which
    are in the table when this is written)."""

    NAME: ClassVar[str] = "outbox"
    DROPPABLE: ClassVar[bool] = False
    rows: tuple[OutboxRow, ...]
    states: tuple[KeptState, ...]
    cursor: int | None
    past_held: bool


@dataclass(frozen=True, kw_only=True)
class OutboxMark:
    """A message delivered (in part or whole), or a failed try: on a row kept in memory (its
    negative id) or a stored one."""

    NAME: ClassVar[str] = "outbox_mark"
    DROPPABLE: ClassVar[bool] = False
    row_id: int
    parts_sent: int | None = None
    message_id: int | None = None
    sent_at: datetime | None = None
    last_error: str | None = None
    given_up: bool | None = None
    failed: bool = False  #: one more failed try

    def values(self) -> dict[str, object]:
        """The columns it sets (`attempts`: one more, `notify_rows.update_row`)."""
        values: dict[str, object] = {
            name: getattr(self, name)
            for name in ("parts_sent", "message_id", "sent_at", "last_error")
            if getattr(self, name) is not None
        }
        if self.given_up is not None:
            values["given_up"] = int(self.given_up)
        if self.failed:
            values["attempts"] = 1
        return values

    @property
    def finished(self) -> bool:
        """The row needs no more sending (sent, or given up)."""
        return self.sent_at is not None or bool(self.given_up)


@dataclass(frozen=True, kw_only=True)
class OutboxThread:
    NAME: ClassVar[str] = "outbox_thread"
    DROPPABLE: ClassVar[bool] = False
    incident_id: int
    chat_id: int
    message_id: int


Write: TypeAlias = (
    SaveSnapshot
    | TransitionWrite
    | AppendWrite
    | Supervising
    | Supervised
    | AddSample
    | PruneSamples
    | StartAttempt
    | FinishAttempt
    | OutboxCursor
    | OutboxRows
    | OutboxMark
    | OutboxThread
)

KINDS: Mapping[str, type[Write]] = {kind.NAME: kind for kind in get_args(Write)}
"""Each write's name on disk -> its record."""


def encode_line(seq: int, write: Write) -> bytes:
    """The write as one line of a spill file (newline included)."""
    data = adapter(type(write)).dump_python(write, mode="json")
    line = {"seq": seq, "write": write.NAME, "data": data}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def decode_line(line: bytes) -> tuple[int, Write]:
    """(seq, write) from a line `encode_line` made; `SpillLineError` for anything else."""
    try:
        found = json.loads(line)
        kind = KINDS[found["write"]]
        seq = found["seq"]
        if not isinstance(seq, int):
            raise SpillLineError(f"a spill line's seq is a number, got {seq!r}")
        write: Write = adapter(kind).validate_python(found["data"])
    except (ValueError, KeyError, TypeError, ValidationError) as err:
        if isinstance(err, SpillLineError):
            raise
        raise SpillLineError(f"not a spilled write ({err})") from None
    return seq, write

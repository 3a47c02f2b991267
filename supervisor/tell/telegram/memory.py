"""What the composer remembers per incident (`Memory`, stored as JSON beside the outbox) and
the settings it composes by (`Settings`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from supervisor.record.timeline.base import JSONValue


@dataclass(frozen=True, kw_only=True)
class Settings:
    remind_every: timedelta
    flap_every: timedelta = timedelta(minutes=5)  #: at most one "flapping" update this often
    settle: timedelta = timedelta(minutes=10)  #: a flapping incident's "resolved" waits this
    host_endpoints: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: endpoint -> the routes reached through it or served by it (`via`, `backend`)
    routes_behind: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    busy_after: timedelta = timedelta(minutes=15)  #: a person is told once it was busy this long


@dataclass(frozen=True, kw_only=True)
class Memory:
    """What the composer knows about one incident (stored as JSON)."""

    downs: int = 0  #: times it went down (a reopen counts one more)
    first_down: datetime | None = None
    closed: bool = False  #: the last thing seen was its recovery
    flap_sent_at: datetime | None = None
    held: str = ""  #: a "resolved" held back while it may flap again
    held_at: datetime | None = None
    escalated_at: datetime | None = None
    why: str = ""
    reminded_at: datetime | None = None
    acked_by: str = ""
    repair: str = ""  #: the attempt under way: its rule id
    steps: tuple[str, ...] = ()  #: `action on target` of its steps that passed so far
    fixed_by: str = ""  #: what the attempt did, once its steps passed (cleared when it fails)
    seen: tuple[str, ...] = ()  #: keys of informational messages already sent
    busy_since: datetime | None = None  #: it went busy then (and is still)
    busy_told: bool = False  #: a person was told it is busy

    @property
    def active(self) -> bool:
        """Something is waiting on time (a held message, a reminder)."""
        waiting = self.escalated_at is not None and not self.acked_by and not self.closed
        busy = self.busy_since is not None and not self.busy_told
        return bool(self.held) or waiting or busy

    def to_json(self) -> dict[str, JSONValue]:
        out: dict[str, JSONValue] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, JSONValue] | None) -> Memory:
        if not data:
            return cls()
        values: dict[str, object] = {}
        for name in _FIELDS:
            if name not in data:
                continue
            value = data[name]
            if name in _TIMES and isinstance(value, str):
                values[name] = datetime.fromisoformat(value)
            elif name in _TUPLES and isinstance(value, list):
                values[name] = tuple(str(v) for v in value)
            else:
                values[name] = value
        return cls(**values)  # type: ignore[arg-type]


_FIELDS = tuple(Memory.__dataclass_fields__)
_TIMES = frozenset(
    {"first_down", "flap_sent_at", "held_at", "escalated_at", "reminded_at", "busy_since"}
)
_TUPLES = frozenset({"seen", "steps"})

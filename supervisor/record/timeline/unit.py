"""What systemd said about one of an endpoint's units (`supervisor.hear.streams`), as evidence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from supervisor.core.payload import Maybe, Time
from supervisor.record.timeline.base import EntryKind, JSONValue, Record, register
from supervisor.record.timeline.migrate import judged_v1


@register
@dataclass(frozen=True, kw_only=True)
class UnitHeard(Record):
    """A unit event from the host's journal stream (or its polling fallback): what systemd said,
    the unit's own last lines, and what the daemon made of it (`verdict`). The same event again
    and again (a crash loop) is one more entry: `count` repeats, the last at `last_at` saying
    `last_line`."""

    TAG = "unit_event"
    VERSION = 2
    KIND = EntryKind.EVIDENCE
    host: str
    unit: str
    event: str  #: `failed`, `exited`, `crash_loop`, `started`, `stopped`
    line: str  #: `vllm.service failed: status=127, 2 restarts (exit-code)`
    message: str  #: systemd's own message that made the event
    verdict: str  #: e.g. `down: probe confirms: connection refused`, `ignored: remediating`
    judged: bool = True  #: the policy judged it (False: kept as evidence only, or ignored)
    lines: tuple[str, ...] = ()  #: what the unit and systemd logged about it, oldest first
    result: Maybe[str] = None
    exit_status: Maybe[int] = None
    n_restarts: Maybe[int] = None
    source: str = "journal"  #: `journal`, or `poll` when the host fell back to polling
    cursor: Maybe[str] = None
    count: int = 1  #: identical events in this entry (repeats of the one written before)
    last_at: Maybe[Time] = None  #: when the last of them was seen (count > 1)
    last_line: Maybe[str] = None  #: what the last of them said (count > 1)

    @classmethod
    def upgrade(cls, version: int, payload: Mapping[str, JSONValue]) -> Mapping[str, JSONValue]:
        """Version 1 -> 2: whether it was judged, which version 1 said only in its verdict's
        words (read once more here, by the migration's reader)."""
        if version >= 2 or not isinstance(payload.get("verdict"), str):
            return payload
        return {**payload, "judged": judged_v1(str(payload["verdict"]))}

    @property
    def summary(self) -> str:
        line = f"systemd on {self.host}: {self.line}; {self.verdict}"
        if self.count > 1 and self.last_at is not None:
            line += f", {self.count} times, last at {self.last_at.strftime('%H:%M:%SZ')}"
            if self.last_line and self.last_line != self.line:
                line += f" ({self.last_line})"
        return line

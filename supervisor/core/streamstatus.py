"""How a host's unit-event stream is doing: a phase and its figures, rendered for people
(`status`, the page) and kept in the store as JSON, never read back from its words."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum


class StreamPhase(StrEnum):
    CONNECTING = "connecting"  #: not open yet
    STREAMING = "streaming"  #: the journal follow is open
    RECONNECTING = "reconnecting"  #: lost; trying again with backoff
    POLLING = "polling"  #: cannot be opened: the units are read with `systemctl show` instead
    OLD = "old"  #: saved by an older release as words only (`said`)


@dataclass(frozen=True, kw_only=True)
class StreamStatus:
    phase: StreamPhase
    reason: str = ""  #: why it polls (or why it was lost)
    attempt: int = 0  #: reconnecting: the attempt in a row
    next_in_s: float = 0.0  #: reconnecting: the delay before the next one
    said: str = ""  #: `OLD`: the words an older release saved

    @property
    def text(self) -> str:
        """`streaming`, `reconnecting (attempt 2, next in 0.4s)`, `polling: WHY`."""
        if self.phase is StreamPhase.OLD:
            return self.said
        if self.phase is StreamPhase.RECONNECTING:
            return f"reconnecting (attempt {self.attempt}, next in {self.next_in_s:.1f}s)"
        if self.phase is StreamPhase.POLLING:
            return f"polling: {self.reason}"
        return self.phase.value

    def dumps(self) -> str:
        """What the store keeps (`journal_cursors.status`)."""
        document = {"phase": self.phase.value, "reason": self.reason, "attempt": self.attempt}
        words = {"said": self.said} if self.said else {}
        return json.dumps(document | {"next_in_s": self.next_in_s} | words, sort_keys=True)

    @classmethod
    def loads(cls, stored: str) -> StreamStatus:
        """The status `dumps` kept; the words of an older release (not JSON) stay words."""
        try:
            document = json.loads(stored)
            return cls(
                phase=StreamPhase(document["phase"]),
                reason=str(document.get("reason", "")),
                attempt=int(document.get("attempt", 0)),
                next_in_s=float(document.get("next_in_s", 0.0)),
                said=str(document.get("said", "")),
            )
        except (ValueError, TypeError, KeyError):
            return cls(phase=StreamPhase.OLD, said=stored)


def events_fields(status: StreamStatus | None) -> dict[str, str | None]:
    """A host's `events` (the words) and `events_phase` in the `status --json` document."""
    if status is None:
        return {"events": None, "events_phase": None}
    return {"events": status.text, "events_phase": status.phase.value}


CONNECTING = StreamStatus(phase=StreamPhase.CONNECTING)
STREAMING = StreamStatus(phase=StreamPhase.STREAMING)

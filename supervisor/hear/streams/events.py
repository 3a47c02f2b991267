"""What the host-event stream delivers: one frozen, keyword-only record per unit event."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class EventKind(StrEnum):
    """What happened to a unit, as systemd told it."""

    FAILED = "failed"  #: the unit's process died badly (`Failed with result 'R'.`)
    EXITED = "exited"  #: the main process ended cleanly on its own (`Deactivated successfully.`)
    CRASH_LOOP = "crash_loop"  #: failing again and again, or systemd gave up (start limit)
    STARTED = "started"  #: a start job finished (`Started UNIT - DESCRIPTION.`)
    STOPPED = "stopped"  #: a stop job finished (`Stopped ...` after `systemctl stop`)
    #: the unit's server said a model it was asked for did not load (its own log line,
    #: `supervisor.hear.streams.recognise.LOAD_FAILURES`); the unit still runs
    LOAD_FAILED = "load_failed"

    @property
    def down(self) -> bool:
        """The unit is not serving any more (a probe should confirm at once)."""
        return self not in (EventKind.STARTED, EventKind.LOAD_FAILED)


@dataclass(frozen=True, kw_only=True)
class UnitEvent:
    """One unit event from a host. `lines` are the journal lines the unit and systemd logged
    about it since the unit's previous event (the evidence, oldest first, at most
    `MAX_LINES`); `cursor` is the journal cursor of the entry that made it. The unit's state
    fields come from `systemctl show` when it answered (`confirmed`), else from the journal."""

    host: str
    unit: str
    kind: EventKind
    message: str  #: systemd's message that made the event
    at: datetime  #: when journald received it (UTC)
    cursor: str
    lines: tuple[str, ...] = ()
    active_state: str = ""  #: `ActiveState` (`failed`, `activating`, ...); '' when not shown
    sub_state: str = ""  #: `SubState` (`auto-restart`, `dead`, ...)
    result: str = ""  #: `Result`/`UNIT_RESULT`: `exit-code`, `signal`, `start-limit-hit`, ...
    exit_code: str = ""  #: how the main process ended: `exited`, `killed`, `dumped`
    exit_status: int | None = None  #: its exit status (203 = EXEC) or signal number
    n_restarts: int | None = None  #: systemd's restart counter (`NRestarts`)
    confirmed: bool = False  #: `systemctl show` answered and the state fields are its own
    source: str = "journal"  #: `journal`, or `poll` when the host fell back to polling
    model: str = ""  #: a failed load: the model its line names ('' when the line names none)

    def summary(self) -> str:
        """`vllm.service failed: status=127, 2 restarts (exit-code)`: one line for a timeline."""
        parts = [f"model {self.model}"] if self.model else []
        if self.exit_status is not None:
            killed = self.exit_code in ("killed", "dumped")
            parts.append(f"signal {self.exit_status}" if killed else f"status={self.exit_status}")
        if self.n_restarts:
            parts.append(f"{self.n_restarts} restart{'s' if self.n_restarts != 1 else ''}")
        detail = f": {', '.join(parts)}" if parts else ""
        result = f" ({self.result})" if self.result and self.result != "success" else ""
        return f"{self.unit} {self.kind.value}{detail}{result}"

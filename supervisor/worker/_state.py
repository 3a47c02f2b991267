"""What an endpoint worker carries across a restart and across clock jumps: the state restored
from the store, and the end of its grace kept on both clocks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from supervisor.core.clock import Clock
from supervisor.judge.machine import State
from supervisor.judge.policy import Streaks
from supervisor.record.store.records import Snapshot

CLOCK_JUMP_TOLERANCE = timedelta(seconds=1)
"""Wall and monotonic time may drift apart this much before it counts as a clock jump."""


@dataclass(frozen=True, kw_only=True)
class Restored:
    """What the store remembered about an endpoint when the daemon started."""

    state: State
    since: datetime
    incident_id: int | None
    streaks: Streaks
    grace_until: datetime | None
    last_ok_at: datetime | None = None
    last_ttft_s: float | None = None
    last_tok_s: float | None = None
    last_reason: str = ""


class WallDeadline:
    """A wall-clock instant (a grace's or a silence's end), kept on the monotonic clock too while
    the process runs: when the wall clock jumps (NTP stepping, a wrong RTC set right) the wall
    value moves with it, so a jump neither ends a grace at once nor stretches it by hours. The
    wall value is what is stored, and what a restart goes on."""

    def __init__(self, clock: Clock, on_jump: Callable[[timedelta, datetime], None]) -> None:
        self._clock = clock
        self._on_jump = on_jump
        self._wall: datetime | None = None
        self._monotonic: float | None = None  #: the same instant on the monotonic clock

    @property
    def value(self) -> datetime | None:
        if self._wall is None or self._monotonic is None:
            return self._wall
        left = timedelta(seconds=self._monotonic - self._clock.monotonic())
        anchored = self._clock.now() + left
        if abs(anchored - self._wall) > CLOCK_JUMP_TOLERANCE:
            self._on_jump(abs(anchored - self._wall), anchored)
            self._wall = anchored
        return self._wall

    @value.setter
    def value(self, value: datetime | None) -> None:
        self._wall = value
        if value is None:
            self._monotonic = None
        else:
            left = (value - self._clock.now()).total_seconds()
            self._monotonic = self._clock.monotonic() + left


def restored_from(snapshot: Snapshot | None, *, now: datetime, grace_until: datetime) -> Restored:
    """A stored snapshot, or a fresh `unknown` state whose grace starts with the daemon."""
    if snapshot is None:
        return Restored(
            state=State.UNKNOWN,
            since=now,
            incident_id=None,
            streaks=Streaks(),
            grace_until=grace_until,
        )
    state = State(snapshot.state)
    if state in (State.REMEDIATING, State.VERIFYING):
        state = State.DOWN  # the repair's own record says how far it got; judge afresh
    return replace(
        Restored(
            state=state,
            since=snapshot.since,
            incident_id=snapshot.incident_id,
            streaks=Streaks(fail=snapshot.fail_streak, degraded=snapshot.degraded_streak),
            grace_until=snapshot.grace_until,
        ),
        last_ok_at=snapshot.last_ok_at,
        last_ttft_s=snapshot.last_ttft_s,
        last_tok_s=snapshot.last_tok_s,
        last_reason=snapshot.last_reason,
    )

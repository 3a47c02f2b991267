"""When a `systemctl show` sample of a unit can be trusted, and when it must be taken again.

Inside a crash loop each attempt lives 50-300 ms, and for that moment the unit shows
`active/running` with `ExecMainStatus=0`: sampled then, a unit whose script exits 127 looks
healthy. Between attempts it rests in `SubState=auto-restart` (`auto-restart-queued` on newer
systemd) and `ExecMainStatus` is the exit of the attempt that just ended: that sample is the
informative one.

A sample *may be mid-attempt* when systemd has restarted the unit on its own (`NRestarts > 0`)
and it is now running or (de)activating. It is *settled* once the same attempt (same
`NRestarts`, `MainPID` and `ActiveEnterTimestampMonotonic`) has been seen for `SETTLE` of the
hub's clock: a real run lives that long, a crash-loop attempt does not. The host's own
monotonic clock is never compared with the hub's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from supervisor.playbook.evidence.base import FactValue

SETTLE = 2.0  #: seconds one attempt must be seen running before it counts as a real run
PAUSE = 0.5  #: seconds between two samples (longer than a crash-loop attempt lives)

#: sub-states between two automatic restarts: the last attempt's exit is on show
RESTING = frozenset({"auto-restart", "auto-restart-queued"})
#: active states of a unit that has a process running or starting
MOVING = frozenset({"active", "activating", "deactivating", "reloading", "refreshing"})


def _count(value: FactValue | None) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def may_be_mid_attempt(facts: Mapping[str, FactValue]) -> bool:
    """Whether this sample may show one short-lived attempt of a crash loop."""
    if _count(facts.get("n_restarts")) <= 0:
        return False
    if facts.get("sub_state") in RESTING:
        return False
    return facts.get("active_state") in MOVING


@dataclass(frozen=True)
class SettleAttempt:
    """One run of the unit's main process, as systemd numbers it."""

    n_restarts: int
    main_pid: int
    active_enter: int


def attempt_of(facts: Mapping[str, FactValue]) -> SettleAttempt:
    return SettleAttempt(
        n_restarts=_count(facts.get("n_restarts")),
        main_pid=_count(facts.get("main_pid")),
        active_enter=_count(facts.get("active_enter_monotonic_us")),
    )


class Settling:
    """Fed the samples in order with the hub's monotonic time of each; says which is settled."""

    def __init__(self, settle: float = SETTLE) -> None:
        self._settle = settle
        self._seen: tuple[SettleAttempt, float] | None = None  #: the attempt, when first seen

    def settled(self, facts: Mapping[str, FactValue], at: float) -> bool:
        if not may_be_mid_attempt(facts):
            return True
        attempt = attempt_of(facts)
        if self._seen is None or self._seen[0] != attempt:
            self._seen = (attempt, at)
            return False
        return at - self._seen[1] >= self._settle

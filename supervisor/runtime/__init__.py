"""The running fleet: one worker per endpoint, the host watchers, the probe schedule, reconcile on
reload, and what the last run left in the store.

`Daemon` holds its parts: the workers, the watchers, the schedule (`_schedule`), the unit events
and its `reloads` (`Reconciler`, `_reconcile`); `_restore` reads what the last run stored."""

from supervisor.runtime._daemon import Daemon
from supervisor.runtime._reconcile import (
    DRAIN_ON_RELOAD_SECONDS,
    RESTART_ONLY,
    Forget,
    Reconciled,
    Reconciler,
)
from supervisor.runtime._restore import STOPPED, close_interrupted, stored_snapshot
from supervisor.runtime._schedule import ProbeSchedule

__all__ = [
    "DRAIN_ON_RELOAD_SECONDS",
    "RESTART_ONLY",
    "STOPPED",
    "Daemon",
    "Forget",
    "ProbeSchedule",
    "Reconciled",
    "Reconciler",
    "close_interrupted",
    "stored_snapshot",
]

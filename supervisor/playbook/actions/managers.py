"""Service managers for the unit actions: what `restart_units`, `stop_units` and `start_units`
run on a host, chosen by the host's `service_manager` (a table, not an if-chain).

`supervisor.playbook.actions.units` holds systemd's verbs and the table;
`supervisor.playbook.actions.launchd` holds launchd's. Every unit of one step must share a manager
(an endpoint served by a systemd unit and a launchd job at once is acted on one unit at a time, `on:
unit`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from supervisor.config.supervised import Host, UnitRef
from supervisor.playbook.actions.declare import StopSteps
from supervisor.playbook.actions.steps import Steps
from supervisor.playbook.evidence.unitstate import UnitState

Units = tuple[tuple[Host, UnitRef], ...]


@dataclass(frozen=True, kw_only=True)
class UnitManager:
    """One service manager's verbs over units in the order given (`stop` gets them reversed).
    `reset_failed` is systemd's `reset-failed` before starting (launchd has none). A stop (a
    restart's too) is bounded: a unit that has not stopped gracefully within the `timedelta`
    given has every process of it killed (SIGKILL), and the step goes on. `read` asks the
    manager what one unit is doing now."""

    restart: Callable[[Steps, Units, bool, timedelta], Awaitable[None]]
    stop: Callable[[Steps, Units, timedelta], Awaitable[None]]
    start: Callable[[Steps, Units, bool], Awaitable[None]]
    read: Callable[[Steps, Host, UnitRef], Awaitable[UnitState]]


def manager_of(managers: Mapping[str, UnitManager], units: Units) -> UnitManager:
    """The manager of every unit's host; a mixed or unknown one stops the action."""
    kinds = sorted({host.service_manager for host, _ in units})
    if len(kinds) != 1:
        listing = ", ".join(f"{unit.unit} on {host.name}" for host, unit in units)
        raise StopSteps(
            f"the units ({listing}) are managed by {' and '.join(kinds)}: "
            "act on them one at a time (on: unit)"
        )
    try:
        return managers[kinds[0]]
    except KeyError:
        raise StopSteps(f"no unit actions for service manager {kinds[0]!r}") from None

"""What the guard rails decided when they did not let a repair go ahead as usual: paused, the
endpoint moved on, hosts busy, a dry run's plan, a person's restart refused or failed, new
evidence heard while escalated that changes nothing. (Budget spent, manual and confirm modes end
in an `Escalation`.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from supervisor.core.payload import Maybe
from supervisor.record.timeline.base import EntryKind, Record, register


class Outcome(StrEnum):
    PAUSED = "paused"  #: automatic action is paused
    MOVED_ON = "moved_on"  #: the endpoint left the states a repair acts on
    HOSTS_BUSY = "hosts_busy"  #: waiting for other repairs to release its hosts
    DRY_RUN_PLAN = "dry_run_plan"  #: a dry run: what the rule would do
    RESTART_REFUSED = "restart_refused"  #: a person's restart refused by a guard
    RESTART_PLAN = "restart_plan"  #: a person's restart in a dry run: what it would do
    RESTART_FAILED = "restart_failed"  #: a person's restart ran and failed
    STILL_ESCALATED = "still_escalated"  #: escalated, new evidence heard: nothing new to do


@register
@dataclass(frozen=True, kw_only=True)
class Decision(Record):
    TAG = "decision"
    KIND = EntryKind.DECISION
    outcome: Outcome
    rule: Maybe[str] = None
    budget: str = ""  #: what the budget said, e.g. "attempt 1 of 2 for r in 1h"
    plan: tuple[str, ...] = ()  #: the commands it would send (dry runs)
    actor: Maybe[str] = None  #: the person who asked
    why: str = ""  #: a refusal's or a failure's reason; for a pause, what is paused
    state: str = ""  #: the state it moved on to
    holders: Mapping[str, str] = field(default_factory=dict)  #: busy host -> the endpoint on it

    @property
    def summary(self) -> str:
        return _RENDER[self.outcome](self)

    @property
    def is_plan(self) -> bool:
        """A dry run's account of a repair it would make."""
        return self.outcome is Outcome.DRY_RUN_PLAN


_RENDER: dict[Outcome, Callable[[Decision], str]] = {
    Outcome.PAUSED: lambda d: f"{d.why or 'automatic action is paused'}: not acting",
    Outcome.MOVED_ON: lambda d: f"now {d.state}: not acting",
    Outcome.HOSTS_BUSY: lambda d: (
        "waiting for hosts busy with a repair: "
        + ", ".join(f"{h} (by {who})" for h, who in d.holders.items())
    ),
    Outcome.DRY_RUN_PLAN: lambda d: (
        f"dry run: would apply {d.rule} ({d.budget}): " + "; ".join(d.plan)
    ),
    Outcome.RESTART_REFUSED: lambda d: f"restart by {d.actor} refused: {d.why}",
    Outcome.RESTART_PLAN: lambda d: f"dry run: restart by {d.actor}: {list(d.plan)}",
    Outcome.RESTART_FAILED: lambda d: f"restart by {d.actor} failed: {d.why}",
    Outcome.STILL_ESCALATED: lambda d: f"still escalated: {d.why}",
}

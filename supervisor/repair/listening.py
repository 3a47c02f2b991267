"""Escalated is not deaf: what an escalated endpoint has already heard, and whether something it
hears now is decisive enough to diagnose again.

When an endpoint is escalated, the evidence in hand (its last unit death, its last `/metrics`
verdict) is remembered as heard. Later, each unit death and each `/metrics` verdict the worker
hears while escalated (`supervisor.worker.Heard`) is decisive when its key was never heard in this
incident: a new exit status, the first crash loop, a changed verdict (no verdict yet counts as
`unknown`: no signal). A crash loop repeating the
same status every few seconds is heard once.

Bounded so it cannot loop: at most `MAX_LOOKS` diagnoses per incident, each for a key not heard
before (the keys are few: per unit, death or crash loop times an exit status; per endpoint, four
verdicts); the runner acts only when another rule than the one escalated for matches with
budget left (the budget bounds the repairs), and a person's ack ends the looking (the runner
reads the timeline for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from supervisor.judge.machine import State
from supervisor.judge.progress.judge import Progress, ProgressVerdict
from supervisor.worker import EndpointRecord, Heard, progress_heard, unit_heard

MAX_LOOKS = 3


@dataclass(kw_only=True)
class Escalated:
    """One escalated incident: what it was escalated for, what it heard, how often it looked."""

    incident_id: int | None
    rule: str | None  #: the rule it was escalated for (None: no rule matched)
    state: State  #: what it is diagnosed as when it looks again (`down`, or `degraded`)
    heard: set[str] = field(default_factory=set)
    looks: int = 0


class Listening:
    """The escalated endpoints' memories, by endpoint name."""

    def __init__(self) -> None:
        self._by_name: dict[str, Escalated] = {}

    def escalated(self, record: EndpointRecord, rule: str | None, *, was: State) -> None:
        """`record`'s endpoint is being escalated (for `rule`, from state `was`): what it knows
        is heard."""
        known = self._by_name.get(record.name)
        same = known is not None and known.incident_id == record.incident_id
        memory = (
            known
            if same and known is not None
            else Escalated(
                incident_id=record.incident_id,
                rule=rule,
                state=State.DEGRADED if was is State.DEGRADED else State.DOWN,
            )
        )
        memory.rule = rule
        if record.last_unit_signal is not None:
            memory.heard.add(unit_heard(record.last_unit_signal).key)
        # no `/metrics` verdict yet is as much as `unknown` (no signal): a first `unknown`
        # heard later tells nothing new (its timing, before or after the escalation, is chance)
        progress = record.last_progress or Progress(verdict=ProgressVerdict.UNKNOWN, reason="")
        memory.heard.add(progress_heard(progress).key)
        self._by_name[record.name] = memory

    def decisive(self, record: EndpointRecord, heard: Heard) -> Escalated | None:
        """The memory to look again with, when `heard` is new in this incident and looks are
        left; None otherwise. Counts the look."""
        memory = self._by_name.get(record.name)
        if memory is None or memory.incident_id != record.incident_id:
            return None
        if heard.key in memory.heard or memory.looks >= MAX_LOOKS:
            return None
        memory.heard.add(heard.key)
        memory.looks += 1
        return memory

"""The endpoint state machine: which states exist and which trigger may move between them.

One `transitions` AsyncMachine (queued per model) holds every endpoint as a model and is
the one authority on the graph: `FleetMachine.fire` is the only way a state changes, and it asks
the machine whether the trigger may fire there. What trigger to fire is decided by
`supervisor.judge.policy` from probe results; this module only knows the graph, which the
machine also draws (`FleetMachine.diagram`, in `docs/states.md`: `python -m
supervisor.judge.machine` prints it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from transitions import MachineError
from transitions.extensions.asyncio import AsyncMachine


class State(StrEnum):
    """The states of one endpoint."""

    UNKNOWN = "unknown"  #: not probed yet since the daemon (re)started without a stored state
    STARTING = "starting"  #: inside its startup grace: failures are recorded, never acted on
    HEALTHY = "healthy"  #: the real check (completion, embedding, health URL) passes
    IDLE = "idle"  #: loads on demand, not loaded now: the server answers; no probe loads it
    DEGRADED = "degraded"  #: answers, but without reasoning text or far under its tok/s baseline
    BUSY = "busy"  #: a real check failed or was slow while tokens flow with requests queued: load
    DOWN = "down"  #: confirmed failing (consecutive failures plus an immediate re-probe)
    UNREACHABLE = "unreachable"  #: the cause is elsewhere: a serving host, its router or backend
    REMEDIATING = "remediating"  #: a repair is running
    VERIFYING = "verifying"  #: a repair ran; waiting for a real completion to pass
    ESCALATED = "escalated"  #: a person is needed; automatic action paused
    MAINTENANCE = "maintenance"  #: silenced by a person; nothing is acted on


class HostState(StrEnum):
    """The states of one host (`supervisor.hear.reachability`): its SSH port answers or not."""

    UNKNOWN = "unknown"  #: not checked yet since the daemon (re)started without a stored state
    REACHABLE = "reachable"
    UNREACHABLE = "unreachable"


class Trigger(StrEnum):
    """Everything that may move an endpoint between states."""

    PASS = "pass_check"  # noqa: S105 - a trigger name  #: the real check passed
    IDLE = "found_idle"  #: on demand: the server answers, its model is not loaded
    DOWN = "confirm_down"  #: failures confirmed
    DEGRADE = "confirm_degraded"  #: degradation confirmed
    BUSY = "confirm_busy"  #: a failed or slow real check, the server making progress under load
    GRACE = "begin_grace"  #: first failure of an endpoint whose state is unknown
    RESTARTED = "restarted"  #: its serving process (re)started: a new startup grace
    HOST_LOST = "host_lost"  #: a host serving it stopped answering
    BLOCKED = "blocked"  #: its failure is its router's or its backend's (`via`, `backend`)
    UNBLOCKED = "unblocked"  #: blocked, and still failing while its router and backend answer
    HOST_BACK = "host_back"  #: every host serving it answers again
    REMEDIATE = "remediate"  #: a repair starts
    VERIFY = "verify"  #: the repair's steps finished; verification starts
    VERIFY_FAILED = "verify_failed"  #: verification ran out of time
    ESCALATE = "escalate"  #: a person is needed
    RECONSIDER = "reconsider"  #: escalated, new evidence made another rule match: repair again
    SILENCE = "silence"  #: a person put it in maintenance
    UNSILENCE = "unsilence"  #: maintenance ended: judge it afresh


S = State
_ALL = tuple(State)

#: (trigger, sources, destination): the whole graph, as the machine is built from it.
TRANSITIONS: tuple[tuple[Trigger, tuple[State, ...], State], ...] = (
    (
        Trigger.PASS,
        (
            S.UNKNOWN,
            S.STARTING,
            S.IDLE,
            S.DEGRADED,
            S.BUSY,
            S.DOWN,
            S.VERIFYING,
            S.ESCALATED,
            S.UNREACHABLE,
        ),
        S.HEALTHY,
    ),
    (Trigger.IDLE, (S.UNKNOWN, S.STARTING, S.HEALTHY), S.IDLE),
    (Trigger.DOWN, (S.UNKNOWN, S.STARTING, S.HEALTHY, S.IDLE, S.DEGRADED, S.BUSY), S.DOWN),
    (
        Trigger.DEGRADE,
        (S.UNKNOWN, S.STARTING, S.HEALTHY, S.IDLE, S.BUSY, S.DOWN, S.VERIFYING),
        S.DEGRADED,
    ),
    (Trigger.BUSY, (S.UNKNOWN, S.STARTING, S.HEALTHY, S.IDLE, S.DEGRADED), S.BUSY),
    (Trigger.GRACE, (S.UNKNOWN,), S.STARTING),
    (
        Trigger.RESTARTED,
        (
            S.UNKNOWN,
            S.STARTING,
            S.HEALTHY,
            S.IDLE,
            S.DEGRADED,
            S.BUSY,
            S.DOWN,
            S.ESCALATED,
            S.VERIFYING,
        ),
        S.STARTING,
    ),
    (
        Trigger.HOST_LOST,
        tuple(s for s in _ALL if s not in (S.MAINTENANCE, S.UNREACHABLE)),
        S.UNREACHABLE,
    ),
    (Trigger.HOST_BACK, (S.UNREACHABLE,), S.STARTING),
    (
        Trigger.BLOCKED,
        (S.UNKNOWN, S.STARTING, S.HEALTHY, S.IDLE, S.DEGRADED, S.BUSY),
        S.UNREACHABLE,
    ),
    (Trigger.UNBLOCKED, (S.UNREACHABLE,), S.DOWN),
    (Trigger.REMEDIATE, (S.DOWN, S.DEGRADED), S.REMEDIATING),
    (Trigger.VERIFY, (S.REMEDIATING,), S.VERIFYING),
    (Trigger.VERIFY_FAILED, (S.VERIFYING,), S.DOWN),
    (
        Trigger.ESCALATE,
        (S.STARTING, S.DEGRADED, S.DOWN, S.REMEDIATING, S.VERIFYING, S.UNREACHABLE),
        S.ESCALATED,
    ),
    (Trigger.RECONSIDER, (S.ESCALATED,), S.DOWN),
    (Trigger.SILENCE, tuple(s for s in _ALL if s is not S.MAINTENANCE), S.MAINTENANCE),
    (Trigger.UNSILENCE, (S.MAINTENANCE,), S.UNKNOWN),
)

#: States in which an incident is open because of the endpoint itself.
INCIDENT_STATES = frozenset({S.DOWN, S.DEGRADED, S.BUSY, S.REMEDIATING, S.VERIFYING, S.ESCALATED})
#: States in which nothing automatic may act on the endpoint (busy: restarting a saturated
#: server kills every request in flight, so load is reported, never repaired).
HANDS_OFF_STATES = frozenset({S.STARTING, S.BUSY, S.UNREACHABLE, S.ESCALATED, S.MAINTENANCE})


@dataclass(frozen=True, kw_only=True)
class Change:
    """A state change that happened."""

    endpoint: str
    source: State
    dest: State
    trigger: Trigger


class _Model:
    """What transitions attaches its state and trigger methods to."""

    trigger: Callable[[str], Awaitable[bool]]  #: fires a trigger (added by transitions)
    may_trigger: Callable[[str], Awaitable[bool]]  #: whether it may fire now (likewise)

    def __init__(self, name: str) -> None:
        self.name = name
        self.state: str = State.UNKNOWN.value


def _graph() -> dict[str, Any]:
    """The machine's definition, for the running machine and the drawn one alike."""
    return {
        "states": [s.value for s in State],
        "transitions": [
            {"trigger": t.value, "source": [s.value for s in sources], "dest": dest.value}
            for t, sources, dest in TRANSITIONS
        ],
        "initial": State.UNKNOWN.value,
        "auto_transitions": False,
    }


class FleetMachine:
    """One AsyncMachine for every endpoint; `fire` is the only way a state changes."""

    TITLE = "endpoint states"

    def __init__(self) -> None:
        # a plain machine runs (a graph machine keeps a graph per model, never freed when the
        # model is removed, and costs three times as much per transition); `diagram` draws one
        # built from the same definition
        self._machine = AsyncMachine(model=None, queued="model", **_graph())
        self._models: dict[str, _Model] = {}

    def add(self, endpoint: str, state: State) -> None:
        model = _Model(endpoint)
        self._machine.add_model(model, initial=state.value)
        self._models[endpoint] = model

    def remove(self, endpoint: str) -> None:
        model = self._models.pop(endpoint)
        self._machine.remove_model(model)

    def state(self, endpoint: str) -> State:
        return State(self._models[endpoint].state)

    async def fire(self, endpoint: str, trigger: Trigger) -> Change | None:
        """Fire `trigger`; None (and no change) when the machine says it may not fire here."""
        model = self._models[endpoint]
        source = State(model.state)
        if not await model.may_trigger(trigger.value):
            return None
        try:
            await model.trigger(trigger.value)
        except MachineError:  # its state moved between the question and the answer
            return None
        return Change(endpoint=endpoint, source=source, dest=State(model.state), trigger=trigger)

    @classmethod
    def diagram(cls) -> str:
        """The graph as transitions draws the machine's definition (Mermaid, no endpoint's
        state marked), each line's trailing blanks trimmed."""
        from transitions.extensions import GraphMachine  # the docs' tool, not the daemon's

        graph = GraphMachine(model=None, title=cls.TITLE, graph_engine="mermaid", **_graph())
        drawn = graph.graph_cls(graph).get_graph(title=cls.TITLE).draw(None)
        return "\n".join(line.rstrip() for line in str(drawn).splitlines()) + "\n"


if __name__ == "__main__":
    print(FleetMachine().diagram(), end="")

"""The state graph: every (state, trigger) pair, allowed or refused, against the real machine;
and its drawing in docs/states.md, which is what the machine draws."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.judge.machine import TRANSITIONS, FleetMachine, State, Trigger

S, T = State, Trigger

#: The whole graph written out by hand: (trigger, source) -> destination. Pairs not listed must
#: be refused. Reading this table is reading the product's rules.
EXPECTED: dict[tuple[Trigger, State], State] = {
    # a passing real check ends every problem state except a repair in progress or maintenance
    (T.PASS, S.UNKNOWN): S.HEALTHY,
    (T.PASS, S.STARTING): S.HEALTHY,
    (T.PASS, S.DEGRADED): S.HEALTHY,
    (T.PASS, S.BUSY): S.HEALTHY,  # the load passed: a real check answers in time again
    (T.PASS, S.DOWN): S.HEALTHY,
    (T.PASS, S.VERIFYING): S.HEALTHY,
    (T.PASS, S.ESCALATED): S.HEALTHY,
    (T.PASS, S.UNREACHABLE): S.HEALTHY,
    (T.PASS, S.IDLE): S.HEALTHY,  # on demand: its model loaded (by a person) and answering
    # on demand: the server answers, its model is not loaded; only from the calm states (a
    # problem is left by a real check that passes, never by a model found unloaded)
    (T.IDLE, S.UNKNOWN): S.IDLE,
    (T.IDLE, S.STARTING): S.IDLE,
    (T.IDLE, S.HEALTHY): S.IDLE,
    (T.DOWN, S.IDLE): S.DOWN,
    (T.DEGRADE, S.IDLE): S.DEGRADED,
    (T.BUSY, S.IDLE): S.BUSY,
    (T.RESTARTED, S.IDLE): S.STARTING,
    (T.DOWN, S.UNKNOWN): S.DOWN,
    (T.DOWN, S.STARTING): S.DOWN,
    (T.DOWN, S.HEALTHY): S.DOWN,
    (T.DOWN, S.DEGRADED): S.DOWN,
    (T.DOWN, S.BUSY): S.DOWN,  # hung (the counter froze), or the load left and it still fails
    (T.DEGRADE, S.UNKNOWN): S.DEGRADED,
    (T.DEGRADE, S.STARTING): S.DEGRADED,
    (T.DEGRADE, S.HEALTHY): S.DEGRADED,
    (T.DEGRADE, S.BUSY): S.DEGRADED,  # the load left and it is still slow
    (T.DEGRADE, S.DOWN): S.DEGRADED,
    (T.DEGRADE, S.VERIFYING): S.DEGRADED,  # a repair brought it back, answering but degraded
    # busy: a failed or slow real check while tokens flow with requests queued; never from a
    # problem state (down stays down until a real check passes), never into a repair
    (T.BUSY, S.UNKNOWN): S.BUSY,
    (T.BUSY, S.STARTING): S.BUSY,
    (T.BUSY, S.HEALTHY): S.BUSY,
    (T.BUSY, S.DEGRADED): S.BUSY,
    (T.GRACE, S.UNKNOWN): S.STARTING,
    (T.RESTARTED, S.UNKNOWN): S.STARTING,
    (T.RESTARTED, S.STARTING): S.STARTING,
    (T.RESTARTED, S.HEALTHY): S.STARTING,
    (T.RESTARTED, S.DEGRADED): S.STARTING,
    (T.RESTARTED, S.BUSY): S.STARTING,
    (T.RESTARTED, S.DOWN): S.STARTING,
    (T.RESTARTED, S.ESCALATED): S.STARTING,
    (T.RESTARTED, S.VERIFYING): S.STARTING,
    **{(T.HOST_LOST, s): S.UNREACHABLE for s in State if s not in (S.MAINTENANCE, S.UNREACHABLE)},
    (T.HOST_BACK, S.UNREACHABLE): S.STARTING,
    # behind a router: a failure that is the router's or the backend's (no incident here); a
    # failure that outlives their recovery is its own
    **{
        (T.BLOCKED, s): S.UNREACHABLE
        for s in (S.UNKNOWN, S.STARTING, S.HEALTHY, S.IDLE, S.DEGRADED, S.BUSY)
    },
    (T.UNBLOCKED, S.UNREACHABLE): S.DOWN,
    (T.REMEDIATE, S.DOWN): S.REMEDIATING,
    (T.REMEDIATE, S.DEGRADED): S.REMEDIATING,
    (T.VERIFY, S.REMEDIATING): S.VERIFYING,
    (T.VERIFY_FAILED, S.VERIFYING): S.DOWN,
    (T.ESCALATE, S.STARTING): S.ESCALATED,
    (T.ESCALATE, S.DEGRADED): S.ESCALATED,
    (T.ESCALATE, S.DOWN): S.ESCALATED,
    (T.ESCALATE, S.REMEDIATING): S.ESCALATED,
    (T.ESCALATE, S.VERIFYING): S.ESCALATED,
    (T.ESCALATE, S.UNREACHABLE): S.ESCALATED,
    (T.RECONSIDER, S.ESCALATED): S.DOWN,
    **{(T.SILENCE, s): S.MAINTENANCE for s in State if s is not S.MAINTENANCE},
    (T.UNSILENCE, S.MAINTENANCE): S.UNKNOWN,
}

ALL_PAIRS = [(t, s) for t in Trigger for s in State]


@pytest.mark.parametrize(("trigger", "source"), ALL_PAIRS, ids=[f"{t}-{s}" for t, s in ALL_PAIRS])
async def test_every_trigger_from_every_state(trigger: Trigger, source: State) -> None:
    machine = FleetMachine()
    machine.add("ep", source)
    change = await machine.fire("ep", trigger)
    expected = EXPECTED.get((trigger, source))
    if expected is None:
        assert change is None
        assert machine.state("ep") is source
    else:
        assert change is not None
        assert (change.source, change.dest, change.trigger) == (source, expected, trigger)
        assert machine.state("ep") is expected


def test_the_table_and_the_graph_are_the_same() -> None:
    from_graph = {(t, s): dest for t, sources, dest in TRANSITIONS for s in sources}
    assert from_graph == EXPECTED


async def test_endpoints_move_independently_and_can_be_removed() -> None:
    machine = FleetMachine()
    machine.add("a", S.HEALTHY)
    machine.add("b", S.HEALTHY)
    await machine.fire("a", T.DOWN)
    assert (machine.state("a"), machine.state("b")) == (S.DOWN, S.HEALTHY)
    machine.remove("a")
    with pytest.raises(KeyError):
        machine.state("a")


STATES_MD = Path(__file__).resolve().parents[1] / "docs" / "states.md"


def _documented_diagram() -> str:
    """The Mermaid block of docs/states.md."""
    [block] = re.findall(
        r"^```mermaid\n(.*?)^```$", STATES_MD.read_text(), re.MULTILINE | re.DOTALL
    )
    return str(block)


async def test_the_documented_graph_is_what_the_running_machine_draws() -> None:
    """docs/states.md shows the machine's own drawing; a machine in use (endpoints in any
    state, triggers fired) draws the same graph: no endpoint's state is marked."""
    machine = FleetMachine()
    machine.add("a", S.HEALTHY)
    machine.add("b", S.ESCALATED)
    await machine.fire("a", T.DOWN)
    assert _documented_diagram() == machine.diagram() == FleetMachine().diagram()


def test_the_drawing_has_every_move_of_the_graph_and_no_other() -> None:
    """Each line `source --> dest: trigger | trigger` of the drawing, read back."""
    drawn = {
        (T(trigger), S(source), S(dest))
        for source, dest, triggers in re.findall(
            r"^  (\w+) --> (\w+): (.+)$", FleetMachine().diagram(), re.MULTILINE
        )
        for trigger in triggers.split(" | ")
    }
    assert drawn == {(t, s, dest) for (t, s), dest in EXPECTED.items()}
    assert "  [*] --> unknown" in FleetMachine().diagram().splitlines()


def test_the_module_prints_the_diagram_to_regenerate_the_docs() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "supervisor.judge.machine"],
        capture_output=True,
        text=True,
        check=True,
        cwd=STATES_MD.parents[1],
    )
    assert (printed.stdout, printed.stderr) == (FleetMachine().diagram(), "")

"""Wall-clock jumps (NTP stepping, a wrong RTC set right) while monotonic time runs normally.

What each timer follows:
- a startup grace and a silence in progress run on monotonic time while the process runs: a
  jump moves their wall-clock end with it (so a backward jump does not stretch them by hours and a
  forward jump does not end them at once); the stored wall time is what a restart goes on;
- a budget window and an incident's duration are wall-time differences between stored records
  (they must survive restarts): a jump shifts them by its size. Backward keeps spent attempts
  counted longer (the safe side); forward frees a budget early, at most once per jump; a duration
  is never negative (clamped at 0).

The endpoint is real (its probe gets a real connection refused on 127.0.0.1), the store is a real
SQLite file; only time is fake.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from supervisor.config.loader import load_config
from supervisor.config.supervised import Endpoint
from supervisor.core.events import ProbeResult, ProbeTick, Stop, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.judge.machine import FleetMachine, State, Trigger
from supervisor.probe import run_probe
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.state import Transition
from supervisor.repair.guards import check_budget
from supervisor.worker import EndpointWorker, restored_from
from tests.helpers import write_fleet
from tests.ports import free_port

START = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
H2 = timedelta(hours=2)


@dataclass
class JumpingClock:
    """Monotonic time moves only when told; wall time is monotonic time plus jumps."""

    mono: float = 1000.0
    offset: timedelta = field(default_factory=timedelta)

    def now(self) -> datetime:
        return START + timedelta(seconds=self.mono - 1000.0) + self.offset

    def monotonic(self) -> float:
        return self.mono

    def advance(self, by: timedelta) -> None:
        assert by >= timedelta(0), "monotonic time never goes back"
        self.mono += by.total_seconds()

    def jump(self, by: timedelta) -> None:
        self.offset += by


@dataclass
class Rig:
    clock: JumpingClock
    store: Store
    worker: EndpointWorker

    async def tick(self) -> None:
        """One liveness probe, handled to the end."""
        self.worker.submit(ProbeTick(endpoint="ep", tier=Tier.LIVENESS, at=self.clock.now()))
        await asyncio.wait_for(self.worker.idle.wait(), 5)


def _endpoint(tmp_path: Path, grace: str) -> Endpoint:
    (tmp_path / "playbooks").mkdir(exist_ok=True)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: a real connection refused
    spec = {"kind": "openai", "url": url, "model": "m"}
    config = load_config(write_fleet(tmp_path, {"ep": spec}, startup_grace=grace))
    return config.endpoints["ep"]


@pytest.fixture
async def rig(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    grace: str = getattr(request, "param", "10m")
    clock = JumpingClock()
    endpoint = _endpoint(tmp_path, grace)
    now = clock.now()
    async with await Store.open(tmp_path / "state.db") as store, HttpClient() as client:

        async def prober(endpoint: Endpoint, tier: Tier) -> ProbeResult:
            return await run_probe(endpoint, tier, client, clock=clock)

        worker = EndpointWorker(
            endpoint,
            machine=FleetMachine(),
            store=store,
            prober=prober,
            clock=clock,
            restored=restored_from(None, now=now, grace_until=now + endpoint.startup_grace),
            unreachable_hosts=set(),
        )
        task = asyncio.create_task(worker.run())
        try:
            yield Rig(clock=clock, store=store, worker=worker)
        finally:
            worker.submit(Stop(endpoint="ep", at=clock.now()))
            await asyncio.wait_for(task, 5)


@pytest.mark.parametrize(
    ("jump", "then", "in_grace"),
    [
        (timedelta(0), timedelta(minutes=7), True),
        (timedelta(0), timedelta(minutes=10), False),
        (H2, timedelta(minutes=2), True),  # forward: the grace does not end at once
        (H2, timedelta(minutes=7), True),
        (H2, timedelta(minutes=10), False),
        (-H2, timedelta(minutes=10), False),  # backward: the grace is not stretched by 2h
        (-H2, timedelta(minutes=7), True),
    ],
)
async def test_a_startup_grace_runs_on_monotonic_time_across_a_jump(
    rig: Rig, jump: timedelta, then: timedelta, in_grace: bool
) -> None:
    rig.clock.advance(timedelta(minutes=2))
    await rig.tick()  # first failure inside the grace: unknown -> starting
    assert rig.worker.state is State.STARTING
    rig.clock.jump(jump)
    rig.clock.advance(then - timedelta(minutes=2))  # `then`: monotonic time since the start
    await rig.tick()
    assert (rig.worker.record.streaks.fail == 0) is in_grace
    # the wall-clock end moved with the jump, and that is what is stored for a restart
    expected_end = START + timedelta(minutes=10) + jump
    assert rig.worker.record.grace_until == expected_end
    snapshot = await rig.store.snapshot(SubjectKind.ENDPOINT, "ep")
    assert snapshot is not None
    assert snapshot.grace_until == expected_end


@pytest.mark.parametrize(
    ("jump", "then", "silenced"),
    [
        (timedelta(0), timedelta(minutes=29), True),
        (timedelta(0), timedelta(minutes=31), False),
        (H2, timedelta(minutes=6), True),  # forward: the silence does not end at once
        (-H2, timedelta(minutes=31), False),  # backward: it does not last 2h longer
        (-H2, timedelta(minutes=29), True),
    ],
)
async def test_a_silence_runs_on_monotonic_time_across_a_jump(
    rig: Rig, jump: timedelta, then: timedelta, silenced: bool
) -> None:
    until = rig.clock.now() + timedelta(minutes=30)
    assert await rig.worker.silence(until, "silenced for 30m by alice") is not None
    rig.clock.advance(timedelta(minutes=5))
    rig.clock.jump(jump)
    rig.clock.advance(then - timedelta(minutes=5))
    await rig.tick()
    if silenced:
        assert rig.worker.state is State.MAINTENANCE
        assert rig.worker.record.grace_until == until + jump
    else:
        assert rig.worker.state is not State.MAINTENANCE  # ended, then judged afresh
        assert rig.worker.record.grace_until is None


@pytest.mark.parametrize("rig", ["0s"], indirect=True)
async def test_a_failure_with_no_grace_is_counted_whatever_the_jump(rig: Rig) -> None:
    rig.clock.jump(-H2)
    await rig.tick()
    assert rig.worker.record.grace_until is not None
    assert rig.worker.record.streaks.fail == 1


@pytest.mark.parametrize(
    ("jump", "then", "allowed", "note"),
    [
        (timedelta(0), timedelta(minutes=59), False, "budget spent: r ran 1 of 1 times in 1h"),
        (timedelta(0), timedelta(minutes=61), True, "attempt 1 of 1 for r in 1h"),
        # backward: the attempt looks 2h younger and stays counted 2h longer (the safe side)
        (-H2, timedelta(minutes=61), False, "budget spent: r ran 1 of 1 times in 1h"),
        (-H2, timedelta(minutes=181), True, "attempt 1 of 1 for r in 1h"),
        # forward: the window ends early by the jump (one more attempt, once per jump)
        (H2, timedelta(minutes=1), True, "attempt 1 of 1 for r in 1h"),
    ],
)
async def test_a_budget_window_is_wall_time_between_stored_attempts(
    tmp_path: Path, jump: timedelta, then: timedelta, allowed: bool, note: str
) -> None:
    clock = JumpingClock()
    async with await Store.open(tmp_path / "state.db") as store:
        await store.start_attempt(endpoint="ep", rule_id="r", incident_id=None, at=clock.now())
        clock.jump(jump)
        clock.advance(then)
        spend = await check_budget(
            store,
            endpoint="ep",
            rule_id="r",
            rule_attempts=1,
            rule_window=timedelta(hours=1),
            max_attempts=5,
            window=timedelta(hours=6),
            now=clock.now(),
        )
    assert (spend.allowed, spend.note) == (allowed, note)


@pytest.mark.parametrize(
    ("jump", "duration"),
    [
        (timedelta(0), timedelta(minutes=10)),
        (H2, timedelta(hours=2, minutes=10)),
        (-H2, timedelta(0)),  # a backward jump past the opening: clamped, never negative
    ],
)
async def test_an_incident_duration_is_the_wall_time_between_its_open_and_close(
    tmp_path: Path, jump: timedelta, duration: timedelta
) -> None:
    clock = JumpingClock()
    async with await Store.open(tmp_path / "state.db") as store:
        opened = await store.transition(
            snapshot=_snapshot(clock.now(), "down"),
            entry=_entry(clock.now(), "healthy", "down"),
            open_cause="connection refused",
        )
        assert opened is not None
        clock.advance(timedelta(minutes=10))
        clock.jump(jump)
        await store.transition(
            snapshot=_snapshot(clock.now(), "healthy"),
            entry=_entry(clock.now(), "down", "healthy"),
            close_resolution="completion passed",
        )
        incident = await store.incident(opened)
    assert incident is not None
    assert incident.duration == duration


def _entry(at: datetime, source: str, dest: str) -> TimelineEntry:
    record = Transition(source=State(source), dest=State(dest), trigger=Trigger.PASS, note="")
    return TimelineEntry(at=at, subject="ep", record=record)


def _snapshot(at: datetime, state: str) -> Snapshot:
    return Snapshot(kind=SubjectKind.ENDPOINT, name="ep", state=state, since=at, updated_at=at)

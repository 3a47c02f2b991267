"""An endpoint's state as the store knows it, and how every change of it is written.

`EndpointRecord` holds what the worker knows of its endpoint (state, incident, streaks, grace,
the latest sample and problem) and writes each step: a transition (its timeline entry, the
incident it opens or closes, the snapshot), a probe (the snapshot with its sample; inside an
incident, counted into a run of identical results: `_runs`), a unit's event, an entry from
outside. An endpoint whose host is lost has no incident of its own: the host's incident tells
its story. The worker (`_worker`) holds one; only its task calls these methods, so there is one
writer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.durations import format_duration
from supervisor.core.events import ProbeResult, UnitSignal
from supervisor.judge.machine import Change, FleetMachine, State, Trigger
from supervisor.judge.policy import Streaks
from supervisor.judge.progress.judge import Progress
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.summaries import resolution_text, transition_entry
from supervisor.worker._runs import ProbeRuns, UnitRuns
from supervisor.worker._state import Restored, WallDeadline


class EndpointRecord:
    """The endpoint's state and its writes; its `EndpointWorker` is the one that calls them."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        machine: FleetMachine,
        store: Store,
        clock: Clock,
        restored: Restored,
        unreachable_hosts: set[str],
        reopen_within: timedelta | None,
    ) -> None:
        self.reopen_within = reopen_within
        self.endpoint = endpoint
        self.name = endpoint.name
        self._machine = machine
        self._store = store
        self._clock = clock
        self._runs = ProbeRuns(store, subject=self.name)
        self._unit_runs = UnitRuns(store)
        self.since = restored.since
        self.incident_id = restored.incident_id
        self.streaks = restored.streaks
        self._grace = WallDeadline(clock, on_jump=self._clock_jumped)
        self.grace_until = restored.grace_until
        self.last_ok_at = restored.last_ok_at
        self.last_ttft_s = restored.last_ttft_s
        self.last_tok_s = restored.last_tok_s
        self.last_reason = restored.last_reason
        #: the hosts of this endpoint that do not answer
        self.unreachable = set(unreachable_hosts)
        #: while unreachable because its router or backend fails: which, and why (`via`)
        self.blocked_by = ""
        #: per lost host, the host's incident (where this endpoint's story is told meanwhile)
        self.host_incidents: dict[str, int] = {}
        #: the failed results of the current streak (the transition's entry lists them)
        self.streak_results: deque[ProbeResult] = deque(maxlen=endpoint.probe.failures_to_down + 2)
        #: what the server was doing when a real check last failed or was slow
        self.last_progress: Progress | None = None
        #: the latest unit death systemd reported (its `event.*` facts for a diagnosis)
        self.last_unit_signal: UnitSignal | None = None
        #: called (without awaiting) after each change of state is written
        self.after_change: Callable[[Change], None] | None = None
        #: set on every state change (the repair runner waits on it while verifying)
        self.changed = asyncio.Event()
        #: the latest probe that did not pass: what a diagnosis starts from
        self.last_problem: ProbeResult | None = None
        machine.add(self.name, restored.state)
        self.log = structlog.get_logger("supervisor.endpoint").bind(endpoint=self.name)

    @property
    def state(self) -> State:
        return self._machine.state(self.name)

    @property
    def grace_until(self) -> datetime | None:
        """When the startup grace (or, in maintenance, the silence) ends, in wall time; kept on
        the monotonic clock too, so a wall-clock jump neither ends it nor stretches it."""
        return self._grace.value

    @grace_until.setter
    def grace_until(self, value: datetime | None) -> None:
        self._grace.value = value

    def _clock_jumped(self, by: timedelta, until: datetime) -> None:
        self.log.warning(
            "wall clock jumped: grace end moved", by=format_duration(by), until=until.isoformat()
        )

    def begin_grace(self) -> None:
        """A startup grace from now: the streaks start over."""
        self.streaks = Streaks()
        self.streak_results.clear()
        self.grace_until = self._clock.now() + self.endpoint.startup_grace

    def grace_hhmm(self) -> str:
        return self.grace_until.strftime("%H:%M:%SZ") if self.grace_until else "-"

    async def fire(
        self, trigger: Trigger, note: str, *, data: dict[str, str], cause: str | None = None
    ) -> None:
        """Fire `trigger` with no probe result behind it; `cause` opens an incident when the
        change is to a state that has one (a load the server said failed)."""
        change = await self._machine.fire(self.name, trigger)
        if change is not None:
            await self.record_change(change, note, None, extra=data, cause=cause)

    async def record_change(
        self,
        change: Change,
        note: str,
        result: ProbeResult | None,
        *,
        extra: dict[str, str] | None = None,
        progress: Progress | None = None,
        cause: str | None = None,
    ) -> None:
        await self.flush_runs()
        now = self._clock.now()
        self.since = now
        open_cause = close = None
        if change.dest in (State.DOWN, State.DEGRADED, State.BUSY) and result is not None:
            open_cause = result.reason
            if progress is not None and progress.verdict.value in ("busy", "hung"):
                open_cause = progress.reason
        if change.dest in (State.DOWN, State.DEGRADED, State.BUSY) and cause is not None:
            open_cause = cause
        if change.dest is State.HEALTHY and result is not None:
            close = resolution_text(result)
        # an opening carries its streak (none for a load the server said failed): the chat's
        # opening message is told from it
        streak = list(self.streak_results) if open_cause is not None else None
        entry = transition_entry(
            change,
            note,
            result,
            subject=self.name,
            at=now,
            extra=extra or {},
            streak=streak,
            progress=progress,
        )
        self.incident_id = await self._store.transition(
            snapshot=self.snapshot(),
            entry=entry,
            open_cause=open_cause,
            close_resolution=close,
            reopen_within=self.reopen_within,
        )
        if close is not None:
            self.incident_id = None
            self.last_unit_signal = None  # what systemd said belonged to that incident
        if change.dest is State.UNREACHABLE or self.incident_id is None:
            # the host's incident tells the story of the endpoints it took down with it
            for incident in sorted(set(self.host_incidents.values())):
                await self._store.append(incident, entry)
        await self._store.save_snapshot(self.snapshot(), sample=result)
        self.changed.set()
        if self.after_change is not None:
            self.after_change(change)
        self.log.warning(
            "transition",
            source=change.source.value,
            dest=change.dest.value,
            note=note,
            incident=self.incident_id,
        )

    async def record_probe(
        self, result: ProbeResult, note: str, progress: Progress | None = None
    ) -> None:
        """Save the counters and the sample; inside an incident, count the probe into the run of
        identical results (one entry when the run ends)."""
        await self._store.save_snapshot(self.snapshot(), sample=result)
        if self.incident_id is not None:
            await self._runs.count(result, note, progress, incident_id=self.incident_id)

    async def flush_runs(self) -> None:
        """Write the runs of identical probe results (one per tier), the oldest first, and the
        repeated unit events counted so far."""
        await self._runs.flush()
        await self._unit_runs.flush()

    async def record_unit(self, signal: UnitSignal, verdict: str, *, judged: bool = True) -> None:
        """The event and its journal lines in the open incident (none open: the log only); the
        same event again is counted (`UnitRuns`). `judged`: False when it was only kept as
        evidence (it never reached the policy)."""
        if self.incident_id is not None:
            await self._unit_runs.count(
                signal, verdict, incident_id=self.incident_id, judged=judged
            )

    async def append(self, entry: TimelineEntry, incident_id: int | None) -> None:
        """`entry` in `incident_id`, else in the open incident, else in its lost hosts'."""
        target = incident_id if incident_id is not None else self.incident_id
        if target is not None:
            await self._store.append(target, entry)
        elif self.state is State.UNREACHABLE or self.host_incidents:
            # no incident of its own: the host's incident is where its story is told
            for host_incident in sorted(set(self.host_incidents.values())):
                await self._store.append(host_incident, entry)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            kind=SubjectKind.ENDPOINT,
            name=self.name,
            state=self.state.value,
            since=self.since,
            incident_id=self.incident_id,
            fail_streak=self.streaks.fail,
            degraded_streak=self.streaks.degraded,
            grace_until=self.grace_until,
            last_ok_at=self.last_ok_at,
            last_ttft_s=self.last_ttft_s,
            last_tok_s=self.last_tok_s,
            last_reason=self.last_reason,
            updated_at=self._clock.now(),
        )

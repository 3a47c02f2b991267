"""One endpoint's worker: consumes its events in order, runs its probes, records every step.

Two things never act on one endpoint at once: everything about it goes through this queue, the
probe events and the commands from outside (`supervisor.worker_commands`: fire a trigger, record
an entry, probe once) alike. The worker is the only writer of its endpoint's state; callers await
a command's reply, never its internals.

Progress and probe discipline:

- A real check that failed or was slow asks what the server is doing first (`progress`, two
  reads of `/metrics`); `supervisor.policy` makes busy a state of its own (never repaired) and
  hung down at once. The transition and the probe entries carry what was read.
- While down, escalated, unreachable or busy, a scheduled real check runs at most once per
  `completion_interval`; a liveness pass may bring one forward once per state (a recovery is
  still confirmed in seconds), not at every pass. Verification's own checks are the repair's.
- Identical consecutive probe results of a tier inside an incident are one `Probe` entry with a
  count and the time of the last (a liveness pass between two identical failed real checks does
  not break their run, nor does an entry from outside), written when the run ends (another
  result of that tier, a transition, the worker stopping) with the time of its first.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

import structlog

from supervisor.clock import Clock
from supervisor.config import Endpoint
from supervisor.durations import format_duration
from supervisor.events import (
    EndpointRestarted,
    Event,
    HostReachability,
    Outcome,
    ProbeResult,
    ProbeTick,
    Stop,
    Tier,
    UnitSignal,
)
from supervisor.machine import Change, FleetMachine, State, Trigger
from supervisor.policy import (
    EVENT_IGNORED,
    Limits,
    Streaks,
    judge,
    judge_unit_death,
    unit_death_verdict,
    wants_progress,
)
from supervisor.progress import Progress
from supervisor.store import Snapshot, Store, SubjectKind, TimelineEntry
from supervisor.store.lease import StaleEpochError
from supervisor.summaries import probe_entry, resolution_text, transition_entry, unit_entry
from supervisor.worker_commands import Command, Fire, ProbeOnce, Record, WorkerStopped
from supervisor.worker_state import Restored, WallDeadline


class Prober(Protocol):
    async def __call__(self, endpoint: Endpoint, tier: Tier) -> ProbeResult: ...


class ProgressReader(Protocol):
    async def __call__(self, endpoint: Endpoint) -> Progress:
        """What the endpoint's server is doing (busy, hung, idle, unknown)."""


class HostCheck(Protocol):
    async def __call__(self, endpoint: Endpoint) -> str:
        """'' when every host serving the endpoint answers now, else why one does not."""


class EndpointWorker:
    def __init__(
        self,
        endpoint: Endpoint,
        *,
        machine: FleetMachine,
        store: Store,
        prober: Prober,
        clock: Clock,
        restored: Restored,
        unreachable_hosts: set[str],
        host_check: HostCheck | None = None,
        reopen_within: timedelta | None = None,
        progress: ProgressReader | None = None,
    ) -> None:
        self.reopen_within = reopen_within
        self._progress = progress
        self.endpoint = endpoint
        self.name = endpoint.name
        self._machine = machine
        self._store = store
        self._prober = prober
        self._host_check = host_check
        self._clock = clock
        #: what waits, served in this order: a lost host's news, then the commands (the repair
        #: runner's and the control API's, in the order sent), then the other events (probe
        #: ticks and results, hosts back, restarts). Commands are also served while a probe is
        #: in flight: a repair's records never wait for the probe of a frozen server.
        self._urgent: deque[Event] = deque()
        self._commands: deque[Command] = deque()
        self._events: deque[Event] = deque()
        self._wake = asyncio.Event()
        self._pending: set[Tier] = set()
        self._inflight: asyncio.Future[Any] | None = None
        self._last_deep: float | None = None  #: monotonic start of the latest real check
        self._forward_armed = True  #: a liveness pass may still bring a real check forward
        self._runs: dict[Tier, _Run] = {}  #: per tier, identical results not yet written
        self._limits = Limits(
            failures_to_down=endpoint.probe.failures_to_down,
            degraded_after=endpoint.probe.degraded_after,
        )
        self.since = restored.since
        self.incident_id = restored.incident_id
        self.streaks = restored.streaks
        self._grace = WallDeadline(clock, on_jump=self._clock_jumped)
        self.grace_until = restored.grace_until
        self.last_ok_at = restored.last_ok_at
        self.last_ttft_s = restored.last_ttft_s
        self.last_tok_s = restored.last_tok_s
        self.last_reason = restored.last_reason
        self._unreachable = set(unreachable_hosts)
        self._host_incidents: dict[str, int] = {}
        self._streak_results: deque[ProbeResult] = deque(maxlen=endpoint.probe.failures_to_down + 2)
        #: what the server was doing when a real check last failed or was slow
        self.last_progress: Progress | None = None
        #: the latest unit death systemd reported (its `event.*` facts for a diagnosis)
        self.last_unit_signal: UnitSignal | None = None
        self.idle = asyncio.Event()
        self.idle.set()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        #: called (without awaiting) after a change into down, degraded or unreachable
        self.on_problem: Callable[[EndpointWorker], None] | None = None
        #: set on every state change (the repair runner waits on it while verifying)
        self.changed = asyncio.Event()
        #: the latest probe that did not pass: what a diagnosis starts from
        self.last_problem: ProbeResult | None = None
        machine.add(self.name, restored.state)
        self._log = structlog.get_logger("supervisor.endpoint").bind(endpoint=self.name)

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
        self._log.warning(
            "wall clock jumped: grace end moved", by=format_duration(by), until=until.isoformat()
        )

    def submit(self, event: Event) -> None:
        """Queue an event; a probe tick already waiting for the same tier is not queued twice.

        A host found lost goes first, and a probe in flight is abandoned: against a frozen host it
        would only run into its timeout (and a re-probe into another) before the host's news.
        """
        waiting = self._events
        if isinstance(event, ProbeTick):
            if event.tier in self._pending:
                return
            self._pending.add(event.tier)
        elif (isinstance(event, HostReachability) and not event.reachable) or (
            isinstance(event, UnitSignal) and event.down
        ):
            waiting = self._urgent  # a unit's death is judged now, not after the queued probes
            if self._inflight is not None:
                self._inflight.cancel()
        self.idle.clear()
        waiting.append(event)
        self._wake.set()

    async def run(self) -> None:
        self._task = asyncio.current_task()
        while True:
            item = await self._next()
            try:
                if isinstance(item, Stop):
                    await self._flush_run()
                    self._stop()
                    return
                try:
                    await self._handle(item)
                except StaleEpochError as err:  # deposed (the fence refused a write): it ends
                    self._log.warning("deposed", stops="the worker", refused=str(err))
                    if isinstance(item, _COMMANDS) and not item.reply.done():
                        item.reply.set_exception(err)
                    self._stop()
                    return
                except Exception as exc:  # one bad event (the store locked, say) never ends it
                    self._log.exception("event failed", item=type(item).__name__)
                    if isinstance(item, _COMMANDS) and not item.reply.done():
                        item.reply.set_exception(exc)
            finally:
                if not (self._urgent or self._commands or self._events):
                    self.idle.set()

    def _stop(self) -> None:
        """After Stop: commands still queued (or sent later) get WorkerStopped, never silence."""
        self._stopped = True
        while self._commands:
            item = self._commands.popleft()
            if not item.reply.done():
                item.reply.set_exception(WorkerStopped(f"the worker of {self.name} has stopped"))

    # -- commands: how everything outside the worker reaches its state ---------------------

    async def _ask(self, command: Command, reply: asyncio.Future[_T]) -> _T:
        if self._task is not None and asyncio.current_task() is self._task:
            raise RuntimeError(f"the worker of {self.name} cannot wait on its own queue")
        if self._stopped:
            raise WorkerStopped(f"the worker of {self.name} has stopped")
        self.idle.clear()
        self._commands.append(command)
        self._wake.set()
        return await reply

    async def _next(self) -> Event | Command:
        """The next item to handle: a lost host's news, a command, then the other events."""
        while True:
            for waiting in (self._urgent, self._commands, self._events):
                if waiting:
                    return waiting.popleft()
            self._wake.clear()
            await self._wake.wait()

    async def _while_probing(self, probe: asyncio.Future[_T]) -> _T:
        """The probe's result; the commands that arrive meanwhile are served in the meantime
        (one at a time, in order, by this task: still the only writer)."""
        while True:
            while self._commands and not probe.done():
                await self._serve(self._commands.popleft())
            if probe.done():
                return probe.result()
            self._wake.clear()
            woken: asyncio.Future[Any] = asyncio.ensure_future(self._wake.wait())
            either: set[asyncio.Future[Any]] = {probe, woken}
            try:
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()

    async def _serve(self, command: Command) -> None:
        try:
            await self._command(command)
        except Exception as exc:  # as in `run`: one bad command never ends the worker
            self._log.exception("command failed", command=type(command).__name__)
            if not command.reply.done():
                command.reply.set_exception(exc)

    async def apply(
        self,
        trigger: Trigger,
        note: str,
        *,
        data: Mapping[str, str] | None = None,
        until: datetime | None = None,
    ) -> Change | None:
        """Fire a trigger (the repair runner, the control API), in turn with the events."""
        reply: asyncio.Future[Change | None] = asyncio.get_running_loop().create_future()
        command = Fire(trigger=trigger, note=note, data=dict(data or {}), until=until, reply=reply)
        return await self._ask(command, reply)

    async def silence(self, until: datetime, note: str) -> Change | None:
        """Maintenance until `until` (kept in the snapshot, so a restart does not forget it)."""
        return await self.apply(
            Trigger.SILENCE, note, data={"until": until.isoformat()}, until=until
        )

    async def record(self, entry: TimelineEntry, *, incident_id: int | None = None) -> None:
        """Append an entry (diagnosis, action, decision ...) to `incident_id` (closed ones too),
        else to the open incident, if any."""
        reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._ask(Record(entry=entry, incident_id=incident_id, reply=reply), reply)

    async def probe_now(self, tier: Tier, *, keep_problem: bool = False) -> ProbeResult:
        """Probe once and change no state (actions that wait for health, a resumed problem)."""
        reply: asyncio.Future[ProbeResult] = asyncio.get_running_loop().create_future()
        return await self._ask(ProbeOnce(tier=tier, keep_problem=keep_problem, reply=reply), reply)

    async def _command(self, command: Command) -> None:
        if isinstance(command, Fire):
            _answer(command.reply, await self._on_fire(command))
        elif isinstance(command, Record):
            await self._on_record(command.entry, command.incident_id)
            _answer(command.reply, None)
        else:
            if command.tier is Tier.DEEP:
                self._last_deep = self._clock.monotonic()
            result = await self._prober(self.endpoint, command.tier)
            if command.keep_problem and not result.ok:
                self.last_problem = result
            _answer(command.reply, result)

    # -- the events ------------------------------------------------------------------------

    async def _handle(self, event: Event | Command) -> None:
        if isinstance(event, _COMMANDS):
            await self._command(event)
        elif isinstance(event, ProbeTick):
            self._pending.discard(event.tier)
            if self.state is State.MAINTENANCE and not await self._silence_over():
                return
            if event.tier is Tier.DEEP and self._deep_not_due():
                self._log.info(
                    "real check skipped", why="one per completion interval", state=self.state.value
                )
                return
            await self._probe(event.tier, is_reprobe=False)
        elif isinstance(event, ProbeResult):
            await self._on_result(event, is_reprobe=False)
        elif isinstance(event, HostReachability):
            await self._on_host(event)
        elif isinstance(event, EndpointRestarted):
            await self._on_restarted(event)
        elif isinstance(event, UnitSignal):
            await self._on_unit(event)

    def _deep_not_due(self) -> bool:
        """A scheduled real check while down, escalated, unreachable or busy comes too soon after
        the last one (a liveness pass brought that one forward)."""
        if self.state not in _SPACED or self._last_deep is None or self.endpoint.kind == "health":
            return False
        settings = self.endpoint.probe
        spacing = (settings.completion_interval - settings.jitter).total_seconds() - _SLACK_S
        return self._clock.monotonic() - self._last_deep < spacing

    async def _abortable(self, work: Awaitable[_T]) -> tuple[bool, _T | None]:
        """(True, its value), or (False, None) when `submit` abandoned it: against a frozen host
        it would only run into its timeout before the host's news, next in the queue."""
        task = asyncio.ensure_future(work)
        self._inflight = task
        try:
            return True, await self._while_probing(task)
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if task.cancelled() and me is not None and me.cancelling() == 0:
                return False, None
            task.cancel()
            raise
        finally:
            self._inflight = None

    async def _probe(self, tier: Tier, *, is_reprobe: bool) -> None:
        if tier is Tier.DEEP:
            self._last_deep = self._clock.monotonic()
        done, result = await self._abortable(self._prober(self.endpoint, tier))
        if not done or result is None:
            self._log.info("probe abandoned", tier=tier.value, why="a host was lost")
            return
        await self._on_result(result, is_reprobe=is_reprobe)

    async def _read_progress(self, result: ProbeResult) -> tuple[bool, Progress | None]:
        """What the server is doing, when the policy wants it for `result`."""
        if self._progress is None or not wants_progress(self.state, result):
            return True, None
        done, progress = await self._abortable(self._progress(self.endpoint))
        if progress is not None:
            self.last_progress = progress
        return done, progress

    async def _on_result(self, result: ProbeResult, *, is_reprobe: bool) -> None:
        done, progress = await self._read_progress(result)
        if not done:
            self._log.info("progress read abandoned", why="a host was lost")
            return
        # the sample is stored with the snapshot it leads to (_record_change, _record_probe)
        self.last_reason = result.reason
        if not result.ok:
            self.last_problem = result
        if result.ok:
            self.last_ok_at = result.at
            if result.tier is Tier.DEEP and result.ttft_s is not None:
                self.last_ttft_s, self.last_tok_s = result.ttft_s, result.tok_s
        verdict = judge(
            state=self.state,
            streaks=self.streaks,
            result=result,
            is_reprobe=is_reprobe,
            limits=self._limits,
            grace_until=self.grace_until,
            now=self._clock.now(),
            progress=progress,
        )
        self.streaks = verdict.streaks
        if verdict.trigger is Trigger.DOWN and self._host_check is not None:
            host_problem = await self._host_check(self.endpoint)
            if host_problem:
                # one cause, not N incidents: the host watcher will call it unreachable
                verdict = replace(
                    verdict, trigger=None, note=f"not confirmed: {host_problem}; host check decides"
                )
        if result.outcome is Outcome.OK:
            self._streak_results.clear()
        else:
            self._streak_results.append(result)
        self._log.info(
            "probe",
            tier=result.tier.value,
            outcome=result.outcome.value,
            reason=result.reason,
            note=verdict.note,
            incident=self.incident_id,
        )
        reprobe = verdict.reprobe is not None and not is_reprobe and self._may_reprobe(result)
        if verdict.reprobe is not None and not is_reprobe and not reprobe:
            verdict = replace(verdict, note=f"liveness passed while {self.state}")
        change = await self._machine.fire(self.name, verdict.trigger) if verdict.trigger else None
        if change is not None:
            await self._record_change(change, verdict.note, result, progress=progress)
        else:
            await self._record_probe(result, verdict.note, progress)
        if reprobe and verdict.reprobe is not None:
            await self._probe(verdict.reprobe, is_reprobe=True)

    def _may_reprobe(self, result: ProbeResult) -> bool:
        """A re-probe to confirm a failure always; a real check brought forward by a liveness
        pass once per state."""
        if result.tier is not Tier.LIVENESS or not result.ok:
            return True
        if not self._forward_armed:
            self._log.info("real check not brought forward", why="once per state")
            return False
        self._forward_armed = False
        return True

    async def _on_host(self, event: HostReachability) -> None:
        if event.reachable:
            self._unreachable.discard(event.host)
            self._host_incidents.pop(event.host, None)
        else:
            self._unreachable.add(event.host)
            if event.incident_id is not None:
                self._host_incidents[event.host] = event.incident_id
        if self._unreachable and self.state is not State.UNREACHABLE:
            note = f"host {event.host} does not answer: {event.reason}"
            await self._fire(Trigger.HOST_LOST, note, data={"host": event.host})
        elif not self._unreachable and self.state is State.UNREACHABLE:
            self._begin_grace()
            note = f"host {event.host} answers again: startup grace until {self._hhmm()}"
            await self._fire(Trigger.HOST_BACK, note, data={"host": event.host})

    async def _on_unit(self, signal: UnitSignal) -> None:
        """systemd said something about a unit: a death plus one failed probe is down at once;
        `started` is evidence only (it never starts a grace: a crash loop starts every few
        seconds); in maintenance, remediating or verifying it is our own doing."""
        self._log.info("unit event", unit=signal.unit, kind=signal.kind, line=signal.line)
        if self.state in EVENT_IGNORED:
            await self._record_unit(signal, f"not judged: {self.state}")
            return
        if not signal.down:
            await self._record_unit(signal, "evidence only")
            return
        self.last_unit_signal = signal
        tier = Tier.DEEP if self.endpoint.kind == "health" else Tier.LIVENESS
        done, result = await self._abortable(self._prober(self.endpoint, tier))
        if not done or result is None:
            return
        words = unit_death_verdict(self.state, result)
        verdict = judge_unit_death(
            state=self.state, streaks=self.streaks, result=result, line=signal.line
        )
        self.streaks = verdict.streaks
        self.last_reason = result.reason
        if not result.ok:
            self.last_problem = result
            self._streak_results.append(result)
        change = await self._machine.fire(self.name, verdict.trigger) if verdict.trigger else None
        if change is not None:
            await self._record_change(change, verdict.note, result)
        else:
            await self._record_probe(result, verdict.note)
        await self._record_unit(signal, words)

    async def _record_unit(self, signal: UnitSignal, verdict: str) -> None:
        """The event and its journal lines in the open incident (none open: the log only)."""
        if self.incident_id is not None:
            await self._store.append(self.incident_id, unit_entry(signal, verdict))

    async def _on_restarted(self, event: EndpointRestarted) -> None:
        self._begin_grace()
        note = f"restarted ({event.reason}): startup grace until {self._hhmm()}"
        await self._fire(Trigger.RESTARTED, note, data={"reason": event.reason})

    def _begin_grace(self) -> None:
        self.streaks = Streaks()
        self._streak_results.clear()
        self.grace_until = self._clock.now() + self.endpoint.startup_grace

    def _hhmm(self) -> str:
        return self.grace_until.strftime("%H:%M:%SZ") if self.grace_until else "-"

    async def _fire(self, trigger: Trigger, note: str, *, data: dict[str, str]) -> None:
        change = await self._machine.fire(self.name, trigger)
        if change is not None:
            await self._record_change(change, note, None, extra=data)

    async def _silence_over(self) -> bool:
        """In maintenance: end it when its time is up (then probing goes on)."""
        if self.grace_until is None or self._clock.now() < self.grace_until:
            return False
        change = await self._machine.fire(self.name, Trigger.UNSILENCE)
        if change is not None:
            self.grace_until = None
            await self._record_change(change, "silence ended", None)
        return True

    async def _on_fire(self, command: Fire) -> Change | None:
        trigger = command.trigger
        if trigger is Trigger.SILENCE and self.state is not State.MAINTENANCE:
            self.grace_until = command.until
        elif trigger is Trigger.RESTARTED:
            self._begin_grace()
        elif trigger is Trigger.UNSILENCE:
            self.grace_until = None
        change = await self._machine.fire(self.name, trigger)
        if change is not None:
            await self._record_change(change, command.note, None, extra=dict(command.data))
        return change

    async def _on_record(self, entry: TimelineEntry, incident_id: int | None) -> None:
        target = incident_id if incident_id is not None else self.incident_id
        if target is not None:
            await self._store.append(target, entry)
        elif self.state is State.UNREACHABLE or self._host_incidents:
            # no incident of its own: the host's incident is where its story is told
            for host_incident in sorted(set(self._host_incidents.values())):
                await self._store.append(host_incident, entry)

    async def _record_change(
        self,
        change: Change,
        note: str,
        result: ProbeResult | None,
        *,
        extra: dict[str, str] | None = None,
        progress: Progress | None = None,
    ) -> None:
        await self._flush_run()
        now = self._clock.now()
        self.since = now
        self._forward_armed = True
        open_cause = close = None
        if change.dest in (State.DOWN, State.DEGRADED, State.BUSY) and result is not None:
            open_cause = result.reason
            if progress is not None and progress.verdict.value in ("busy", "hung"):
                open_cause = progress.reason
        if change.dest is State.HEALTHY and result is not None:
            close = resolution_text(result)
        streak = list(self._streak_results) if open_cause is not None else None
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
            for incident in sorted(set(self._host_incidents.values())):
                await self._store.append(incident, entry)
        await self._store.save_snapshot(self.snapshot(), sample=result)
        self.changed.set()
        problem = change.dest in (State.DOWN, State.DEGRADED, State.UNREACHABLE)
        if problem and self.on_problem is not None:
            self.on_problem(self)
        self._log.warning(
            "transition",
            source=change.source.value,
            dest=change.dest.value,
            note=note,
            incident=self.incident_id,
        )

    async def _record_probe(
        self, result: ProbeResult, note: str, progress: Progress | None = None
    ) -> None:
        """Save the counters and the sample; inside an incident, count the probe into the run of
        identical results (one entry when the run ends)."""
        await self._store.save_snapshot(self.snapshot(), sample=result)
        if self.incident_id is None:
            return
        run = self._runs.get(result.tier)
        if run is not None and run.incident_id == self.incident_id and run.same(result):
            run.count += 1
            run.last_at = result.at
            return
        if run is not None:
            await self._write_run(self._runs.pop(result.tier))
        self._runs[result.tier] = _Run(
            first=result, note=note, progress=progress, incident_id=self.incident_id
        )

    async def _flush_run(self) -> None:
        """Write the runs of identical probe results (one per tier), the oldest first."""
        runs = sorted(self._runs.values(), key=lambda run: run.first.at)
        self._runs.clear()
        for run in runs:
            await self._write_run(run)

    async def _write_run(self, run: _Run) -> None:
        entry = probe_entry(
            run.first,
            run.note,
            subject=self.name,
            count=run.count,
            last_at=run.last_at,
            progress=run.progress,
        )
        await self._store.append(run.incident_id, entry)

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


_T = TypeVar("_T")
#: states in which a scheduled real check waits a whole completion interval after the last one
_SPACED = frozenset({State.DOWN, State.ESCALATED, State.UNREACHABLE, State.BUSY})
_SLACK_S = 0.5


@dataclass(kw_only=True)
class _Run:
    """Identical consecutive probe results inside one incident, not yet written."""

    first: ProbeResult
    note: str
    progress: Progress | None
    incident_id: int
    count: int = 1
    last_at: datetime | None = None

    def same(self, result: ProbeResult) -> bool:
        first = self.first
        return (result.tier, result.check, result.outcome, result.reason) == (
            first.tier,
            first.check,
            first.outcome,
            first.reason,
        )


_COMMANDS = (Fire, Record, ProbeOnce)


def _answer(reply: asyncio.Future[_T], value: _T) -> None:
    if not reply.done():  # its caller may have been cancelled meanwhile
        reply.set_result(value)

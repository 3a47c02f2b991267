"""One endpoint's worker: consumes its events in order, runs its probes, records every step.

Two things never act on one endpoint at once: everything about it goes through this queue, the
probe events and the commands from outside (`_commands`: fire a trigger, append an entry, probe
once) alike. The worker is the only writer of its endpoint's state; callers await a command's
reply, never its internals.

The worker holds three parts, one job each:

- `queue` (`_queue`): what waits and in which order (a lost host's news, the commands, the other
  events); commands are served while a probe or a progress read is in flight.
- `probing` (`_probing`): the probe discipline (progress reads, busy and hung, real checks
  spaced while down, re-probes, unit deaths judged).
- `record` (`_record`): the endpoint's state and how each change is written (transitions,
  snapshots, timeline entries; identical probe results counted into runs by `_runs`).

The worker itself takes the items from its queue and hands each to its part, answers the
commands, and follows hosts, restarts and silences.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TypeVar

from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.events import (
    EndpointRestarted,
    Event,
    HostReachability,
    ProbeResult,
    ProbeTick,
    Stop,
    Tier,
    UnitSignal,
)
from supervisor.judge.machine import Change, FleetMachine, State, Trigger
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.records import Snapshot, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.worker._commands import Append, Command, Fire, MoveSilenceEnd, ProbeOnce
from supervisor.worker._heard import Heard
from supervisor.worker._probing import (
    DependencyCheck,
    HostCheck,
    ProbeDiscipline,
    Prober,
    ProgressReader,
)
from supervisor.worker._queue import WorkerQueue
from supervisor.worker._record import EndpointRecord
from supervisor.worker._state import Restored

#: states after which the repair runner is told (`on_problem`)
_PROBLEMS = frozenset({State.DOWN, State.DEGRADED, State.UNREACHABLE})


class EndpointWorker:
    """One endpoint's worker: its `queue`, its `probing` discipline and its `record`."""

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
        dependency_check: DependencyCheck | None = None,
        reopen_within: timedelta | None = None,
        progress: ProgressReader | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.name = endpoint.name
        self._machine = machine
        self._store = store
        self._clock = clock
        self.queue = WorkerQueue(endpoint.name, serve=self._serve)
        self.record = EndpointRecord(
            endpoint,
            machine=machine,
            store=store,
            clock=clock,
            restored=restored,
            unreachable_hosts=unreachable_hosts,
            reopen_within=reopen_within,
        )
        self.probing = ProbeDiscipline(
            self.record,
            queue=self.queue,
            machine=machine,
            prober=prober,
            clock=clock,
            host_check=host_check,
            dependency_check=dependency_check,
            progress=progress,
            heard=self._heard,
        )
        self.record.after_change = self._after_change
        self._log = self.record.log
        #: called (without awaiting) after a change into down, degraded or unreachable
        self.on_problem: Callable[[EndpointWorker], None] | None = None
        #: called (without awaiting) while escalated, for each unit death and `/metrics` verdict
        #: heard (the repair runner decides whether it is new enough to look again)
        self.on_evidence: Callable[[EndpointWorker, Heard], None] | None = None
        #: set when nothing waits in the queue and nothing is being handled
        self.idle = self.queue.idle
        #: a command served while a probe was in flight met the fence: the worker ends once
        #: the item in hand is done (one `deposed` line, from `run`)
        self._deposed: StaleEpochError | None = None

    @property
    def state(self) -> State:
        return self.record.state

    def snapshot(self) -> Snapshot:
        """What the store keeps of the endpoint now (the page and the status show it)."""
        return self.record.snapshot()

    def _after_change(self, change: Change) -> None:
        self.probing.rearm()
        if change.trigger is not Trigger.BLOCKED:
            self.record.blocked_by = ""
        # blocked: the router's or the backend's incident is the cause; nothing to repair here
        blocked = change.trigger is Trigger.BLOCKED
        if change.dest in _PROBLEMS and not blocked and self.on_problem is not None:
            self.on_problem(self)

    def _heard(self, heard: Heard) -> None:
        """Evidence heard while escalated goes to the `on_evidence` hook."""
        if self.state is State.ESCALATED and self.on_evidence is not None:
            self.on_evidence(self, heard)

    def submit(self, event: Event) -> None:
        """Queue an event (`WorkerQueue.submit`: a lost host's news first, ticks not twice)."""
        self.queue.submit(event)

    async def run(self) -> None:
        self.queue.attach()
        while True:
            item = await self.queue.next()
            try:
                if isinstance(item, Stop):
                    await self.record.flush_runs()
                    self._stop()
                    return
                try:
                    await self._handle(item)
                    if self._deposed is not None:
                        raise self._deposed
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
                self.queue.settle()

    def _stop(self) -> None:
        """After Stop: commands still queued (or sent later) get WorkerStopped, never silence."""
        self.queue.stop()

    # -- commands: how everything outside the worker reaches its state ---------------------

    async def _serve(self, command: Command) -> None:
        try:
            await self._command(command)
        except StaleEpochError as err:  # deposed: `run` ends the worker after the item in hand
            self._deposed = err
            if not command.reply.done():
                command.reply.set_exception(err)
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
        return await self.queue.ask(command, reply)

    async def silence(self, until: datetime, note: str) -> Change | None:
        """Maintenance until `until` (kept in the snapshot, so a restart does not forget it)."""
        return await self.apply(
            Trigger.SILENCE, note, data={"until": until.isoformat()}, until=until
        )

    async def move_silence_end(self, until: datetime) -> bool:
        """In maintenance, end it at `until` instead (a silence edited or extended); False when
        it is not in maintenance."""
        reply: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        return await self.queue.ask(MoveSilenceEnd(until=until, reply=reply), reply)

    async def append(self, entry: TimelineEntry, *, incident_id: int | None = None) -> None:
        """Append an entry (diagnosis, action, decision ...) to `incident_id` (closed ones too),
        else to the open incident, if any."""
        reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self.queue.ask(Append(entry=entry, incident_id=incident_id, reply=reply), reply)

    async def probe_now(self, tier: Tier, *, keep_problem: bool = False) -> ProbeResult:
        """Probe once and change no state (actions that wait for health, a resumed problem)."""
        reply: asyncio.Future[ProbeResult] = asyncio.get_running_loop().create_future()
        return await self.queue.ask(
            ProbeOnce(tier=tier, keep_problem=keep_problem, reply=reply), reply
        )

    async def _command(self, command: Command) -> None:
        if isinstance(command, Fire):
            _answer(command.reply, await self._on_fire(command))
        elif isinstance(command, Append):
            await self.record.append(command.entry, command.incident_id)
            _answer(command.reply, None)
        elif isinstance(command, MoveSilenceEnd):
            moved = self.state is State.MAINTENANCE
            if moved:
                self.record.grace_until = command.until
                await self._store.save_snapshot(self.record.snapshot())
            _answer(command.reply, moved)
        else:
            result = await self.probing.probe_once(command.tier)
            if command.keep_problem and not result.ok:
                self.record.last_problem = result
            _answer(command.reply, result)

    # -- the events ------------------------------------------------------------------------

    async def _handle(self, event: Event | Command) -> None:
        if isinstance(event, _COMMANDS):
            await self._command(event)
        elif isinstance(event, ProbeTick):
            self.queue.tick_taken(event.tier)
            if self.state is State.MAINTENANCE and not await self._silence_over():
                return
            if event.tier is Tier.DEEP and self.probing.deep_not_due():
                self._log.info(
                    "real check skipped", why="one per completion interval", state=self.state.value
                )
                return
            await self.probing.probe(event.tier, is_reprobe=False)
        elif isinstance(event, ProbeResult):
            await self.probing.on_result(event, is_reprobe=False)
        elif isinstance(event, HostReachability):
            await self._on_host(event)
        elif isinstance(event, EndpointRestarted):
            await self._on_restarted(event)
        elif isinstance(event, UnitSignal):
            await self.probing.on_unit(event)

    async def _on_host(self, event: HostReachability) -> None:
        record = self.record
        if event.reachable:
            record.unreachable.discard(event.host)
            record.host_incidents.pop(event.host, None)
        else:
            record.unreachable.add(event.host)
            if event.incident_id is not None:
                record.host_incidents[event.host] = event.incident_id
        if record.unreachable and self.state is not State.UNREACHABLE:
            note = f"host {event.host} does not answer: {event.reason}"
            await record.fire(Trigger.HOST_LOST, note, data={"host": event.host})
        elif not record.unreachable and self.state is State.UNREACHABLE:
            record.begin_grace()
            note = f"host {event.host} answers again: startup grace until {record.grace_hhmm()}"
            await record.fire(Trigger.HOST_BACK, note, data={"host": event.host})

    async def _on_restarted(self, event: EndpointRestarted) -> None:
        self.record.begin_grace()
        note = f"restarted ({event.reason}): startup grace until {self.record.grace_hhmm()}"
        await self.record.fire(Trigger.RESTARTED, note, data={"reason": event.reason})

    async def _silence_over(self) -> bool:
        """In maintenance: end it when its time is up (then probing goes on)."""
        record = self.record
        if record.grace_until is None or self._clock.now() < record.grace_until:
            return False
        change = await self._machine.fire(self.name, Trigger.UNSILENCE)
        if change is not None:
            record.grace_until = None
            await record.record_change(change, "silence ended", None)
        return True

    async def _on_fire(self, command: Fire) -> Change | None:
        trigger, record = command.trigger, self.record
        if trigger is Trigger.SILENCE and self.state is not State.MAINTENANCE:
            record.grace_until = command.until
        elif trigger is Trigger.RESTARTED:
            record.begin_grace()
        elif trigger is Trigger.UNSILENCE:
            record.grace_until = None
        change = await self._machine.fire(self.name, trigger)
        if change is not None:
            await record.record_change(change, command.note, None, extra=dict(command.data))
        return change


_T = TypeVar("_T")
_COMMANDS = (Fire, Append, ProbeOnce, MoveSilenceEnd)


def _answer(reply: asyncio.Future[_T], value: _T) -> None:
    if not reply.done():  # its caller may have been cancelled meanwhile
        reply.set_result(value)

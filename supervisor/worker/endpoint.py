"""One endpoint's worker: consumes its events in order, runs its probes, records every step.

Two things never act on one endpoint at once: everything about it goes through this queue, the
probe events and the commands from outside (`supervisor.worker.commands`: fire a trigger, record
an entry, probe once) alike. The worker is the only writer of its endpoint's state; callers await
a command's reply, never its internals.

The worker is built in layers, one job each:

- `supervisor.worker.queue`: what waits and in which order (a lost host's news, the commands,
  the other events); commands are served while a probe or a progress read is in flight.
- `supervisor.worker.probing`: the probe discipline (progress reads, busy and hung, real checks
  spaced while down, re-probes, unit deaths judged) on top of
- `supervisor.worker.record`: the endpoint's state and how each change is written (transitions,
  snapshots, timeline entries; identical probe results counted into runs by
  `supervisor.worker.runs`).
- This module: the worker itself, which takes the items from its queue and hands each to its
  handler, answers the commands, and follows hosts, restarts and silences.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TypeVar

from supervisor.config import Endpoint
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
from supervisor.judge.policy import Streaks
from supervisor.record.store import Store, TimelineEntry
from supervisor.record.store.lease import StaleEpochError
from supervisor.worker.commands import Command, Fire, MoveSilenceEnd, ProbeOnce, Record
from supervisor.worker.probing import HostCheck, Prober, ProbingEndpoint, ProgressReader
from supervisor.worker.queue import WorkerQueue
from supervisor.worker.state import Restored

__all__ = ["EndpointWorker", "HostCheck", "Prober", "ProgressReader"]


class EndpointWorker(ProbingEndpoint):
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
        super().__init__(
            endpoint,
            queue=WorkerQueue(endpoint.name, serve=self._serve),
            machine=machine,
            store=store,
            prober=prober,
            clock=clock,
            restored=restored,
            unreachable_hosts=unreachable_hosts,
            host_check=host_check,
            reopen_within=reopen_within,
            progress=progress,
        )
        #: set when nothing waits in the queue and nothing is being handled
        self.idle = self._queue.idle
        #: a command served while a probe was in flight met the fence: the worker ends once
        #: the item in hand is done (one `deposed` line, from `run`)
        self._deposed: StaleEpochError | None = None

    def submit(self, event: Event) -> None:
        """Queue an event (`WorkerQueue.submit`: a lost host's news first, ticks not twice)."""
        self._queue.submit(event)

    async def run(self) -> None:
        self._queue.attach()
        while True:
            item = await self._queue.next()
            try:
                if isinstance(item, Stop):
                    await self._flush_run()
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
                self._queue.settle()

    def _stop(self) -> None:
        """After Stop: commands still queued (or sent later) get WorkerStopped, never silence."""
        self._queue.stop()

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
        return await self._queue.ask(command, reply)

    async def silence(self, until: datetime, note: str) -> Change | None:
        """Maintenance until `until` (kept in the snapshot, so a restart does not forget it)."""
        return await self.apply(
            Trigger.SILENCE, note, data={"until": until.isoformat()}, until=until
        )

    async def move_silence_end(self, until: datetime) -> bool:
        """In maintenance, end it at `until` instead (a silence edited or extended); False when
        it is not in maintenance."""
        reply: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        return await self._queue.ask(MoveSilenceEnd(until=until, reply=reply), reply)

    async def record(self, entry: TimelineEntry, *, incident_id: int | None = None) -> None:
        """Append an entry (diagnosis, action, decision ...) to `incident_id` (closed ones too),
        else to the open incident, if any."""
        reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.ask(Record(entry=entry, incident_id=incident_id, reply=reply), reply)

    async def probe_now(self, tier: Tier, *, keep_problem: bool = False) -> ProbeResult:
        """Probe once and change no state (actions that wait for health, a resumed problem)."""
        reply: asyncio.Future[ProbeResult] = asyncio.get_running_loop().create_future()
        return await self._queue.ask(
            ProbeOnce(tier=tier, keep_problem=keep_problem, reply=reply), reply
        )

    async def _command(self, command: Command) -> None:
        if isinstance(command, Fire):
            _answer(command.reply, await self._on_fire(command))
        elif isinstance(command, Record):
            await self._on_record(command.entry, command.incident_id)
            _answer(command.reply, None)
        elif isinstance(command, MoveSilenceEnd):
            moved = self.state is State.MAINTENANCE
            if moved:
                self.grace_until = command.until
                await self._store.save_snapshot(self.snapshot())
            _answer(command.reply, moved)
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
            self._queue.tick_taken(event.tier)
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


_T = TypeVar("_T")
_COMMANDS = (Fire, Record, ProbeOnce, MoveSilenceEnd)


def _answer(reply: asyncio.Future[_T], value: _T) -> None:
    if not reply.done():  # its caller may have been cancelled meanwhile
        reply.set_result(value)

"""What waits for one endpoint's worker, and in which order.

Three lines, served in this order: a lost host's news (and a unit's death), then the commands
(`_commands`: the repair runner's and the control API's, in the order sent),
then the other events (probe ticks and results, hosts back, restarts). A probe tick already
waiting for its tier is not queued twice.

Commands are also served while a probe or a progress read is in flight (`abortable`): a repair's
records never wait for the probe of a frozen server. They are served one at a time, in order, by
the worker's own task, which stays the only writer of its endpoint's state; and a lost host's
news abandons the work in flight, which against a frozen host would only run into its timeout.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from supervisor.core.events import Event, HostReachability, ProbeTick, Tier, UnitSignal
from supervisor.worker._commands import Command, WorkerStopped

_T = TypeVar("_T")


class WorkerQueue:
    """One endpoint's queue; `serve` handles a command that arrives while work is in flight."""

    def __init__(self, name: str, *, serve: Callable[[Command], Awaitable[None]]) -> None:
        self._name = name
        self._serve = serve
        self._urgent: deque[Event] = deque()
        self._commands: deque[Command] = deque()
        self._events: deque[Event] = deque()
        self._wake = asyncio.Event()
        self._pending: set[Tier] = set()
        self._inflight: asyncio.Future[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        #: set when nothing waits and nothing is being handled
        self.idle = asyncio.Event()
        self.idle.set()

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

    def tick_taken(self, tier: Tier) -> None:
        """The probe tick of `tier` is being handled: the next one may be queued again."""
        self._pending.discard(tier)

    def attach(self) -> None:
        """The current task is the worker's: it cannot wait on its own queue."""
        self._task = asyncio.current_task()

    async def ask(self, command: Command, reply: asyncio.Future[_T]) -> _T:
        """Queue `command` and wait for its reply."""
        if self._task is not None and asyncio.current_task() is self._task:
            raise RuntimeError(f"the worker of {self._name} cannot wait on its own queue")
        if self._stopped:
            raise WorkerStopped(f"the worker of {self._name} has stopped")
        self.idle.clear()
        self._commands.append(command)
        self._wake.set()
        return await reply

    async def next(self) -> Event | Command:
        """The next item to handle: a lost host's news, a command, then the other events."""
        while True:
            for waiting in (self._urgent, self._commands, self._events):
                if waiting:
                    return waiting.popleft()
            self._wake.clear()
            await self._wake.wait()

    def settle(self) -> None:
        """An item was handled: idle when nothing else waits."""
        if not (self._urgent or self._commands or self._events):
            self.idle.set()

    def stop(self) -> None:
        """After Stop: commands still queued (or sent later) get WorkerStopped, never silence."""
        self._stopped = True
        while self._commands:
            item = self._commands.popleft()
            if not item.reply.done():
                item.reply.set_exception(WorkerStopped(f"the worker of {self._name} has stopped"))

    async def abortable(self, work: Awaitable[_T]) -> tuple[bool, _T | None]:
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

"""Config reloads of the running daemon, its `Reconciler` part.

`reconcile(config)` (a config reload, one at a time): endpoints added get a worker, removed ones
are stopped, changed ones drain their queue and are replaced by a worker started from the old
one's snapshot (state, incident, streaks carry over) with the new settings; then new probe jobs
replace the old ones. A worker being replaced stays listed until its successor takes its place,
and never starts a repair while it drains (the successor does). An endpoint in the middle of a
repair keeps its old settings until a later reload. `store`, `http` and `playbook.path` take
effect only when the daemon restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Protocol

import structlog

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.hear.reachability import HostWatcher
from supervisor.hear.units import UnitEvents
from supervisor.judge.machine import FleetMachine, State
from supervisor.record.store.records import Snapshot, SubjectKind
from supervisor.record.store.store import Store
from supervisor.repair import Remediator
from supervisor.runtime._restore import stored_snapshot
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.daemon")

Forget = Callable[[str], Awaitable[None]]
"""Told the name of an endpoint that left the config once its worker is gone (the root closes
what it kept for it, e.g. its probe client)."""
Reconciled = Callable[[FleetConfig], None]
"""Told the config in force once a reload applied it (the root re-points what it wired)."""


DRAIN_ON_RELOAD_SECONDS = 10.0
"""How long a reload lets a replaced worker finish what it has queued, by default."""


class Running(Protocol):
    """What a reload changes of the running daemon (`Daemon`)."""

    config: FleetConfig
    store: Store
    machine: FleetMachine
    remediator: Remediator
    unit_events: UnitEvents
    workers: dict[str, EndpointWorker]
    hosts: dict[str, HostWatcher]

    async def watcher(self, name: str, config: FleetConfig) -> HostWatcher: ...

    def start_worker(
        self, endpoint: Endpoint, snapshot: Snapshot | None, *, reopen_within: timedelta
    ) -> EndpointWorker: ...

    async def drain_worker(self, name: str, *, within: float) -> tuple[EndpointWorker, bool]: ...

    async def stop_schedule(self) -> None: ...

    def start_schedule(self) -> None: ...


class Reconciler:
    """Applies a new config to `running`, one reload at a time; tells `forget` of each endpoint
    that left and `reconfigured` of the config in force."""

    def __init__(
        self,
        running: Running,
        *,
        forget: Forget | None = None,
        reconfigured: Reconciled | None = None,
    ) -> None:
        self._running = running
        self._forget = forget
        self._reconfigured = reconfigured
        self._reconciling = asyncio.Lock()
        #: how long a reload lets a replaced worker finish what it has queued, in seconds
        self.drain_within = DRAIN_ON_RELOAD_SECONDS

    async def reconcile(self, new: FleetConfig) -> list[str]:
        """Apply a validated config without losing state; returns what changed, one line each.

        One reload at a time: two at once would each see the other's half-replaced endpoint as
        new and start a second worker for it."""
        async with self._reconciling:
            return await self._reconcile(new)

    async def _reconcile(self, new: FleetConfig) -> list[str]:
        running = self._running
        old = running.config
        notes = [
            f"{key} changed: it takes effect when the daemon restarts"
            for key in RESTART_ONLY
            if getattr(old, key) != getattr(new, key)
        ]
        effective = new.model_copy(update={key: getattr(old, key) for key in RESTART_ONLY})
        removed: list[EndpointWorker] = []
        try:
            notes += await self._reconcile_hosts(effective)
            notes += await self._reconcile_endpoints(effective, removed)
            running.config = effective
            await running.unit_events.reconfigure(effective)
            if self._reconfigured is not None:
                self._reconfigured(effective)
        finally:
            # the old jobs tick on (other endpoints keep being probed while one drains) until the
            # new ones replace them; only then do removed endpoints leave the daemon
            await running.stop_schedule()
            for worker in removed:
                last = worker.snapshot()
                del running.workers[worker.name]
                if self._forget is not None:
                    await self._forget(worker.name)
                running.machine.remove(worker.name)
                await running.store.save_snapshot(last)
            running.start_schedule()
        for note in notes:
            log.info("config reloaded", change=note)
        if not notes:
            log.info("config reloaded", change="nothing changed")
        return notes

    async def _reconcile_hosts(self, new: FleetConfig) -> list[str]:
        running = self._running
        notes = []
        for name in [n for n in running.hosts if n not in new.hosts or new.hosts[n].local]:
            del running.hosts[name]
            notes.append(f"host {name} is no longer watched")
        for name, host in new.hosts.items():
            current = running.hosts.get(name)
            if host.local or (current is not None and current.host == host):
                continue
            running.hosts[name] = await running.watcher(name, new)
            notes.append(f"host {name} {'added' if current is None else 'changed'}")
        return notes

    async def _reconcile_endpoints(
        self, new: FleetConfig, removed: list[EndpointWorker]
    ) -> list[str]:
        """Add, replace and stop workers; stopped ones of removed endpoints go to `removed`."""
        running = self._running
        notes = []
        for name in [n for n in running.workers if n not in new.endpoints]:
            if self._busy(name):
                notes.append(f"endpoint {name} is being repaired: it is removed at a later reload")
                continue
            worker, _ = await running.drain_worker(name, within=self.drain_within)
            removed.append(worker)
            notes.append(f"endpoint {name} removed")
        reopen_within = new.defaults.reopen_within
        for name, endpoint in new.endpoints.items():
            current = running.workers.get(name)
            if current is not None and _same(current, endpoint, new):
                continue
            if current is None:
                stored = await stored_snapshot(running.store, SubjectKind.ENDPOINT, name)
                running.start_worker(endpoint, stored, reopen_within=reopen_within)
                notes.append(f"endpoint {name} added")
                continue
            if self._busy(name):
                notes.append(f"endpoint {name} is being repaired: its new settings wait")
                continue
            old, problem = await running.drain_worker(name, within=self.drain_within)
            snapshot = old.snapshot()  # taken, the model removed and the new one added in one step
            running.machine.remove(name)
            worker = running.start_worker(endpoint, snapshot, reopen_within=reopen_within)
            worker.record.last_problem = old.record.last_problem
            await running.store.save_snapshot(snapshot)
            if problem:
                running.remediator.schedule(worker)  # the problem the old worker saw while draining
            notes.append(f"endpoint {name} changed")
        return notes

    def _busy(self, name: str) -> bool:
        """A repair task runs for the endpoint, or it is remediating/verifying."""
        running = self._running
        return running.workers[name].state in _BUSY or running.remediator.running(name)


def _same(worker: EndpointWorker, endpoint: Endpoint, new: FleetConfig) -> bool:
    return worker.endpoint == endpoint and worker.record.reopen_within == new.defaults.reopen_within


RESTART_ONLY = ("store", "http", "playbook")
"""Config keys a reload does not apply: they take effect when the daemon restarts."""
_BUSY = (State.REMEDIATING, State.VERIFYING)

"""The running system: one watcher per remote host, one worker per endpoint, the probe schedule,
and `reconcile` to apply a new config without losing state. The composition root
(`supervisor.app.root`) builds it with an open store, the live playbook and the repair runner, and
closes what it opened; the daemon starts and stops what runs.

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
from contextlib import suppress

from supervisor.config import Endpoint, FleetConfig
from supervisor.core.events import Stop
from supervisor.judge.machine import State
from supervisor.record.store import SubjectKind
from supervisor.runtime.restore import close_interrupted, stored_snapshot
from supervisor.runtime.running import Forget, Reconfigured, RunningFleet, log
from supervisor.worker import EndpointWorker

__all__ = [
    "DRAIN_ON_RELOAD_SECONDS",
    "RESTART_ONLY",
    "Daemon",
    "Forget",
    "Reconfigured",
    "close_interrupted",
]


class Daemon(RunningFleet):
    """The running system (`RunningFleet`: `restore`, `start_probing`, then `stop`) and
    `reconcile`, a config reload applied while it runs."""

    async def reconcile(self, new: FleetConfig) -> list[str]:
        """Apply a validated config without losing state; returns what changed, one line each.

        One reload at a time: two at once would each see the other's half-replaced endpoint as
        new and start a second worker for it."""
        async with self._reconciling:
            return await self._reconcile(new)

    async def _reconcile(self, new: FleetConfig) -> list[str]:
        old = self.config
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
            self.config = effective
            await self.unit_events.reconfigure(effective)
            if self._reconfigured is not None:
                self._reconfigured(effective)
        finally:
            # the old jobs tick on (other endpoints keep being probed while one drains) until the
            # new ones replace them; only then do removed endpoints leave the daemon
            if self._schedule is not None:
                await self._schedule.stop()
            for worker in removed:
                last = worker.snapshot()
                del self.workers[worker.name]
                if self._forget is not None:
                    await self._forget(worker.name)
                self.machine.remove(worker.name)
                await self.store.save_snapshot(last)
            self._start_schedule()
        for note in notes:
            log.info("config reloaded", change=note)
        if not notes:
            log.info("config reloaded", change="nothing changed")
        return notes

    async def _reconcile_hosts(self, new: FleetConfig) -> list[str]:
        notes = []
        for name in [n for n in self.hosts if n not in new.hosts or new.hosts[n].local]:
            del self.hosts[name]
            notes.append(f"host {name} is no longer watched")
        for name, host in new.hosts.items():
            current = self.hosts.get(name)
            if host.local or (current is not None and current.host == host):
                continue
            self.hosts[name] = await self._watcher(name, new)
            notes.append(f"host {name} {'added' if current is None else 'changed'}")
        return notes

    async def _reconcile_endpoints(
        self, new: FleetConfig, removed: list[EndpointWorker]
    ) -> list[str]:
        """Add, replace and stop workers; stopped ones of removed endpoints go to `removed`."""
        notes = []
        for name in [n for n in self.workers if n not in new.endpoints]:
            if self._busy(name):
                notes.append(f"endpoint {name} is being repaired: it is removed at a later reload")
                continue
            worker, _ = await self._stop_worker(name)
            removed.append(worker)
            notes.append(f"endpoint {name} removed")
        reopen_within = new.defaults.reopen_within
        for name, endpoint in new.endpoints.items():
            current = self.workers.get(name)
            if current is not None and _same(current, endpoint, new):
                continue
            if current is None:
                stored = await stored_snapshot(self.store, SubjectKind.ENDPOINT, name)
                self.start_worker(endpoint, stored, reopen_within=reopen_within)
                notes.append(f"endpoint {name} added")
                continue
            if self._busy(name):
                notes.append(f"endpoint {name} is being repaired: its new settings wait")
                continue
            old, problem = await self._stop_worker(name)
            snapshot = old.snapshot()  # taken, the model removed and the new one added in one step
            self.machine.remove(name)
            worker = self.start_worker(endpoint, snapshot, reopen_within=reopen_within)
            worker.record.last_problem = old.record.last_problem
            await self.store.save_snapshot(snapshot)
            if problem:
                self.remediator.schedule(worker)  # the problem the old worker saw while draining
            notes.append(f"endpoint {name} changed")
        return notes

    def _busy(self, name: str) -> bool:
        """A repair task runs for the endpoint, or it is remediating/verifying."""
        return self.workers[name].state in _BUSY or self.remediator.running(name)

    async def _stop_worker(self, name: str) -> tuple[EndpointWorker, bool]:
        """Let the worker finish what it has queued, then end its task. It stays in `workers`
        (and its model in the machine) for the caller to replace or remove.

        While it drains it must not start a repair: the repair would hold this worker, not the
        one that replaces it. Returns the worker and whether it ran into a problem meanwhile."""
        worker = self.workers[name]
        problems: list[EndpointWorker] = []
        worker.on_problem = problems.append
        worker.on_evidence = None
        worker.submit(Stop(endpoint=name, at=self.clock.now()))
        for task in self.worker_tasks(name):
            with suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=DRAIN_ON_RELOAD_SECONDS)
            self._tasks.remove(task)
        return worker, bool(problems)


def _same(worker: EndpointWorker, endpoint: Endpoint, new: FleetConfig) -> bool:
    return worker.endpoint == endpoint and worker.record.reopen_within == new.defaults.reopen_within


RESTART_ONLY = ("store", "http", "playbook")
"""Config keys a reload does not apply: they take effect when the daemon restarts."""
DRAIN_ON_RELOAD_SECONDS = 10.0
"""How long a reload lets a replaced worker finish what it has queued."""
_BUSY = (State.REMEDIATING, State.VERIFYING)

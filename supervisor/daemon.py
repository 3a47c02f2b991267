"""The running system: one watcher per remote host, one worker per endpoint, the probe schedule,
and `reconcile` to apply a new config without losing state. The composition root
(`supervisor.app`) builds it with an open store, the live playbook and the repair runner, and
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
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog

from supervisor.clock import Clock
from supervisor.config import Endpoint, FleetConfig
from supervisor.events import Event, HostReachability, Stop, Tier, UnitSignal
from supervisor.hosts import UNREACHABLE, HostWatcher
from supervisor.machine import FleetMachine, State
from supervisor.playbook.live import LivePlaybook
from supervisor.remediation.runner import Remediator
from supervisor.restore import close_interrupted, stored_snapshot
from supervisor.schedule import ProbeSchedule
from supervisor.store import Snapshot, Store, SubjectKind
from supervisor.store.lease import StaleEpochError
from supervisor.unitevents import UnitEvents
from supervisor.worker import EndpointWorker, Prober, ProgressReader
from supervisor.worker_state import restored_from

if TYPE_CHECKING:
    from supervisor.hostevents import Transport

log = structlog.get_logger("supervisor.daemon")

Forget = Callable[[str], Awaitable[None]]
"""Told the name of an endpoint that left the config once its worker is gone (the root closes
what it kept for it, e.g. its probe client)."""
Reconfigured = Callable[[FleetConfig], None]
"""Told the config in force once a reload applied it (the root re-points what it wired)."""


class Daemon:
    """The host watchers, endpoint workers and probe schedule. `restore`, `start_probing`,
    then `stop`."""

    def __init__(
        self,
        config: FleetConfig,
        *,
        store: Store,
        playbook: LivePlaybook,
        remediator: Remediator,
        clock: Clock,
        prober: Prober,
        forget: Forget | None = None,
        reconfigured: Reconfigured | None = None,
        progress: ProgressReader | None = None,
        transports: Mapping[str, Transport] | None = None,
    ) -> None:
        self.config = config
        self._progress = progress
        self.store = store
        self.playbook = playbook
        self.remediator = remediator
        self.clock = clock
        self.machine = FleetMachine()
        self.workers: dict[str, EndpointWorker] = {}
        self.hosts: dict[str, HostWatcher] = {}
        self._prober = prober
        self._forget = forget
        self._reconfigured = reconfigured
        self._tasks: list[asyncio.Task[None]] = []
        self._schedule: ProbeSchedule | None = None
        self._reconciling = asyncio.Lock()
        #: systemd's unit events from every host, routed to the workers (started with probing)
        self.unit_events = UnitEvents(config, self._unit_signal, store=store, transports=transports)

    async def restore(self) -> None:
        """Close the repairs the last run left unfinished, watch the hosts and start the
        workers from their stored snapshots. Nothing is probed yet."""
        store = self.store
        await close_interrupted(store, self.clock.now())
        await self.unit_events.load()  # the journal cursors the last leader reached
        for name, host in self.config.hosts.items():
            if not host.local:
                self.hosts[name] = await self._watcher(name, self.config)
        for name, endpoint in self.config.endpoints.items():
            snapshot = await stored_snapshot(store, SubjectKind.ENDPOINT, name)
            self.start_worker(endpoint, snapshot, reopen_within=self.config.defaults.reopen_within)

    def start_probing(self) -> None:
        """Start the probe schedule, and judge afresh the problems the last run left open."""
        self._start_schedule()
        self.unit_events.start()
        for worker in self.workers.values():
            if worker.state in (State.DOWN, State.DEGRADED, State.UNREACHABLE):
                self._tasks.append(asyncio.create_task(self._resume(worker)))

    async def _watcher(self, name: str, config: FleetConfig) -> HostWatcher:
        return HostWatcher(
            config.hosts[name],
            store=self.store,
            clock=self.clock,
            broadcast=self.broadcast,
            failures_to_down=config.defaults.probe.failures_to_down,
            timeout=min(config.defaults.probe.timeout, _HOST_TIMEOUT),
            restored=await stored_snapshot(self.store, SubjectKind.HOST, name),
        )

    def _start_schedule(self) -> None:
        self._schedule = ProbeSchedule(
            self.config, self.workers, self.hosts, self.store, self.clock, self.playbook
        )
        self._schedule.start()

    async def _resume(self, worker: EndpointWorker) -> None:
        """A problem the last run left open: judged afresh from a new probe (a diagnosis needs
        the failing probe; without one no rule can match)."""
        result = await worker.probe_now(Tier.DEEP, keep_problem=True)
        if result.ok:
            return  # the schedule's next probe will see it healthy
        self.remediator.schedule(worker)

    def start_worker(
        self, endpoint: Endpoint, snapshot: Snapshot | None, *, reopen_within: timedelta
    ) -> EndpointWorker:
        """A worker for `endpoint` from its stored (or handed-over) snapshot, running and
        registered; used at start and by `reconcile`."""
        now = self.clock.now()
        restored = restored_from(snapshot, now=now, grace_until=now + endpoint.startup_grace)
        down_hosts = {n for n, w in self.hosts.items() if w.state == UNREACHABLE}
        worker = EndpointWorker(
            endpoint,
            machine=self.machine,
            store=self.store,
            prober=self._prober,
            clock=self.clock,
            restored=restored,
            unreachable_hosts=down_hosts & set(endpoint.hosts()),
            host_check=self._hosts_answer,
            reopen_within=reopen_within,
            progress=self._progress,
        )
        worker.on_problem = self.remediator.schedule
        self.workers[endpoint.name] = worker
        name = endpoint.name
        self._tasks.append(asyncio.create_task(worker.run(), name=f"endpoint:{name}"))
        log.info(
            "supervising", endpoint=name, state=worker.state.value, incident=worker.incident_id
        )
        return worker

    def worker_tasks(self, name: str) -> list[asyncio.Task[None]]:
        """The tasks that ran endpoint `name`'s workers, oldest first (the last one is the
        current worker's; an older one is a worker a reload is replacing)."""
        return [t for t in self._tasks if t.get_name() == f"endpoint:{name}"]

    async def _hosts_answer(self, endpoint: Endpoint) -> str:
        for name in endpoint.hosts():
            watcher = self.hosts.get(name)
            if watcher is None:
                continue
            reason = await watcher.probe_once()
            if reason:
                return f"host {name}: {reason}"
        return ""

    def broadcast(self, event: HostReachability) -> None:
        for worker in self.workers.values():
            if event.host in worker.endpoint.hosts():
                worker.submit(event)

    def _unit_signal(self, name: str, signal: UnitSignal) -> None:
        worker = self.workers.get(name)
        if worker is not None:
            worker.submit(signal)

    def submit(self, event: Event) -> None:
        name = getattr(event, "endpoint", None)
        if not isinstance(name, str) or name not in self.workers:
            raise KeyError(f"no endpoint {name!r}")
        self.workers[name].submit(event)

    async def stop(self) -> None:
        """Stop the schedule, the unit events and the repairs, then let every worker drain its
        queue."""
        if self._schedule is not None:
            await self._schedule.stop()
        await self.unit_events.stop()
        await self.remediator.stop()
        for worker in self.workers.values():
            worker.submit(Stop(endpoint=worker.name, at=self.clock.now()))
        for task in self._tasks:
            with suppress(TimeoutError, asyncio.CancelledError):
                try:
                    await asyncio.wait_for(task, timeout=_DRAIN_SECONDS)
                except StaleEpochError as err:  # its last write refused: deposed, it ended
                    log.warning("deposed", stops=task.get_name(), refused=str(err))

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
            worker.last_problem = old.last_problem
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
        worker.submit(Stop(endpoint=name, at=self.clock.now()))
        for task in self.worker_tasks(name):
            with suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=DRAIN_ON_RELOAD_SECONDS)
            self._tasks.remove(task)
        return worker, bool(problems)


def _same(worker: EndpointWorker, endpoint: Endpoint, new: FleetConfig) -> bool:
    return worker.endpoint == endpoint and worker.reopen_within == new.defaults.reopen_within


RESTART_ONLY = ("store", "http", "playbook")
"""Config keys a reload does not apply: they take effect when the daemon restarts."""
DRAIN_ON_RELOAD_SECONDS = 10.0
"""How long a reload lets a replaced worker finish what it has queued."""
_HOST_TIMEOUT = timedelta(seconds=5)
_DRAIN_SECONDS = 5.0
_BUSY = (State.REMEDIATING, State.VERIFYING)

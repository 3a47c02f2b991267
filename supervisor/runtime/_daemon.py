"""The running system: one watcher per remote host, one worker per endpoint, the probe schedule
and the unit events; started from what the last run stored (`restore`, then `start_probing`),
reloaded (`reconcile`, its `Reconciler` part: `_reconcile`) and stopped (`stop`). The composition
root (`supervisor.app.root`) builds it with an open store, the live playbook and the repair
runner, and closes what it opened; the daemon starts and stops what runs."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextlib import suppress
from datetime import timedelta
from typing import TYPE_CHECKING

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.events import Event, HostReachability, ProbeOutcome, Stop, Tier, UnitSignal
from supervisor.hear.reachability import HostWatcher
from supervisor.hear.units import UnitEvents
from supervisor.judge.machine import INCIDENT_STATES, FleetMachine, HostState, State
from supervisor.playbook.live import LivePlaybook
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.records import Snapshot, SubjectKind
from supervisor.record.store.store import Store
from supervisor.repair import Remediator
from supervisor.runtime._reconcile import Forget, Reconciled, Reconciler, log
from supervisor.runtime._restore import STOPPED, close_interrupted, stored_snapshot
from supervisor.runtime._schedule import ProbeSchedule
from supervisor.worker import EndpointWorker, Prober, ProgressReader, restored_from

if TYPE_CHECKING:
    from supervisor.hear.streams.protocol import Transport


#: a router's or a backend's states in which an endpoint behind it is blocked by it
_CAUSES = INCIDENT_STATES | {State.UNREACHABLE}


class Daemon:
    """The host watchers, endpoint workers, probe schedule and unit events. `restore`,
    `start_probing`, `reconcile` (its `reloads`) while it runs, then `stop`."""

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
        reconfigured: Reconciled | None = None,
        progress: ProgressReader | None = None,
        transports: Mapping[str, Transport] | None = None,
    ) -> None:
        self.config = config
        self._progress = progress
        self.store = store
        self.playbook = playbook
        self.remediator = remediator
        #: [leadership] why the repairs the last leader left unfinished were cut
        self.interrupted_why = STOPPED
        self.clock = clock
        self.machine = FleetMachine()
        self.workers: dict[str, EndpointWorker] = {}
        self.hosts: dict[str, HostWatcher] = {}
        self._prober = prober
        self._tasks: list[asyncio.Task[None]] = []
        self._schedule: ProbeSchedule | None = None
        #: config reloads, applied one at a time
        self.reloads = Reconciler(self, forget=forget, reconfigured=reconfigured)
        #: systemd's unit events from every host, routed to the workers (started with probing)
        self.unit_events = UnitEvents(config, self._unit_signal, store=store, transports=transports)

    async def restore(self) -> None:
        """Close the repairs the last run left unfinished, watch the hosts and start the
        workers from their stored snapshots. Nothing is probed yet."""
        store = self.store
        await close_interrupted(store, self.clock.now(), why=self.interrupted_why)
        await self.unit_events.load()  # the journal cursors the last leader reached
        for name, host in self.config.hosts.items():
            if not host.local:
                self.hosts[name] = await self.watcher(name, self.config)
        for name, endpoint in self.config.endpoints.items():
            snapshot = await stored_snapshot(store, SubjectKind.ENDPOINT, name)
            self.start_worker(endpoint, snapshot, reopen_within=self.config.defaults.reopen_within)

    async def reconcile(self, new: FleetConfig) -> list[str]:
        """Apply a validated config without losing state (`Reconciler.reconcile`)."""
        return await self.reloads.reconcile(new)

    def start_probing(self) -> None:
        """Start the probe schedule, and judge afresh the problems the last run left open."""
        self.start_schedule()
        self.unit_events.start()
        for worker in self.workers.values():
            if worker.state in (State.DOWN, State.DEGRADED, State.UNREACHABLE):
                self._tasks.append(asyncio.create_task(self._resume(worker)))

    async def watcher(self, name: str, config: FleetConfig) -> HostWatcher:
        """A watcher of host `name` as `config` has it, from its stored snapshot."""
        return HostWatcher(
            config.hosts[name],
            store=self.store,
            clock=self.clock,
            broadcast=self.broadcast,
            failures_to_down=config.defaults.probe.failures_to_down,
            timeout=min(config.defaults.probe.timeout, _HOST_TIMEOUT),
            restored=await stored_snapshot(self.store, SubjectKind.HOST, name),
        )

    async def stop_schedule(self) -> None:
        if self._schedule is not None:
            await self._schedule.stop()

    def start_schedule(self) -> None:
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
        down_hosts = {n for n, w in self.hosts.items() if w.state == HostState.UNREACHABLE}
        worker = EndpointWorker(
            endpoint,
            machine=self.machine,
            store=self.store,
            prober=self._prober,
            clock=self.clock,
            restored=restored,
            unreachable_hosts=down_hosts & set(endpoint.hosts()),
            host_check=self._hosts_answer,
            dependency_check=self._dependencies_answer,
            reopen_within=reopen_within,
            progress=self._progress,
        )
        worker.on_problem = self.remediator.schedule
        worker.on_evidence = self.remediator.reconsider
        self.workers[endpoint.name] = worker
        name = endpoint.name
        self._tasks.append(asyncio.create_task(worker.run(), name=f"endpoint:{name}"))
        log.info(
            "supervising",
            endpoint=name,
            state=worker.state.value,
            incident=worker.record.incident_id,
        )
        return worker

    async def drain_worker(self, name: str, *, within: float) -> tuple[EndpointWorker, bool]:
        """Let the worker finish what it has queued (for at most `within` seconds), then end its
        task. It stays in `workers` (and its model in the machine) for the caller to replace or
        remove.

        While it drains it must not start a repair: the repair would hold this worker, not the
        one that replaces it. Returns the worker and whether it ran into a problem meanwhile."""
        worker = self.workers[name]
        problems: list[EndpointWorker] = []
        worker.on_problem = problems.append
        worker.on_evidence = None
        worker.submit(Stop(endpoint=name, at=self.clock.now()))
        for task in self.worker_tasks(name):
            with suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=within)
            self._tasks.remove(task)
        return worker, bool(problems)

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

    async def _dependencies_answer(self, endpoint: Endpoint, *, probe: bool = True) -> str:
        """'' when the endpoints this one is reached through (`via`, then `backend`) answer;
        else which does not, and why: its own worker's problem state, else (with `probe`) a
        probe now (the router's liveness, the backend's real check, which loads no model on
        demand)."""
        for name in endpoint.depends_on():
            worker = self.workers.get(name)
            if worker is None:
                continue
            if worker.state in _CAUSES:
                return f"{name} ({worker.state})"
            if not probe:
                continue
            tier = Tier.LIVENESS if name == endpoint.via else Tier.DEEP
            target = worker.endpoint.without_loading() if tier is Tier.DEEP else worker.endpoint
            result = await self._prober(target, tier)
            if result.outcome is ProbeOutcome.FAIL:
                return f"{name}: {result.reason}"
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
        await self.stop_schedule()
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


_HOST_TIMEOUT = timedelta(seconds=5)
_DRAIN_SECONDS = 5.0

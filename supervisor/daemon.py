"""The daemon: restores state from the store, starts one worker per endpoint and one watcher per
host, schedules the probes, and runs until it is told to stop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import replace
from datetime import datetime, timedelta

import httpx
import structlog

from supervisor.actions.registry import ACTIONS
from supervisor.clock import Clock, SystemClock
from supervisor.config import Endpoint, FleetConfig
from supervisor.events import Event, HostReachability, ProbeResult, Stop, Tier
from supervisor.executor import Executor
from supervisor.executor.fleet import FleetExecutor
from supervisor.hosts import UNREACHABLE, HostWatcher
from supervisor.machine import FleetMachine, State
from supervisor.notify.notifier import Notifier, Timing, make_notifier
from supervisor.ops.runtime import OpsRuntime  # ops hook (issue 6)
from supervisor.playbook.live import LivePlaybook
from supervisor.probes import make_client, make_tls, run_probe
from supervisor.remediation.runner import Remediator
from supervisor.schedule import ProbeSchedule
from supervisor.store import (
    AttemptRow,
    Snapshot,
    Store,
    SubjectKind,
    TimelineEntry,
)
from supervisor.store.resilient import ResilientStore
from supervisor.timeline import INTERRUPTED, AttemptFinished
from supervisor.worker import EndpointWorker, Prober
from supervisor.worker_state import restored_from

log = structlog.get_logger("supervisor.daemon")


class Daemon:
    """Everything the `run` command runs. `start`, then `stop` (or `run_until`)."""

    def __init__(
        self,
        config: FleetConfig,
        *,
        clock: Clock | None = None,
        prober: Prober | None = None,
        executor: Executor | None = None,
        dry_run: bool = False,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self._prober = prober
        self._client: httpx.AsyncClient | None = None  #: the repair runner's
        self._clients: dict[str, httpx.AsyncClient] = {}  #: one per endpoint, for its probes
        self._tls = make_tls()
        self.executor: Executor = executor or FleetExecutor(config)
        self.dry_run = dry_run or config.remediation.dry_run
        self.playbook: LivePlaybook | None = None
        self.remediator: Remediator | None = None
        self.store: Store | None = None
        self.machine = FleetMachine()
        self.workers: dict[str, EndpointWorker] = {}
        self.hosts: dict[str, HostWatcher] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._schedule: ProbeSchedule | None = None
        self.on_ready: Callable[[], Awaitable[None] | None] | None = None
        # notify (Telegram, issue 5): the component, and its timings (tests shorten them)
        self.notifier: Notifier | None = None
        self.notify_timing: Timing | None = None
        self.ops = OpsRuntime(self)  # ops hook (issue 6): HTTP, sd_notify, watchdog

    async def _probe(self, endpoint: Endpoint, tier: Tier) -> ProbeResult:
        client = self._clients.get(endpoint.name)
        if client is None:
            client = self._clients[endpoint.name] = make_client(self._tls)
        return await run_probe(endpoint, tier, client, clock=self.clock)

    async def drop_client(self, endpoint: str) -> None:
        """Close the probe client of an endpoint that left the config."""
        client = self._clients.pop(endpoint, None)
        if client is not None:
            await client.aclose()

    async def start(self) -> None:
        self.store = store = await ResilientStore.open(self.config.store.path)
        await close_interrupted(store, self.clock.now())
        self._client = make_client(self._tls)
        self.playbook = LivePlaybook(self.config.playbook.path)
        self.remediator = Remediator(
            config=self.config,
            store=store,
            executor=self.executor,
            http=self._client,
            clock=self.clock,
            playbook=self.playbook,
            actions=ACTIONS,
            dry_run=self.dry_run,
        )
        for name, host in self.config.hosts.items():
            if host.local:
                continue
            self.hosts[name] = HostWatcher(
                host,
                store=store,
                clock=self.clock,
                broadcast=self.broadcast,
                failures_to_down=self.config.defaults.probe.failures_to_down,
                timeout=min(self.config.defaults.probe.timeout, _HOST_TIMEOUT),
                restored=await _current(store, SubjectKind.HOST, name),
            )
        for name, endpoint in self.config.endpoints.items():
            snapshot = await _current(store, SubjectKind.ENDPOINT, name)
            self.start_worker(endpoint, snapshot, reopen_within=self.config.defaults.reopen_within)
        self._schedule = ProbeSchedule(
            self.config, self.workers, self.hosts, store, self.clock, self.playbook
        )
        self._schedule.start()
        for worker in self.workers.values():
            if worker.state in (State.DOWN, State.DEGRADED, State.UNREACHABLE):
                self._tasks.append(asyncio.create_task(self._resume(worker)))
        await self.ops.start()  # ops hook (issue 6): HTTP server, READY=1, watchdog pings
        # notify (Telegram, issue 5): alerts, commands, and the confirm-mode approver
        self.notifier = make_notifier(
            self.config,
            store=store,
            workers=self.workers,
            hosts=self.hosts,
            remediator=self.remediator,
            clock=self.clock,
            timing=self.notify_timing,
        )
        if self.notifier is not None:
            self.remediator.approver = self.notifier.approve
            await self.notifier.start()
        # end notify
        log.info("started", endpoints=len(self.workers), hosts=len(self.hosts))

    async def _resume(self, worker: EndpointWorker) -> None:
        """A problem the last run left open: judged afresh from a new probe (a diagnosis needs
        the failing probe; without one no rule can match)."""
        assert self.remediator is not None
        result = await worker.probe_now(Tier.DEEP)
        if result.ok:
            return  # the schedule's next probe will see it healthy
        worker.last_problem = result
        self.remediator.schedule(worker)

    def start_worker(
        self, endpoint: Endpoint, snapshot: Snapshot | None, *, reopen_within: timedelta
    ) -> EndpointWorker:
        """A worker for `endpoint` from its stored (or handed-over) snapshot, running and
        registered; used at start and by a config reload."""
        assert self.store is not None
        now = self.clock.now()
        restored = restored_from(snapshot, now=now, grace_until=now + endpoint.startup_grace)
        down_hosts = {n for n, w in self.hosts.items() if w.state == UNREACHABLE}
        worker = EndpointWorker(
            endpoint,
            machine=self.machine,
            store=self.store,
            prober=self._prober or self._probe,
            clock=self.clock,
            restored=restored,
            unreachable_hosts=down_hosts & set(endpoint.hosts()),
            host_check=self._hosts_answer,
            reopen_within=reopen_within,
        )
        worker.on_problem = self.remediator.schedule if self.remediator is not None else None
        self.workers[endpoint.name] = worker
        name = endpoint.name
        self._tasks.append(asyncio.create_task(worker.run(), name=f"endpoint:{name}"))
        log.info(
            "supervising", endpoint=name, state=worker.state.value, incident=worker.incident_id
        )
        return worker

    async def _hosts_answer(self, endpoint: Endpoint) -> str:
        for name in endpoint.hosts():
            watcher = self.hosts.get(name)
            if watcher is None:
                continue
            reason = await watcher.probe_once()
            if reason:
                return f"host {name}: {reason}"
        return ""

    def reload(self) -> list[str]:
        """SIGHUP: reload the playbook (a broken one is refused; the rules in force stay)."""
        return self.playbook.reload() if self.playbook is not None else []

    async def reload_config(self, new: FleetConfig) -> list[str]:
        """Apply a validated config without losing state (ops hook, issue 6)."""
        from supervisor.ops.reload import reload_config

        return await reload_config(self, new)

    def broadcast(self, event: HostReachability) -> None:
        for worker in self.workers.values():
            if event.host in worker.endpoint.hosts():
                worker.submit(event)

    def submit(self, event: Event) -> None:
        name = getattr(event, "endpoint", None)
        if not isinstance(name, str) or name not in self.workers:
            raise KeyError(f"no endpoint {name!r}")
        self.workers[name].submit(event)

    async def stop(self) -> None:
        await self.ops.stop()  # ops hook (issue 6): STOPPING=1, watchdog and HTTP server off
        if self._schedule is not None:
            await self._schedule.stop()
        if self.remediator is not None:
            await self.remediator.stop()
        for worker in self.workers.values():
            worker.submit(Stop(endpoint=worker.name, at=self.clock.now()))
        for task in self._tasks:
            with suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=_DRAIN_SECONDS)
        if self.notifier is not None:  # notify (Telegram, issue 5)
            await self.notifier.stop()
        if self._client is not None:
            await self._client.aclose()
        for name in list(self._clients):
            await self.drop_client(name)
        await self.executor.close()
        if self.store is not None:
            await self.store.close()
        log.info("stopped")

    async def run_until(self, stop: asyncio.Event) -> None:
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()


async def close_interrupted(store: Store, now: datetime) -> list[AttemptRow]:
    """Repairs a killed daemon left unfinished: marked `interrupted`, in their incident too.

    They still count against the budgets; their steps are never resumed half-way: the endpoint is
    judged afresh, and a new attempt (if the budget allows) starts from a fresh diagnosis.
    """
    interrupted = [a for a in await store.attempts() if a.finished_at is None]
    for attempt in interrupted:
        await store.finish_attempt(attempt.id, at=now, outcome=INTERRUPTED)
        if attempt.incident_id is None:
            continue
        record = AttemptFinished(attempt=attempt.id, rule=attempt.rule_id, outcome=INTERRUPTED)
        entry = TimelineEntry(at=now, subject=attempt.endpoint, record=record)
        await store.append(attempt.incident_id, entry)
        log.warning("attempt interrupted", endpoint=attempt.endpoint, attempt=attempt.id)
    return interrupted


async def _current(store: Store, kind: SubjectKind, name: str) -> Snapshot | None:
    """The stored snapshot, with its incident reattached if the store still has one open."""
    snapshot = await store.snapshot(kind, name)
    incident = await store.open_incident(kind, name)
    if snapshot is None:
        return None
    incident_id = incident.id if incident is not None else None
    return replace(snapshot, incident_id=incident_id)


_HOST_TIMEOUT = timedelta(seconds=5)
_DRAIN_SECONDS = 5.0

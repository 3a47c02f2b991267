"""The probe schedule: APScheduler interval jobs that put ticks on the endpoints' queues.

Jobs only enqueue (the worker runs the probe), so a slow probe never overlaps the next one of
the same endpoint; a tick already waiting is not queued twice. Each job gets random jitter so a
fleet's probes do not all fire in the same second.

`stop` lets the jobs already running (a host check, the sample prune: both write to the store)
finish before it returns, so the store is never closed under them: APScheduler's own shutdown
only cancels them, and its job runner swallows the cancel, leaving a store write that waits
forever on a closed connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from datetime import UTC, datetime, timedelta

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.base import STATE_PAUSED

from supervisor.config.models import FleetConfig
from supervisor.core.clock import Clock
from supervisor.core.events import ProbeTick, Tier
from supervisor.hear.reachability import HostWatcher
from supervisor.playbook.live import LivePlaybook
from supervisor.record.store.errors import StoreError
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.records import SubjectKind
from supervisor.record.store.store import Store
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.schedule")

_PRUNE_EVERY = timedelta(hours=1)
SEEN_EVERY = timedelta(seconds=60)
"""How often the store hears that this run still supervises (a crash loses at most this much
supervised time: `supervisor.record.availability`)."""
_WATCH_EVERY = timedelta(seconds=5)
#: How long `stop` waits for running jobs before it cancels them (a host check times out in 5 s).
_STOP_WITHIN = 10.0


class ProbeSchedule:
    def __init__(
        self,
        config: FleetConfig,
        workers: Mapping[str, EndpointWorker],
        hosts: Mapping[str, HostWatcher],
        store: Store,
        clock: Clock,
        playbook: LivePlaybook | None = None,
    ) -> None:
        self._playbook = playbook
        self._config = config
        self._workers = workers
        self._hosts = hosts
        self._store = store
        self._clock = clock
        self._scheduler = AsyncIOScheduler(
            timezone=UTC,
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        self._running: set[asyncio.Task[object]] = set()
        self._started: datetime | None = None  #: when this run started supervising
        self._logged = False  #: its start is in the store

    def _tracked(self, job: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
        """`job`, its runs remembered while they run (so `stop` can wait for them)."""

        async def run() -> None:
            task = asyncio.current_task()
            if task is not None:
                self._running.add(task)
            try:
                await job()
            except StaleEpochError as err:  # deposed: no job starts any more
                if self._scheduler.running and self._scheduler.state != STATE_PAUSED:
                    self._scheduler.pause()
                    log.warning("deposed", stops="the schedule", refused=str(err))
            finally:
                if task is not None:
                    self._running.discard(task)

        return run

    def start(self) -> None:
        now = self._clock.now()
        for name, worker in self._workers.items():
            settings = worker.endpoint.probe
            jitter = settings.jitter.total_seconds() or None
            if worker.endpoint.kind == "health":
                # the health URL is the whole check: it is probed as the real check
                self._every(settings.liveness_interval, jitter, name, Tier.DEEP, now)
                continue
            self._every(settings.liveness_interval, jitter, name, Tier.LIVENESS, now)
            first_deep = now + settings.completion_interval
            self._every(settings.completion_interval, jitter, name, Tier.DEEP, first_deep)
        defaults = self._config.defaults.probe
        for watcher in self._hosts.values():
            self._scheduler.add_job(
                self._tracked(watcher.check),
                "interval",
                seconds=defaults.liveness_interval.total_seconds(),
                jitter=defaults.jitter.total_seconds() or None,
                next_run_time=now,
                id=f"host:{watcher.host.name}",
            )
        self._started = now
        self._scheduler.add_job(
            self._tracked(self._seen),
            "interval",
            seconds=SEEN_EVERY.total_seconds(),
            next_run_time=now,
        )
        self._scheduler.add_job(
            self._tracked(self._prune),
            "interval",
            seconds=_PRUNE_EVERY.total_seconds(),
            next_run_time=now,
        )
        if self._playbook is not None:
            self._scheduler.add_job(
                self._watch_playbook, "interval", seconds=_WATCH_EVERY.total_seconds()
            )
        self._scheduler.start()

    def _every(
        self, interval: timedelta, jitter: float | None, name: str, tier: Tier, first: datetime
    ) -> None:
        self._scheduler.add_job(
            self._tick,
            "interval",
            args=(name, tier),
            seconds=interval.total_seconds(),
            jitter=jitter,
            next_run_time=first,
            id=f"{tier}:{name}",
        )

    async def _tick(self, name: str, tier: Tier) -> None:
        self._workers[name].submit(ProbeTick(endpoint=name, tier=tier, at=self._clock.now()))

    async def _watch_playbook(self) -> None:
        if self._playbook is not None:
            self._playbook.reload_if_changed()

    async def _seen(self) -> None:
        """The first run states every subject's state (the start of supervised time); later
        ones say the run is alive."""
        started = self._started
        if started is None:
            return
        if self._logged:
            await self._store.supervised(started, self._clock.now())
            return
        subjects = [(SubjectKind.ENDPOINT, n, w.state.value) for n, w in self._workers.items()]
        subjects += [(SubjectKind.HOST, n, h.state) for n, h in self._hosts.items()]
        await self._store.supervising(started, subjects)
        self._logged = True

    async def _prune(self) -> None:
        await self._store.prune_samples(self._clock.now() - self._config.store.sample_retention)

    async def stop(self, within: float = _STOP_WITHIN) -> None:
        """No job starts any more; those running finish (cancelled after `within` seconds)."""
        if not self._scheduler.running:
            return
        self._scheduler.pause()
        running = set(self._running)
        if running:
            _, late = await asyncio.wait(running, timeout=within)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=within)
        self._scheduler.shutdown(wait=False)
        if self._logged and self._started is not None:
            with suppress(StoreError):  # deposed, or the store is gone: the last beat stands
                await self._store.supervised(self._started, self._clock.now())

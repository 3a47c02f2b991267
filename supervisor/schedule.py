"""The probe schedule: APScheduler interval jobs that put ticks on the endpoints' queues.

Jobs only enqueue (the worker runs the probe), so a slow probe never overlaps the next one of
the same endpoint; a tick already waiting is not queued twice. Each job gets random jitter so a
fleet's probes do not all fire in the same second.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from supervisor.clock import Clock
from supervisor.config import FleetConfig
from supervisor.events import ProbeTick, Tier
from supervisor.hosts import HostWatcher
from supervisor.playbook.live import LivePlaybook
from supervisor.store import Store
from supervisor.worker import EndpointWorker

_PRUNE_EVERY = timedelta(hours=1)
_WATCH_EVERY = timedelta(seconds=5)


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
                watcher.check,
                "interval",
                seconds=defaults.liveness_interval.total_seconds(),
                jitter=defaults.jitter.total_seconds() or None,
                next_run_time=now,
                id=f"host:{watcher.host.name}",
            )
        self._scheduler.add_job(
            self._prune, "interval", seconds=_PRUNE_EVERY.total_seconds(), next_run_time=now
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

    async def _prune(self) -> None:
        await self._store.prune_samples(self._clock.now() - self._config.store.sample_retention)

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

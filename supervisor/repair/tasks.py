"""What every repair shares: the runner's parts (the diagnosis service, the attempt runner,
the hosts' locks), one task per endpoint (started, awaited, stopped, a failure recorded and
never fatal), and how it writes to the timeline and calls a person."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import httpx
import structlog

from supervisor.config import FleetConfig
from supervisor.core.clock import Clock
from supervisor.execute import Executor
from supervisor.judge.machine import Trigger
from supervisor.playbook.actions.base import Action
from supervisor.playbook.loader import Playbook
from supervisor.playbook.model import Rule
from supervisor.record.store import Store
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.timeline import Escalation, Note, Record
from supervisor.repair import records
from supervisor.repair.attempt import AttemptRunner
from supervisor.repair.diagnosis import DiagnosisService, Prober
from supervisor.repair.guards import HostLocks
from supervisor.repair.listening import Listening
from supervisor.repair.rulefacts import runbook_head
from supervisor.worker import EndpointWorker, WorkerStopped

log = structlog.get_logger("supervisor.remediation")


class Approver(Protocol):
    async def __call__(self, endpoint: str, rule: Rule, plan: list[str]) -> bool | None:
        """True to go ahead, False to skip, None when nobody answered in time."""


Paused = Callable[[str], str]
"""Why automatic action on an endpoint is paused ('' when it is not)."""


def _never_paused(_endpoint: str) -> str:
    return ""


class RepairTasks:
    """The state of `Remediator` and its repair tasks; what the tasks do is `repair` (automatic)
    and `runner` (a person's restart)."""

    def __init__(
        self,
        *,
        config: FleetConfig,
        store: Store,
        executor: Executor,
        http: httpx.AsyncClient,
        clock: Clock,
        playbook: Callable[[], Playbook],
        actions: Mapping[str, Action[Any]],
        prober: Prober,
        locks: HostLocks | None = None,
        dry_run: bool = False,
        approver: Approver | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self._playbook = playbook
        self.locks = locks or HostLocks()
        self.dry_run = dry_run
        self.approver = approver
        #: whether automatic action is paused (the control API's pauses, persisted)
        self.paused: Paused = _never_paused
        self.diagnosis = DiagnosisService(
            config=config,
            playbook=playbook,
            executor=executor,
            http=http,
            clock=clock,
            actions=actions,
            prober=prober,
        )
        self.attempts = AttemptRunner(
            store=store,
            clock=clock,
            locks=self.locks,
            service=self.diagnosis,
            executor=executor,
            note=self.note,
            escalate=self._escalate,
            verify_every=lambda: self.config.remediation.verify_every,
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopped = False
        #: what escalated endpoints have heard (they look again at decisive new evidence)
        self.listening = Listening()

    @property
    def config(self) -> FleetConfig:
        return self.diagnosis.config

    @config.setter
    def config(self, value: FleetConfig) -> None:
        self.diagnosis.config = value  # a config reload

    def running(self, endpoint: str) -> bool:
        """Whether a repair task (a person's restart included) runs for `endpoint` now."""
        task = self._tasks.get(endpoint)
        return task is not None and not task.done()

    def started(self, endpoint: str) -> bool:
        """Whether a repair task was ever started for `endpoint` (tests wait on it)."""
        return endpoint in self._tasks

    async def wait(self) -> None:
        """Until every repair task has finished (tests, shutdown)."""
        while pending := [t for t in self._tasks.values() if not t.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def stop(self) -> None:
        self._stopped = True
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _guarded(self, worker: EndpointWorker, job: Any) -> None:
        try:
            await job
        except asyncio.CancelledError:
            raise
        except WorkerStopped:
            log.info("repair ended: the endpoint's worker stopped", endpoint=worker.name)
        except StaleEpochError as err:  # deposed: the new leader decides afresh
            log.warning("deposed", stops=f"the repair of {worker.name}", refused=str(err))
        except Exception as exc:  # a broken repair is recorded, never fatal
            log.exception("repair runner failed", endpoint=worker.name)
            await self.note(worker, Note(text=f"repair runner failed: {exc!r}"))

    async def note(
        self, worker: EndpointWorker, record: Record, incident: int | None = None
    ) -> None:
        entry = records.entry(record, worker.name, self.clock.now())
        await worker.append(entry, incident_id=incident)

    async def _escalate(self, worker: EndpointWorker, why: str, rule: Rule | None) -> None:
        head = runbook_head(self._playbook(), rule)
        escalation = Escalation(
            why=why,
            rule=rule.id if rule else None,
            runbook=rule.runbook if rule and rule.runbook else None,
            dry_run=self.dry_run,
        )
        await self.note(worker, escalation)
        if self.dry_run:
            return
        data = {"why": why, "rule": rule.id if rule else "", "runbook": head}
        was = worker.state
        self.listening.escalated(worker.record, rule.id if rule else None, was=was)
        await worker.apply(Trigger.ESCALATE, f"a person is needed: {why}", data=data)
        log.warning("escalated", endpoint=worker.name, why=why)

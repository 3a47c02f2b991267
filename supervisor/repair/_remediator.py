"""The repair runner: when an endpoint is confirmed down, degraded or unreachable, gather
evidence, diagnose, check the guard rails, act, verify with a real completion, and call a person
when a fix is not safe or did not work.

Every decision is recorded in the incident's timeline, the ones that did nothing included
(paused, budget spent, manual or confirm mode, dry run), so "why didn't it act?" is a query.
A repair that is not verified in time makes the endpoint `down` again and the runner starts over
from a fresh diagnosis; budgets end that loop with one escalation.

Diagnosis and plans come from the one `DiagnosisService`; every attempt (automatic, confirmed, or
a person's restart) runs through the one `AttemptRunner`. The runner reaches the worker only
through its commands (`apply`, `append`, `probe_now`).

The `Remediator` holds its parts: `tasks` (one repair task per endpoint), `diagnosis`,
`attempts`, `notes` (the timeline and the escalations), `listening` (what escalated endpoints
heard) and `automatic` (the automatic repairs); a person's restart is its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from supervisor.config.models import FleetConfig
from supervisor.core.clock import Clock
from supervisor.core.httpclient import HttpClient
from supervisor.execute.base import Executor
from supervisor.playbook.actions.base import Action
from supervisor.playbook.loader import Playbook
from supervisor.record.store.store import Store
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.repair import restart as asked
from supervisor.repair._automatic import Approver, AutomaticRepairs, Paused
from supervisor.repair._notes import RepairNotes
from supervisor.repair._tasks import RepairTasks
from supervisor.repair.attempt import Acted, Attempt, AttemptRunner
from supervisor.repair.diagnosis import DiagnosisService, Prober
from supervisor.repair.guards import HostLocks
from supervisor.repair.listening import Listening
from supervisor.worker import EndpointWorker, Heard


class Remediator:
    """One repair task per endpoint: automatic repairs (`automatic`) and a person's restart."""

    def __init__(
        self,
        *,
        config: FleetConfig,
        store: Store,
        executor: Executor,
        http: HttpClient,
        clock: Clock,
        playbook: Callable[[], Playbook],
        actions: Mapping[str, Action[Any]],
        prober: Prober,
        locks: HostLocks | None = None,
        dry_run: bool = False,
        approver: Approver | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.locks = locks or HostLocks()
        self.dry_run = dry_run
        self.listening = Listening()
        self.notes = RepairNotes(
            clock=clock, playbook=playbook, listening=self.listening, dry_run=dry_run
        )
        self.tasks = RepairTasks(on_failure=self.notes.note)
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
            note=self.notes.note,
            escalate=self.notes.escalate,
            verify_every=lambda: self.config.remediation.verify_every,
        )
        self.automatic = AutomaticRepairs(
            store=store,
            clock=clock,
            tasks=self.tasks,
            diagnosis=self.diagnosis,
            attempts=self.attempts,
            notes=self.notes,
            listening=self.listening,
            dry_run=dry_run,
        )
        self.automatic.approver = approver

    @property
    def config(self) -> FleetConfig:
        return self.diagnosis.config

    @config.setter
    def config(self, value: FleetConfig) -> None:
        self.diagnosis.config = value  # a config reload

    @property
    def paused(self) -> Paused:
        """Why automatic action on an endpoint is paused (the control API's pauses)."""
        return self.automatic.paused

    @paused.setter
    def paused(self, value: Paused) -> None:
        self.automatic.paused = value

    @property
    def approver(self) -> Approver | None:
        """Asked before a confirm-mode rule acts (the chat)."""
        return self.automatic.approver

    @approver.setter
    def approver(self, value: Approver | None) -> None:
        self.automatic.approver = value

    def running(self, endpoint: str) -> bool:
        """Whether a repair task (a person's restart included) runs for `endpoint` now."""
        return self.tasks.running(endpoint)

    def started(self, endpoint: str) -> bool:
        """Whether a repair task was ever started for `endpoint` (tests wait on it)."""
        return self.tasks.started(endpoint)

    async def wait(self) -> None:
        """Until every repair task has finished (tests, shutdown)."""
        await self.tasks.wait()

    async def stop(self) -> None:
        await self.tasks.stop()

    def schedule(self, worker: EndpointWorker) -> None:
        """The worker's `on_problem` hook: one repair task per endpoint at a time."""
        if self.tasks.stopped or self.tasks.running(worker.name):
            return
        self.tasks.start(worker, self.automatic.handle(worker))

    def reconsider(self, worker: EndpointWorker, heard: Heard) -> None:
        """The worker's `on_evidence` hook (see `AutomaticRepairs.reconsider`)."""
        self.automatic.reconsider(worker, heard)

    async def request_restart(self, worker: EndpointWorker, *, who: str) -> str:
        """A person asked for a restart: the answer in one line (see `restart`)."""
        return (await self.restart(worker, who=who)).text

    async def restart(self, worker: EndpointWorker, *, who: str) -> asked.RestartAnswer:
        """A person asked for a restart: answered once the units restarted (or why not). The
        verification goes on in the endpoint's repair task, like any repair's."""
        why = await asked.restart_refusal(
            worker,
            config=self.config,
            store=self.store,
            now=self.clock.now(),
            repairing=self.running(worker.name),
        )
        if why:
            await self.notes.note(
                worker, Decision(outcome=Outcome.RESTART_REFUSED, actor=who, why=why)
            )
            return asked.RestartAnswer(ok=False, text=f"not restarting {worker.name}: {why}")
        attempt = asked.attempt(worker, self.config, who=who)
        if self.dry_run:
            plan = await self.automatic.plan(worker, attempt.rule, attempt.matched, attempt.scopes)
            await self.notes.note(
                worker, Decision(outcome=Outcome.RESTART_PLAN, actor=who, plan=tuple(plan))
            )
            text = f"dry run: would restart {worker.name}: " + "; ".join(plan)
            return asked.RestartAnswer(ok=True, text=text)
        if self.tasks.stopped:
            return asked.RestartAnswer(
                ok=False, text=f"not restarting {worker.name}: it is stopping"
            )
        answered: asyncio.Future[asked.RestartAnswer] = asyncio.get_running_loop().create_future()
        task = self.tasks.start(worker, self._restart(worker, attempt, who, answered))

        def ended(_: asyncio.Task[None]) -> None:
            if not answered.done():
                answered.set_result(asked.RestartAnswer(ok=False, text=_gone(worker)))

        task.add_done_callback(ended)
        return await asyncio.shield(answered)

    async def _restart(
        self,
        worker: EndpointWorker,
        attempt: Attempt,
        who: str,
        answered: asyncio.Future[asked.RestartAnswer],
    ) -> None:
        acted = await self.attempts.act(worker, attempt)
        if not isinstance(acted, Acted):
            why = acted.why or f"it is {worker.state} now"
            await self.notes.note(
                worker, Decision(outcome=Outcome.RESTART_FAILED, actor=who, why=why)
            )
            answered.set_result(
                asked.RestartAnswer(ok=False, text=f"restart of {worker.name} failed: {why}")
            )
            return
        answered.set_result(asked.RestartAnswer(ok=True, text=asked.answer(worker)))
        every = self.config.remediation.verify_every
        await self.attempts.prove(worker, attempt, acted, every=every)
        await self.automatic.handle(worker)  # a problem seen meanwhile is this task's to take on


def _gone(worker: EndpointWorker) -> str:
    return f"restart of {worker.name} ended before its units restarted: see the timeline"

"""The repair runner: when an endpoint is confirmed down, degraded or unreachable, gather
evidence, diagnose, check the guard rails, act, verify with a real completion, and call a person
when a fix is not safe or did not work.

Every decision is recorded in the incident's timeline, the ones that did nothing included
(paused, budget spent, manual or confirm mode, dry run), so "why didn't it act?" is a query.
A repair that is not verified in time makes the endpoint `down` again and the runner starts over
from a fresh diagnosis; budgets end that loop with one escalation.

Diagnosis and plans come from the one `DiagnosisService`; every attempt (automatic, confirmed, or
a person's restart) runs through the one `AttemptRunner`. The runner reaches the worker only
through its commands (`apply`, `record`, `probe_now`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import httpx
import structlog

from supervisor.actions.base import Action
from supervisor.clock import Clock
from supervisor.config import FleetConfig
from supervisor.durations import format_duration
from supervisor.executor import Executor
from supervisor.machine import State, Trigger
from supervisor.playbook.facts import Facts
from supervisor.playbook.loader import Playbook
from supervisor.playbook.model import Mode, Rule
from supervisor.playbook.results import Diagnosis, RuleMatch
from supervisor.remediation import records
from supervisor.remediation import restart as asked
from supervisor.remediation.attempt import AUTOMATIC, Acted, Attempt, AttemptRunner
from supervisor.remediation.diagnosis import DiagnosisService, Prober
from supervisor.remediation.guards import HostLocks, check_budget
from supervisor.remediation.rulefacts import ask_text, runbook_head, scopes_of
from supervisor.remediation.steps import StepRun
from supervisor.store import Store
from supervisor.store.lease import StaleEpochError
from supervisor.timeline import Decision, Escalation, Note, Outcome, Record
from supervisor.worker import EndpointWorker
from supervisor.worker_commands import WorkerStopped

log = structlog.get_logger("supervisor.remediation")

_ACTIONABLE = frozenset({State.DOWN, State.DEGRADED, State.UNREACHABLE})


class Approver(Protocol):
    async def __call__(self, endpoint: str, rule: Rule, plan: list[str]) -> bool | None:
        """True to go ahead, False to skip, None when nobody answered in time."""


Paused = Callable[[str], str]
"""Why automatic action on an endpoint is paused ('' when it is not)."""


def _never_paused(_endpoint: str) -> str:
    return ""


class Remediator:
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
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopped = False

    @property
    def config(self) -> FleetConfig:
        return self.diagnosis.config

    @config.setter
    def config(self, value: FleetConfig) -> None:
        self.diagnosis.config = value  # a config reload

    def schedule(self, worker: EndpointWorker) -> None:
        """The worker's `on_problem` hook: one repair task per endpoint at a time."""
        if self._stopped or self.running(worker.name):
            return
        self._tasks[worker.name] = asyncio.create_task(self._guarded(worker, self.handle(worker)))

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

    async def request_restart(self, worker: EndpointWorker, *, who: str) -> str:
        """A person asked for a restart: the answer in one line (see `restart`)."""
        return (await self.restart(worker, who=who)).text

    async def restart(self, worker: EndpointWorker, *, who: str) -> asked.Answer:
        """A person asked for a restart: answered once the units restarted (or why not). The
        verification goes on in the endpoint's repair task, like any repair's."""
        why = await asked.refusal(
            worker,
            config=self.config,
            store=self.store,
            now=self.clock.now(),
            repairing=self.running(worker.name),
        )
        if why:
            await self.note(worker, Decision(outcome=Outcome.RESTART_REFUSED, actor=who, why=why))
            return asked.Answer(ok=False, text=f"not restarting {worker.name}: {why}")
        attempt = asked.attempt(worker, self.config, who=who)
        if self.dry_run:
            plan = await self.plan(worker, attempt.rule, attempt.matched, attempt.scopes)
            await self.note(
                worker, Decision(outcome=Outcome.RESTART_PLAN, actor=who, plan=tuple(plan))
            )
            text = f"dry run: would restart {worker.name}: " + "; ".join(plan)
            return asked.Answer(ok=True, text=text)
        if self._stopped:
            return asked.Answer(ok=False, text=f"not restarting {worker.name}: it is stopping")
        answered: asyncio.Future[asked.Answer] = asyncio.get_running_loop().create_future()
        job = self._restart(worker, attempt, who, answered)
        self._tasks[worker.name] = task = asyncio.create_task(self._guarded(worker, job))

        def ended(_: asyncio.Task[None]) -> None:
            if not answered.done():
                answered.set_result(asked.Answer(ok=False, text=_gone(worker)))

        task.add_done_callback(ended)
        return await asyncio.shield(answered)

    async def _restart(
        self,
        worker: EndpointWorker,
        attempt: Attempt,
        who: str,
        answered: asyncio.Future[asked.Answer],
    ) -> None:
        acted = await self.attempts.act(worker, attempt)
        if not isinstance(acted, Acted):
            why = acted.why or f"it is {worker.state} now"
            await self.note(worker, Decision(outcome=Outcome.RESTART_FAILED, actor=who, why=why))
            answered.set_result(
                asked.Answer(ok=False, text=f"restart of {worker.name} failed: {why}")
            )
            return
        answered.set_result(asked.Answer(ok=True, text=asked.answer(worker)))
        every = self.config.remediation.verify_every
        await self.attempts.prove(worker, attempt, acted, every=every)
        await self.handle(worker)  # a problem seen meanwhile is this task's to take on

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
        await worker.record(entry, incident_id=incident)

    async def handle(self, worker: EndpointWorker) -> None:
        while worker.state in _ACTIONABLE:
            paused = self.paused(worker.name)
            if paused:
                await self.note(worker, Decision(outcome=Outcome.PAUSED, why=paused))
                return
            diagnosis = await self._diagnose(worker)
            if worker.state not in _ACTIONABLE:
                moved_on = Decision(outcome=Outcome.MOVED_ON, state=worker.state.value)
                await self.note(worker, moved_on)
                return
            if diagnosis.matched is None:
                await self._escalate(worker, "no rule matched: a person must look", None)
                return
            if not await self._attempt(worker, diagnosis.matched, diagnosis):
                return

    async def _diagnose(self, worker: EndpointWorker) -> Diagnosis:
        diagnosis = await self.diagnosis.diagnose(
            worker.endpoint,
            state=worker.state.value,
            trigger=worker.last_problem,
            last_ok_at=worker.last_ok_at,
            event=worker.last_unit_signal,
        )
        now = self.clock.now()
        for run in diagnosis.evidence:
            await worker.record(records.evidence_entry(run, worker.name, now))
        await worker.record(records.diagnosis_entry(diagnosis, worker.name, now))
        log.info("diagnosed", endpoint=worker.name, verdict=diagnosis.lines()[0])
        return diagnosis

    async def _attempt(
        self, worker: EndpointWorker, match: RuleMatch, diagnosis: Diagnosis
    ) -> bool:
        """One repair by `match`; True when the runner should diagnose again."""
        rule = match.rule
        scopes = scopes_of(diagnosis, rule.id)
        matched = [(r.scope, r.facts) for r in match.scopes]
        if rule.mode is Mode.MANUAL:
            await self._escalate(worker, ask_text(rule, matched) or rule.title, rule)
            return False
        if rule.mode is Mode.CONFIRM:
            plan = await self.plan(worker, rule, matched, scopes)
            answer = await self.approver(worker.name, rule, plan) if self.approver else None
            if answer is not True:
                why = "skipped by a person" if answer is False else "nobody confirmed it"
                await self._escalate(worker, f"{rule.id} needs confirmation: {why}", rule)
                return False
        now = self.clock.now()
        settings = self.config.remediation
        spend = await check_budget(
            self.store,
            endpoint=worker.name,
            rule_id=rule.id,
            rule_attempts=rule.budget.attempts,
            rule_window=rule.budget.window,
            max_attempts=settings.max_attempts,
            window=settings.window,
            now=now,
        )
        if not spend.allowed:
            await self._escalate(worker, spend.note, rule)
            return False
        if self.dry_run:
            plan = await self.plan(worker, rule, matched, scopes)
            decision = Decision(
                outcome=Outcome.DRY_RUN_PLAN, rule=rule.id, budget=spend.note, plan=tuple(plan)
            )
            await self.note(worker, decision)
            return False
        within = rule.verify.within or worker.endpoint.startup_grace
        attempt = Attempt(
            route=AUTOMATIC,
            rule=rule,
            matched=matched,
            scopes=scopes,
            begin=f"applying {rule.id} ({spend.note}): {rule.title}",
            proven=f"{rule.id} done: a real completion must pass within {format_duration(within)}",
            within=within,
        )
        acted = await self.attempts.act(worker, attempt)
        if not isinstance(acted, Acted):
            return False
        return await self.attempts.prove(worker, attempt, acted, every=settings.verify_every)

    async def plan(
        self,
        worker: EndpointWorker,
        rule: Rule,
        matched: Sequence[tuple[Any, Facts]],
        scopes: Sequence[tuple[Any, Facts]],
    ) -> list[str]:
        """The rule's steps run against a dry-run executor: the commands it would send."""
        lines: list[str] = []

        async def record(run: StepRun) -> None:
            entry = records.step_entry(run, worker.name, self.clock.now(), dry_run=True)
            await worker.record(entry)
            commands = [c.command for c in run.outcome.commands if c.dry_run]
            lines.append(
                f"{run.action} on {run.target}: " + (" && ".join(commands) or run.outcome.summary)
            )

        await self.diagnosis.dry_run(
            worker.endpoint, rule.actions, matched=matched, scopes=scopes, on_run=record
        )
        return lines

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
        await worker.apply(Trigger.ESCALATE, f"a person is needed: {why}", data=data)
        log.warning("escalated", endpoint=worker.name, why=why)


def _gone(worker: EndpointWorker) -> str:
    return f"restart of {worker.name} ended before its units restarted: see the timeline"

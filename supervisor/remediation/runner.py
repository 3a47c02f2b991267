"""The repair runner: when an endpoint is confirmed down, degraded or unreachable, gather
evidence, diagnose, check the guard rails, act, verify with a real completion, and call a person
when a fix is not safe or did not work.

Every decision is recorded in the incident's timeline, the ones that did nothing included
(paused, budget spent, manual or confirm mode, dry run), so "why didn't it act?" is a query.
A repair that is not verified in time makes the endpoint `down` again and the runner starts over
from a fresh diagnosis; budgets end that loop with one escalation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import httpx
import structlog

from supervisor.actions.base import Action
from supervisor.clock import Clock
from supervisor.config import FleetConfig
from supervisor.durations import format_duration
from supervisor.events import Tier
from supervisor.executor import Executor
from supervisor.executor.dryrun import DryRunExecutor
from supervisor.machine import State, Trigger
from supervisor.playbook.diagnose import diagnose
from supervisor.playbook.facts import Facts
from supervisor.playbook.loader import Playbook
from supervisor.playbook.model import Mode, Rule
from supervisor.playbook.results import Diagnosis, RuleMatch
from supervisor.remediation import records
from supervisor.remediation.guards import HostLocks, check_budget
from supervisor.remediation.rulefacts import ask_text, runbook_head, scopes_of
from supervisor.remediation.steps import StepEnv, StepRun, run_steps
from supervisor.remediation.verify import answers_degraded, verify
from supervisor.store import Store
from supervisor.timeline import (
    AttemptFinished,
    AttemptStarted,
    Decision,
    Escalation,
    Note,
    Outcome,
    Record,
    Verification,
)
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.remediation")

_ACTIONABLE = frozenset({State.DOWN, State.DEGRADED, State.UNREACHABLE})


class Approver(Protocol):
    async def __call__(self, endpoint: str, rule: Rule, plan: list[str]) -> bool | None:
        """True to go ahead, False to skip, None when nobody answered in time."""


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
        locks: HostLocks | None = None,
        dry_run: bool = False,
        approver: Approver | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.executor = executor
        self._http = http
        self.clock = clock
        self._playbook = playbook
        self._actions = actions
        self.locks = locks or HostLocks()
        self.dry_run = dry_run
        self.approver = approver
        self.paused = False
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopped = False

    def schedule(self, worker: EndpointWorker) -> None:
        """The worker's `on_problem` hook: one repair task per endpoint at a time."""
        if self._stopped:
            return
        running = self._tasks.get(worker.name)
        if running is not None and not running.done():
            return
        self._tasks[worker.name] = asyncio.create_task(self._guarded(worker))

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
        """A person asked for a restart (chat `/restart`): see `remediation.manual`."""
        from supervisor.remediation.manual import request_restart

        return await request_restart(self, worker, who=who)

    async def _guarded(self, worker: EndpointWorker) -> None:
        try:
            await self.handle(worker)
        except asyncio.CancelledError:
            raise
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
            if self.paused:
                await self.note(worker, Decision(outcome=Outcome.PAUSED))
                return
            diagnosis = await self._diagnose(worker)
            if worker.state not in _ACTIONABLE:
                await self.note(
                    worker, Decision(outcome=Outcome.MOVED_ON, state=worker.state.value)
                )
                return
            if diagnosis.matched is None:
                await self._escalate(worker, "no rule matched: a person must look", None)
                return
            if not await self._attempt(worker, diagnosis.matched, diagnosis):
                return

    async def _diagnose(self, worker: EndpointWorker) -> Diagnosis:
        state = worker.state
        diagnosis = await diagnose(
            worker.endpoint,
            config=self.config,
            state=state.value,
            trigger=worker.last_problem,
            playbook=self._playbook(),
            executor=self.executor,
            http=self._http,
            timeout=self.config.remediation.evidence_timeout,
            last_ok_at=worker.last_ok_at,
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
        return await self._repair(worker, rule, matched, scopes, spend.note)

    async def _repair(
        self,
        worker: EndpointWorker,
        rule: Rule,
        matched: list[tuple[Any, Facts]],
        scopes: list[tuple[Any, Facts]],
        budget_note: str,
    ) -> bool:
        hosts = worker.endpoint.hosts()
        busy = self.locks.busy(hosts)
        if busy:
            await self.note(worker, Decision(outcome=Outcome.HOSTS_BUSY, holders=dict(busy)))
        async with self.locks.hold(hosts, worker.name):
            change = await worker.apply(
                Trigger.REMEDIATE,
                f"applying {rule.id} ({budget_note}): {rule.title}",
                data={"rule": rule.id},
            )
            if change is None:
                return False
            incident = worker.incident_id
            attempt = await self.store.start_attempt(
                endpoint=worker.name,
                rule_id=rule.id,
                incident_id=worker.incident_id,
                at=self.clock.now(),
            )
            await self.note(worker, AttemptStarted(attempt=attempt, rule=rule.id))

            async def record(run: StepRun) -> None:
                entry = records.step_entry(run, worker.name, self.clock.now(), dry_run=False)
                await worker.record(entry)

            result = await run_steps(
                rule.actions,
                env=self.env(worker, self.executor, dry_run=False),
                matched=matched,
                scopes=scopes,
                on_run=record,
            )
            if not result.ok:
                failed = f"failed: {result.stopped}"
                await self.store.finish_attempt(attempt, at=self.clock.now(), outcome=failed)
                await self.note(
                    worker, AttemptFinished(attempt=attempt, rule=rule.id, outcome=failed)
                )
                await self._escalate(worker, result.needs_person or result.stopped, rule)
                return False
            within = rule.verify.within or worker.endpoint.startup_grace
            await worker.apply(
                Trigger.VERIFY,
                f"{rule.id} done: a real completion must pass within {format_duration(within)}",
                data={"rule": rule.id},
            )
        began = self.clock.now()
        verified = await verify(worker, within, self.config.remediation.verify_every, self.clock)
        outcome = "healed" if verified else f"not verified within {format_duration(within)}"
        await self.store.finish_attempt(attempt, at=self.clock.now(), outcome=outcome)
        finished = AttemptFinished(attempt=attempt, rule=rule.id, outcome=outcome)
        await self.note(worker, finished, incident)
        figures = (worker.last_ttft_s, worker.last_tok_s) if verified else (None, None)
        check = Verification(
            rule=rule.id,
            ok=verified,
            within_s=within.total_seconds(),
            ttft_s=figures[0],
            tok_s=figures[1],
        )
        await self.note(worker, check, incident)
        if verified:
            return False
        degraded = answers_degraded(worker, began)
        if degraded:  # it serves again, but not well: diagnosed afresh as degraded, not down
            note = f"{rule.id}: {outcome}; it answers, degraded: {degraded}"
            change = await worker.apply(Trigger.DEGRADE, note)
        else:
            change = await worker.apply(Trigger.VERIFY_FAILED, f"{rule.id}: {outcome}")
        return change is not None

    def env(self, worker: EndpointWorker, executor: Executor, *, dry_run: bool) -> StepEnv:
        return StepEnv(
            endpoint=worker.endpoint,
            hosts=self.config.hosts,
            executor=executor,
            timeout=self.config.remediation.command_timeout,
            dry_run=dry_run,
            clock=self.clock,
            probe=lambda: worker.probe_now(Tier.DEEP),
            actions=self._actions,
        )

    async def plan(
        self,
        worker: EndpointWorker,
        rule: Rule,
        matched: list[tuple[Any, Facts]],
        scopes: list[tuple[Any, Facts]],
    ) -> list[str]:
        """The rule's steps run against a dry-run executor: the commands it would send."""
        planner = DryRunExecutor(self.executor)
        lines: list[str] = []

        async def record(run: StepRun) -> None:
            entry = records.step_entry(run, worker.name, self.clock.now(), dry_run=True)
            await worker.record(entry)
            commands = [c.command for c in run.outcome.commands if c.dry_run]
            lines.append(
                f"{run.action} on {run.target}: " + (" && ".join(commands) or run.outcome.summary)
            )

        await run_steps(
            rule.actions,
            env=self.env(worker, planner, dry_run=True),
            matched=matched,
            scopes=scopes,
            on_run=record,
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

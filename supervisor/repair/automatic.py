"""Automatic repair of a problem: diagnose, check the pause, the mode (manual, confirm) and the
budgets, plan in a dry run, or act and verify through the attempt runner; again while the
endpoint stays down."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from supervisor.core.durations import format_duration
from supervisor.judge.machine import State
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import Mode, Rule
from supervisor.playbook.results import Diagnosis, RuleMatch
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.timeline import Decision, Outcome
from supervisor.repair import records
from supervisor.repair.attempt import AUTOMATIC, Acted, Attempt
from supervisor.repair.guards import check_budget
from supervisor.repair.rulefacts import ask_text, scopes_of
from supervisor.repair.steps import StepRun
from supervisor.repair.tasks import RepairTasks, log
from supervisor.worker.endpoint import EndpointWorker

_ACTIONABLE = frozenset({State.DOWN, State.DEGRADED, State.UNREACHABLE})


class AutomaticRepairs(RepairTasks):
    async def handle(self, worker: EndpointWorker) -> None:
        while worker.state in _ACTIONABLE:
            if await self._wait_for_the_store(worker):
                continue
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

    async def _wait_for_the_store(self, worker: EndpointWorker) -> bool:
        """Repairs wait while the store cannot be written (what they do could not be recorded,
        and on PostgreSQL the fence cannot be asked): True after a wait, to judge afresh."""
        store = self.store
        if not isinstance(store, ResilientStore) or not store.outage:
            return False
        log.warning("repair waits for the store", endpoint=worker.name, why=store.problem())
        while worker.state in _ACTIONABLE and not await store.writable(within=1.0):
            pass
        return True

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

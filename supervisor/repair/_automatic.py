"""Automatic repair of a problem: diagnose, check the pause, the mode (manual, confirm) and the
budgets, plan in a dry run, or act and verify through the attempt runner; again while the
endpoint stays down.

Escalated is not deaf: decisive new evidence heard while escalated (`supervisor.repair.listening`
says which, and bounds it) is diagnosed again; when another rule than the one escalated for now
matches, not manual, with budget left, the endpoint is `down` again (`reconsider`, the
transition and the chat say why) and that rule repairs it. The same rule, none, a manual rule, a
spent budget, a pause or a person's ack: it stays escalated, and the timeline says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from supervisor.config.models import FleetConfig
from supervisor.core.clock import Clock
from supervisor.core.durations import format_duration
from supervisor.judge.machine import State, Trigger
from supervisor.playbook.facts import Facts
from supervisor.playbook.matching import Latest
from supervisor.playbook.model import Mode, Rule
from supervisor.playbook.results import DiagnosisResult, RuleMatch
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.store import Store
from supervisor.record.timeline.control import Acked
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.repair import records
from supervisor.repair._notes import RepairNotes
from supervisor.repair._tasks import RepairTasks, log
from supervisor.repair.attempt import AUTOMATIC, Acted, Attempt, AttemptRunner
from supervisor.repair.diagnosis import DiagnosisService
from supervisor.repair.guards import Spend, check_budget
from supervisor.repair.listening import Escalated, Listening
from supervisor.repair.rulefacts import ask_text, matched_scopes
from supervisor.repair.steps import StepRun
from supervisor.worker import EndpointWorker, Heard

_ACTIONABLE = frozenset({State.DOWN, State.DEGRADED, State.UNREACHABLE})
#: states whose units can be asked about a restart under way (not a host that does not answer)
_SETTLES = frozenset({State.DOWN, State.DEGRADED})


class Approver(Protocol):
    async def __call__(self, endpoint: str, rule: Rule, plan: list[str]) -> bool | None:
        """True to go ahead, False to skip, None when nobody answered in time."""


Paused = Callable[[str], str]
"""Why automatic action on an endpoint is paused ('' when it is not)."""


def _never_paused(_endpoint: str) -> str:
    return ""


class AutomaticRepairs:
    """Automatic repairs of the endpoints, run as `tasks`; diagnosed by `diagnosis`, acted and
    verified by `attempts`, written and escalated by `notes`."""

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        tasks: RepairTasks,
        diagnosis: DiagnosisService,
        attempts: AttemptRunner,
        notes: RepairNotes,
        listening: Listening,
        dry_run: bool,
    ) -> None:
        self.store = store
        self.clock = clock
        self.tasks = tasks
        self.diagnosis = diagnosis
        self.attempts = attempts
        self.notes = notes
        self.listening = listening
        self.dry_run = dry_run
        #: asked before a confirm-mode rule acts (the chat); None: nobody to ask
        self.approver: Approver | None = None
        #: whether automatic action is paused (the control API's pauses, persisted)
        self.paused: Paused = _never_paused

    @property
    def config(self) -> FleetConfig:
        return self.diagnosis.config

    async def handle(self, worker: EndpointWorker) -> None:
        while worker.state in _ACTIONABLE:
            if await self._wait_for_the_store(worker):
                continue
            paused = self.paused(worker.name)
            if paused:
                await self.notes.note(worker, Decision(outcome=Outcome.PAUSED, why=paused))
                return
            diagnosis = await self._diagnose(worker)
            if worker.state not in _ACTIONABLE:
                moved_on = Decision(outcome=Outcome.MOVED_ON, state=worker.state.value)
                await self.notes.note(worker, moved_on)
                return
            if diagnosis.matched is None:
                await self.notes.escalate(worker, "no rule matched: a person must look", None)
                return
            if not await self._attempt(worker, diagnosis.matched, diagnosis):
                return

    def reconsider(self, worker: EndpointWorker, heard: Heard) -> None:
        """The worker's `on_evidence` hook: escalated, it heard `heard`; when that is decisive
        (new in this incident, looks left) and no repair task runs, diagnose again."""
        tasks = self.tasks
        if tasks.stopped or tasks.running(worker.name) or worker.state is not State.ESCALATED:
            return
        memory = self.listening.decisive(worker.record, heard)
        if memory is None:
            return
        tasks.start(worker, self._look_again(worker, heard, memory))

    async def _look_again(self, worker: EndpointWorker, heard: Heard, memory: Escalated) -> None:
        old = memory.rule or "no rule"
        if await self._acked(worker):
            why = f"new evidence: {heard.words}; a person acknowledged it: not looking again"
            await self.notes.note(worker, Decision(outcome=Outcome.STILL_ESCALATED, why=why))
            return
        paused = self.paused(worker.name)
        if paused:
            await self.notes.note(worker, Decision(outcome=Outcome.PAUSED, why=paused))
            return
        diagnosis = await self._diagnose(worker, as_state=memory.state)
        if worker.state is not State.ESCALATED:
            return  # it moved on meanwhile (healthy again, silenced)
        match = diagnosis.matched
        why = ""
        if match is None:
            why = "no rule matches"
        elif match.rule.id == memory.rule:
            why = f"{old} matches again"
        elif match.rule.mode is Mode.MANUAL:
            why = f"{match.rule.id} matches: a person's job (manual)"
        spend: Spend | None = None
        if match is not None and not why:
            spend = await self._budget(worker, match.rule)
            if not spend.allowed:
                why = f"{match.rule.id} matches; {spend.note}"
        if match is None or spend is None or why:
            still = Decision(
                outcome=Outcome.STILL_ESCALATED,
                rule=match.rule.id if match else None,
                why=f"new evidence: {heard.words}; {why}",
            )
            await self.notes.note(worker, still)
            return
        rule = match.rule
        note = f"new evidence: {heard.words}; {rule.id} now matches (was escalated: {old})"
        if await worker.apply(Trigger.RECONSIDER, note, data={"rule": rule.id}) is None:
            return
        if await self._attempt(worker, match, diagnosis):
            await self.handle(worker)

    async def _acked(self, worker: EndpointWorker) -> bool:
        """A person acknowledged the incident since it was last escalated."""
        if worker.record.incident_id is None:
            return False
        rows = await self.store.timeline(worker.record.incident_id)
        for row in reversed(rows):
            record = row.record
            if isinstance(record, Acked):
                return True
            if getattr(record, "trigger", None) == Trigger.ESCALATE.value:
                return False
        return False

    async def _budget(self, worker: EndpointWorker, rule: Rule) -> Spend:
        settings = self.config.remediation
        return await check_budget(
            self.store,
            endpoint=worker.name,
            rule_id=rule.id,
            rule_attempts=rule.budget.attempts,
            rule_window=rule.budget.window,
            max_attempts=settings.max_attempts,
            window=settings.window,
            now=self.clock.now(),
        )

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

    async def _diagnose(
        self, worker: EndpointWorker, as_state: State | None = None
    ) -> DiagnosisResult:
        """Evidence and the rule that matches (for `worker` in its state, or `as_state`); a
        restart systemd or launchd is about to make is waited for first, and the latest failure
        and death are read after it."""
        state = as_state or worker.state
        diagnosis = await self.diagnosis.diagnose(
            worker.endpoint,
            state=state.value,
            trigger=worker.record.last_problem,
            last_ok_at=worker.record.last_ok_at,
            event=worker.record.last_unit_signal,
            settle=state in _SETTLES,
            latest=lambda: Latest(
                trigger=worker.record.last_problem, event=worker.record.last_unit_signal
            ),
        )
        now = self.clock.now()
        for restart in diagnosis.restarts:
            await worker.append(records.settled_entry(restart, worker.name, now))
        for run in diagnosis.evidence:
            await worker.append(records.evidence_entry(run, worker.name, now))
        await worker.append(records.diagnosis_entry(diagnosis, worker.name, now))
        log.info("diagnosed", endpoint=worker.name, verdict=diagnosis.lines()[0])
        return diagnosis

    async def _attempt(
        self, worker: EndpointWorker, match: RuleMatch, diagnosis: DiagnosisResult
    ) -> bool:
        """One repair by `match`; True when the runner should diagnose again."""
        rule = match.rule
        scopes = matched_scopes(diagnosis, rule.id)
        matched = [(r.scope, r.facts) for r in match.scopes]
        if rule.mode is Mode.MANUAL:
            await self.notes.escalate(worker, ask_text(rule, matched) or rule.title, rule)
            return False
        if rule.mode is Mode.CONFIRM:
            plan = await self.plan(worker, rule, matched, scopes)
            answer = await self.approver(worker.name, rule, plan) if self.approver else None
            if answer is not True:
                why = "skipped by a person" if answer is False else "nobody confirmed it"
                await self.notes.escalate(worker, f"{rule.id} needs confirmation: {why}", rule)
                return False
        settings = self.config.remediation
        spend = await self._budget(worker, rule)
        if not spend.allowed:
            await self.notes.escalate(worker, spend.note, rule)
            return False
        if self.dry_run:
            plan = await self.plan(worker, rule, matched, scopes)
            decision = Decision(
                outcome=Outcome.DRY_RUN_PLAN, rule=rule.id, budget=spend.note, plan=tuple(plan)
            )
            await self.notes.note(worker, decision)
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
            await worker.append(entry)
            commands = [c.command for c in run.outcome.commands if c.dry_run]
            lines.append(
                f"{run.action} on {run.target}: " + (" && ".join(commands) or run.outcome.summary)
            )

        await self.diagnosis.dry_run(
            worker.endpoint, rule.actions, matched=matched, scopes=scopes, on_run=record
        )
        return lines

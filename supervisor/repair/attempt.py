"""The one attempt runner: hosts' locks, the attempt row, the rule's steps (each recorded), the
verification by a real completion, and what follows a failure. Automatic repairs, repairs a
person confirmed (Apply) and a person's `/restart` all run through here; they differ only in how
the attempt enters and leaves the state machine (`Route`).

It runs outside the endpoint's worker and reaches it only through the worker's commands, so
waiting for the verification never blocks the worker's queue.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from supervisor.core.clock import Clock
from supervisor.core.durations import format_duration
from supervisor.core.events import Tier
from supervisor.execute.base import Executor
from supervisor.judge.machine import State, Trigger
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import Rule
from supervisor.record.store.store import Store
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.record.timeline.repair import (
    AttemptFinished,
    AttemptStarted,
    StepStarted,
    Verification,
)
from supervisor.repair import records
from supervisor.repair.diagnosis import DiagnosisService
from supervisor.repair.guards import HostLocks
from supervisor.repair.restore import read_units, restore
from supervisor.repair.steps import StepRun, run_steps
from supervisor.repair.verify import answers_degraded, verify
from supervisor.worker import EndpointWorker

Scopes = Sequence[tuple[Any, Facts]]
Note = Callable[[EndpointWorker, Record, "int | None"], Awaitable[None]]
Escalate = Callable[[EndpointWorker, str, "Rule | None"], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class Route:
    """How one kind of attempt enters and leaves the state machine."""

    #: fired before the steps (None: the endpoint keeps its state while they run)
    enter: Trigger | None
    #: fired after the steps; the verification waits while the endpoint is in `waiting`
    proven_by: Trigger
    waiting: State
    #: a step that failed calls a person (a repair), or is answered to the person who asked
    escalate_failed_steps: bool


AUTOMATIC = Route(
    enter=Trigger.REMEDIATE,
    proven_by=Trigger.VERIFY,
    waiting=State.VERIFYING,
    escalate_failed_steps=True,
)
"""A rule's repair (automatic, or confirmed by a person): remediating, then verifying."""

RESTART = Route(
    enter=None, proven_by=Trigger.RESTARTED, waiting=State.STARTING, escalate_failed_steps=False
)
"""A person's restart: the units restart, then a new startup grace that a real completion ends."""


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One attempt to run."""

    route: Route
    rule: Rule
    matched: Scopes
    scopes: Scopes
    begin: str  #: the note of the `enter` transition
    proven: str  #: the note of the `proven_by` transition
    within: timedelta  #: how long the verification may take
    actor: str | None = None  #: the person who asked (a restart); None for a rule's repair

    @property
    def data(self) -> dict[str, str]:
        """What the attempt's transitions carry: the person who asked, else the rule."""
        return {"who": self.actor} if self.actor else {"rule": self.rule.id}


@dataclass(frozen=True, kw_only=True)
class Acted:
    """The steps ran: the attempt now waits for its verification (`prove`)."""

    attempt_id: int
    incident: int | None


@dataclass(frozen=True, kw_only=True)
class Stopped:
    """The attempt ended before its verification; `why` is '' when it did not start at all."""

    why: str


class AttemptRunner:
    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        locks: HostLocks,
        service: DiagnosisService,
        executor: Executor,
        note: Note,
        escalate: Escalate,
        verify_every: Callable[[], timedelta],
    ) -> None:
        self.verify_every = verify_every  #: the config's `remediation.verify_every`, now
        self.store = store
        self.clock = clock
        self.locks = locks
        self.service = service
        self.executor = executor
        self._note = note
        self._escalate = escalate

    async def act(self, worker: EndpointWorker, attempt: Attempt) -> Acted | Stopped:
        """Locks, the `enter` transition, the attempt row, the steps, the `proven_by`
        transition."""
        rule, route = attempt.rule, attempt.route
        hosts = worker.endpoint.hosts()
        busy = self.locks.busy(hosts)
        if busy:
            await self._note(worker, Decision(outcome=Outcome.HOSTS_BUSY, holders=busy), None)
        async with self.locks.hold(hosts, worker.name):
            entered = route.enter is None or await worker.apply(
                route.enter, attempt.begin, data=attempt.data
            )
            if not entered:
                return Stopped(why="")
            incident = worker.record.incident_id
            attempt_id = await self.store.start_attempt(
                endpoint=worker.name, rule_id=rule.id, incident_id=incident, at=self.clock.now()
            )
            started = AttemptStarted(attempt=attempt_id, rule=rule.id, actor=attempt.actor)
            await self._note(worker, started, incident)

            async def record(run: StepRun) -> None:
                entry = records.step_entry(run, worker.name, self.clock.now(), dry_run=False)
                await worker.append(entry)

            async def starting(index: int, action: str, target: str) -> None:
                began = StepStarted(index=index, action=action, target=target)
                await worker.append(records.entry(began, worker.name, self.clock.now()))

            env = self.service.env(
                worker.endpoint,
                self.executor,
                dry_run=False,
                probe=lambda: worker.probe_now(Tier.DEEP),
            )
            found = await read_units(env)  # a failed step must not leave any less alive
            result = await run_steps(
                rule.actions,
                env=env,
                matched=attempt.matched,
                scopes=attempt.scopes,
                on_run=record,
                on_start=starting,
            )
            if not result.ok:
                left = await restore(
                    env,
                    found,
                    attempt=attempt_id,
                    rule=rule.id,
                    within=attempt.within,
                    every=self.verify_every(),
                )
                if left.units:
                    await self._note(worker, left, incident)
                outcome = f"failed: {result.stopped}"
                await self.store.finish_attempt(attempt_id, at=self.clock.now(), outcome=outcome)
                finished = AttemptFinished(attempt=attempt_id, rule=rule.id, outcome=outcome)
                await self._note(worker, finished, incident)
                if route.escalate_failed_steps:
                    why = result.needs_person or result.stopped
                    why = f"{why}; {left.restored}" if left.restored else why
                    await self._escalate(worker, why, rule)
                return Stopped(why=result.stopped)
            await worker.apply(route.proven_by, attempt.proven, data=attempt.data)
        return Acted(attempt_id=attempt_id, incident=incident)

    async def prove(
        self, worker: EndpointWorker, attempt: Attempt, acted: Acted, *, every: timedelta
    ) -> bool:
        """Wait for a real completion; record the verdict. True when the runner should diagnose
        again (a repair not verified moved the endpoint to down or degraded)."""
        rule, within = attempt.rule, attempt.within
        began = self.clock.now()
        waiting = attempt.route.waiting
        verified = await verify(worker, within, every, self.clock, waiting=waiting)
        outcome = "healed" if verified else f"not verified within {format_duration(within)}"
        await self.store.finish_attempt(acted.attempt_id, at=self.clock.now(), outcome=outcome)
        incident = acted.incident
        finished = AttemptFinished(attempt=acted.attempt_id, rule=rule.id, outcome=outcome)
        await self._note(worker, finished, incident)
        figures = (
            (worker.record.last_ttft_s, worker.record.last_tok_s) if verified else (None, None)
        )
        check = Verification(
            rule=rule.id,
            ok=verified,
            within_s=within.total_seconds(),
            ttft_s=figures[0],
            tok_s=figures[1],
        )
        await self._note(worker, check, incident)
        if verified:
            return False
        if attempt.route.waiting is not State.VERIFYING:
            return False  # a restart's startup grace ends by itself; the probes judge after it
        degraded = answers_degraded(worker, began)
        if degraded:  # it serves again, but not well: diagnosed afresh as degraded, not down
            note = f"{rule.id}: {outcome}; it answers, degraded: {degraded}"
            change = await worker.apply(Trigger.DEGRADE, note)
        else:
            change = await worker.apply(Trigger.VERIFY_FAILED, f"{rule.id}: {outcome}")
        return change is not None

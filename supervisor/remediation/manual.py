"""A restart asked for by a person (chat `/restart NAME`): the same guarded path as automatic
repairs. Refused inside the startup grace, in maintenance, while a repair runs, without units or
when the endpoint's repair budget is spent; otherwise the units restart in order under the hosts'
locks, every step is recorded, and the endpoint starts a new startup grace."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from supervisor.durations import format_duration
from supervisor.machine import State, Trigger
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import All, Mode, Rule, Severity, Step
from supervisor.playbook.scopes import scopes_of
from supervisor.remediation import records
from supervisor.remediation.guards import check_budget
from supervisor.remediation.steps import StepRun, run_steps
from supervisor.timeline import AttemptFinished, AttemptStarted, Decision, Outcome
from supervisor.worker import EndpointWorker

if TYPE_CHECKING:
    from supervisor.remediation.runner import Remediator

MANUAL_RESTART = "manual-restart"


def _manual_rule(steps: tuple[Step, ...]) -> Rule:
    return Rule(
        id=MANUAL_RESTART,
        title="restart asked for by a person",
        severity=Severity.INFO,
        when=All(all=()),
        actions=steps,
        mode=Mode.AUTO,
    )


def _unit_scopes(runner: Remediator, worker: EndpointWorker) -> list[tuple[Any, Facts]]:
    return [(scope, Facts()) for scope in scopes_of(worker.endpoint, runner.config)]


async def request_restart(runner: Remediator, worker: EndpointWorker, *, who: str) -> str:
    """A person asked to restart the endpoint: the guarded path, with its answer in one line.

    Refused inside the startup grace, in maintenance, while a repair runs, without units or
    when the endpoint's repair budget is spent; otherwise the units restart in order under
    the hosts' locks and the endpoint starts a new startup grace."""
    state = worker.state
    refusal = {
        State.STARTING: "it is inside its startup grace: let it load",
        State.MAINTENANCE: "it is in maintenance: /unsilence it first",
        State.REMEDIATING: "a repair is running",
        State.VERIFYING: "a repair is being verified",
    }.get(state)
    if refusal is None and not worker.endpoint.units:
        refusal = "it has no units to restart"
    if refusal is None:
        settings = runner.config.remediation
        spend = await check_budget(
            runner.store,
            endpoint=worker.name,
            rule_id=MANUAL_RESTART,
            rule_attempts=settings.max_attempts,
            rule_window=settings.window,
            max_attempts=settings.max_attempts,
            window=settings.window,
            now=runner.clock.now(),
        )
        refusal = None if spend.allowed else spend.note
    if refusal is not None:
        refused = Decision(outcome=Outcome.RESTART_REFUSED, actor=who, why=refusal)
        await runner.note(worker, refused)
        return f"not restarting {worker.name}: {refusal}"
    steps = (Step(action="restart_units"),)
    if runner.dry_run:
        plan = await runner.plan(worker, _manual_rule(steps), [], _unit_scopes(runner, worker))
        await runner.note(
            worker, Decision(outcome=Outcome.RESTART_PLAN, actor=who, plan=tuple(plan))
        )
        return f"dry run: would restart {worker.name}: " + "; ".join(plan)
    async with runner.locks.hold(worker.endpoint.hosts(), worker.name):
        attempt = await runner.store.start_attempt(
            endpoint=worker.name,
            rule_id=MANUAL_RESTART,
            incident_id=worker.incident_id,
            at=runner.clock.now(),
        )
        await runner.note(worker, AttemptStarted(attempt=attempt, rule=MANUAL_RESTART, actor=who))

        async def record(run: StepRun) -> None:
            await worker.record(
                records.step_entry(run, worker.name, runner.clock.now(), dry_run=False)
            )

        result = await run_steps(
            steps,
            env=runner.env(worker, runner.executor, dry_run=False),
            matched=[],
            scopes=_unit_scopes(runner, worker),
            on_run=record,
        )
        outcome = "restarted" if result.ok else f"failed: {result.stopped}"
        await runner.store.finish_attempt(attempt, at=runner.clock.now(), outcome=outcome)
        finished = AttemptFinished(attempt=attempt, rule=MANUAL_RESTART, outcome=outcome)
        await runner.note(worker, finished)
    if not result.ok:
        failed = Decision(outcome=Outcome.RESTART_FAILED, actor=who, why=result.stopped)
        await runner.note(worker, failed)
        return f"restart of {worker.name} failed: {result.stopped}"
    await worker.apply(Trigger.RESTARTED, f"restarted by {who}", data={"actor": who})
    grace = format_duration(worker.endpoint.startup_grace)
    return f"restarted {worker.name}: startup grace {grace}"

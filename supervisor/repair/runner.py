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

from supervisor.record.timeline import Decision, Outcome
from supervisor.repair import restart as asked
from supervisor.repair.attempt import Acted, Attempt
from supervisor.repair.automatic import AutomaticRepairs
from supervisor.repair.tasks import Approver, Paused
from supervisor.worker import EndpointWorker

__all__ = ["Approver", "Paused", "Remediator"]


class Remediator(AutomaticRepairs):
    """One repair task per endpoint: automatic repairs (`repair`) and a person's restart; the
    tasks and what they share are `tasks`'."""

    def schedule(self, worker: EndpointWorker) -> None:
        """The worker's `on_problem` hook: one repair task per endpoint at a time."""
        if self._stopped or self.running(worker.name):
            return
        self._tasks[worker.name] = asyncio.create_task(self._guarded(worker, self.handle(worker)))

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


def _gone(worker: EndpointWorker) -> str:
    return f"restart of {worker.name} ended before its units restarted: see the timeline"

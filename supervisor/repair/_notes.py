"""How a repair writes to the timeline and calls a person: `note` appends a record to the
endpoint's incident through its worker; `escalate` records why a person is needed, remembers
what the endpoint knew (`Listening`), and fires the escalation."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from supervisor.core.clock import Clock
from supervisor.judge.machine import Trigger
from supervisor.playbook.loader import Playbook
from supervisor.playbook.model import Rule
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.repair import Escalation
from supervisor.repair import records
from supervisor.repair.listening import Listening
from supervisor.repair.rulefacts import runbook_head
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.remediation")


class RepairNotes:
    """The timeline writes and the escalations of the repairs (a dry run escalates on paper)."""

    def __init__(
        self,
        *,
        clock: Clock,
        playbook: Callable[[], Playbook],
        listening: Listening,
        dry_run: bool,
    ) -> None:
        self._clock = clock
        self._playbook = playbook
        self._listening = listening
        self._dry_run = dry_run

    async def note(
        self, worker: EndpointWorker, record: Record, incident: int | None = None
    ) -> None:
        entry = records.entry(record, worker.name, self._clock.now())
        await worker.append(entry, incident_id=incident)

    async def escalate(self, worker: EndpointWorker, why: str, rule: Rule | None) -> None:
        head = runbook_head(self._playbook(), rule)
        escalation = Escalation(
            why=why,
            rule=rule.id if rule else None,
            runbook=rule.runbook if rule and rule.runbook else None,
            dry_run=self._dry_run,
        )
        await self.note(worker, escalation)
        if self._dry_run:
            return
        data = {"why": why, "rule": rule.id if rule else "", "runbook": head}
        was = worker.state
        self._listening.escalated(worker.record, rule.id if rule else None, was=was)
        await worker.apply(Trigger.ESCALATE, f"a person is needed: {why}", data=data)
        log.warning("escalated", endpoint=worker.name, why=why)

"""What every control action shares: the daemon's workers, config and clock, the control
tables, how a target is named and selected, and how each answer (refusals too) is journaled."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime

import structlog

from supervisor.config import FleetConfig
from supervisor.control.matchers import select
from supervisor.control.model import FLEET, Actor, Answer, Code, JournalRow, PauseRow
from supervisor.control.tables import ControlStore
from supervisor.core.clock import Clock
from supervisor.record.store import Store
from supervisor.repair import Remediator
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.control")

AckHook = Callable[[int, Actor], Awaitable[None]]


class ControlCommon:
    """The state and helpers of `ControlApi`; its actions are in `silencing`, `pausing` and
    `api`."""

    def __init__(
        self,
        *,
        store: Store,
        workers: Mapping[str, EndpointWorker],
        config: Callable[[], FleetConfig],
        remediator: Remediator | None,
        clock: Clock,
    ) -> None:
        self.store = store
        self.tables = ControlStore(store)
        self._workers = workers  #: the daemon's own mapping: a config reload changes it
        self._config = config
        self._remediator = remediator
        self._clock = clock
        self._pauses: dict[str, PauseRow] = {}
        #: called after an ack (the notifier stops its reminders)
        self.on_ack: list[AckHook] = []

    async def journal(
        self, subject: str | None = None, *, latest: int | None = None
    ) -> list[JournalRow]:
        return await self.tables.journal(subject, latest=latest)

    async def check_endpoint(
        self, action: str, endpoint: str, *, actor: Actor, why: str = ""
    ) -> Answer | None:
        """None when `endpoint` is known, else the (recorded) refusal."""
        if endpoint in self._workers:
            return None
        text = self._unknown(endpoint)
        return await self._refused(action, endpoint, actor, why, Code.NOT_FOUND, text)

    async def refuse(self, action: str, target: str, *, actor: Actor, why: str) -> Answer:
        """A transport refused the action before it reached the API (a stranger on Telegram):
        recorded like every refusal."""
        return await self._refused(action, target, actor, "", Code.REFUSED, why)

    # -- helpers ---------------------------------------------------------------------------

    def _hosts(self) -> dict[str, Sequence[str]]:
        return {name: w.endpoint.hosts() for name, w in self._workers.items()}

    def _select(self, target: str) -> tuple[str, ...]:
        return select(target, self._hosts(), list(self._config().hosts))

    def _in(self, scope: str) -> tuple[str, ...]:
        return tuple(self._workers) if scope == FLEET else (scope,)

    def _unknown(self, endpoint: str) -> str:
        known = ", ".join(self._workers) or "none"
        return f"no endpoint {endpoint!r} (endpoints: {known})"

    async def _refused(
        self,
        action: str,
        target: str,
        actor: Actor,
        why: str,
        code: Code,
        text: str,
        subjects: Sequence[str] = (),
        *,
        until: datetime | None = None,
    ) -> Answer:
        answer = Answer(code=code, text=text, subjects=tuple(subjects))
        log.info("control refused", action=action, target=target, by=str(actor), answer=text)
        return await self._journal(action, target, actor, why, answer, until=until)

    async def _journal(
        self,
        action: str,
        target: str,
        actor: Actor,
        why: str,
        answer: Answer,
        *,
        until: datetime | None = None,
    ) -> Answer:
        row = JournalRow(
            id=0,
            at=self._clock.now(),
            action=action,
            target=target,
            subjects=answer.subjects,
            who=actor.who,
            via=actor.via.value,
            why=why,
            until=until,
            code=answer.code.value,
            answer=answer.text,
        )
        await self.tables.log(row)
        return answer

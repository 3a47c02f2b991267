"""What every control action shares (`ControlDesk`): the daemon's workers, config and clock,
the control tables, how a target is named and selected, and how each answer (refusals too) is
journaled. The silences (`_silencing`), the pauses (`_pausing`) and the API (`_api`) hold it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime

import structlog

from supervisor.config.models import FleetConfig
from supervisor.control.matchers import select
from supervisor.control.model import FLEET, Answer, Code, JournalRow
from supervisor.control.tables import ControlStore
from supervisor.core.actor import Actor
from supervisor.core.clock import Clock
from supervisor.record.store.store import Store
from supervisor.repair import Remediator
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.control")

AckHook = Callable[[int, Actor], Awaitable[None]]


class ControlDesk:
    """What the control actions share; `ControlApi`, `Silences` and `Pauses` hold the same one."""

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
        self.workers = workers  #: the daemon's own mapping: a config reload changes it
        self._config = config
        self.remediator = remediator
        self.clock = clock

    async def journal(
        self, subject: str | None = None, *, latest: int | None = None
    ) -> list[JournalRow]:
        return await self.tables.journal(subject, latest=latest)

    async def check_endpoint(
        self, action: str, endpoint: str, *, actor: Actor, why: str = ""
    ) -> Answer | None:
        """None when `endpoint` is known, else the (recorded) refusal."""
        if endpoint in self.workers:
            return None
        text = self.unknown(endpoint)
        return await self.refused(action, endpoint, actor, why, Code.NOT_FOUND, text)

    async def refuse(self, action: str, target: str, *, actor: Actor, why: str) -> Answer:
        """A transport refused the action before it reached the API (a stranger on Telegram):
        recorded like every refusal."""
        return await self.refused(action, target, actor, "", Code.REFUSED, why)

    def hosts(self) -> dict[str, Sequence[str]]:
        return {name: w.endpoint.hosts() for name, w in self.workers.items()}

    def select(self, target: str) -> tuple[str, ...]:
        return select(target, self.hosts(), list(self._config().hosts))

    def scope_names(self, scope: str) -> tuple[str, ...]:
        """The endpoints a pause's scope covers."""
        return tuple(self.workers) if scope == FLEET else (scope,)

    def unknown(self, endpoint: str) -> str:
        known = ", ".join(self.workers) or "none"
        return f"no endpoint {endpoint!r} (endpoints: {known})"

    async def refused(
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
        return await self.journaled(action, target, actor, why, answer, until=until)

    async def journaled(
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
            at=self.clock.now(),
            action=action,
            target=target,
            subjects=answer.subjects,
            who=actor.who,
            via=str(actor.via or ""),
            why=why,
            until=until,
            code=answer.code.value,
            answer=answer.text,
        )
        await self.tables.log(row)
        return answer

"""The control API: what a person may tell the daemon, the same for every transport.

- `silence(target, ...)`: maintenance for the endpoints `target` names (an endpoint, a glob,
  `host:NAME` or `all`) until a time; stored, so a restart of the daemon keeps it.
- `unsilence(target, ...)`: ends the silences covering those endpoints; they are judged afresh.
- `pause(...)`/`resume(...)`: automatic repair off/on, fleet-wide or for one endpoint; stored.
- `ack(incident, ...)`: stop the reminders of an escalated incident.
- `restart(endpoint, ...)`: a restart through the one attempt runner.

Each call answers an `Answer` (never raises for a bad target) and is written to the control
journal with who, why and how it ended, refusals included; what concerns an open incident is
written to its timeline too. Endpoint state changes go through the endpoints' workers.

`ControlApi` holds its parts: the `desk` they share (workers, tables, the journal), the
`silencing` (`Silences`) and the `pausing` (`Pauses`); acks and restarts are its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from supervisor.config.models import FleetConfig
from supervisor.control import entries
from supervisor.control._desk import AckHook, ControlDesk
from supervisor.control._pausing import Pauses
from supervisor.control._silencing import Silences
from supervisor.control.model import Answer, Code, JournalRow, PauseRow, SilenceRow
from supervisor.core.actor import Actor
from supervisor.core.clock import Clock
from supervisor.record.store.store import Store
from supervisor.repair import Remediator
from supervisor.worker import EndpointWorker


class ControlApi:
    """Silences (`silencing`), pauses (`pausing`), acks and restarts, over one `desk`."""

    def __init__(
        self,
        *,
        store: Store,
        workers: Mapping[str, EndpointWorker],
        config: Callable[[], FleetConfig],
        remediator: Remediator | None,
        clock: Clock,
    ) -> None:
        self.desk = ControlDesk(
            store=store, workers=workers, config=config, remediator=remediator, clock=clock
        )
        self.store = store
        self.tables = self.desk.tables
        self.silencing = Silences(self.desk)
        self.pausing = Pauses(self.desk)
        #: called after an ack (the notifier stops its reminders)
        self.on_ack: list[AckHook] = []

    async def start(self) -> None:
        """Put stored pauses and silences back in force."""
        await self.pausing.load()
        await self.silencing.restore()

    # -- the journal and refusals (the desk's) ----------------------------------------------

    async def journal(
        self, subject: str | None = None, *, latest: int | None = None
    ) -> list[JournalRow]:
        return await self.desk.journal(subject, latest=latest)

    async def check_endpoint(
        self, action: str, endpoint: str, *, actor: Actor, why: str = ""
    ) -> Answer | None:
        """None when `endpoint` is known, else the (recorded) refusal."""
        return await self.desk.check_endpoint(action, endpoint, actor=actor, why=why)

    async def refuse(self, action: str, target: str, *, actor: Actor, why: str) -> Answer:
        """A transport refused the action before it reached the API (a stranger on Telegram):
        recorded like every refusal."""
        return await self.desk.refuse(action, target, actor=actor, why=why)

    # -- silences (`Silences`) ----------------------------------------------------------------

    async def restore_silences(self) -> list[str]:
        """See `Silences.restore`."""
        return await self.silencing.restore()

    async def silences(self) -> list[SilenceRow]:
        """The silences in force now."""
        return await self.silencing.active()

    async def silence(
        self,
        target: str,
        *,
        actor: Actor,
        why: str = "",
        length: timedelta | None = None,
        until: datetime | None = None,
    ) -> Answer:
        """Maintenance until `until` (or for `length`) for what `target` names."""
        return await self.silencing.silence(
            target, actor=actor, why=why, length=length, until=until
        )

    async def edit(
        self,
        silence_id: int,
        *,
        actor: Actor,
        why: str = "",
        length: timedelta | None = None,
        until: datetime | None = None,
    ) -> Answer:
        """A silence in force ends at `until` (or `length` from now); see `Silences.edit`."""
        return await self.silencing.edit(
            silence_id, actor=actor, why=why, length=length, until=until
        )

    async def unsilence(self, target: str, *, actor: Actor, why: str = "") -> Answer:
        """End the silences covering what `target` names; see `Silences.unsilence`."""
        return await self.silencing.unsilence(target, actor=actor, why=why)

    # -- pauses (`Pauses`) --------------------------------------------------------------------

    def paused(self, endpoint: str) -> str:
        """Why automatic action on `endpoint` is paused, or '' (the repair runner asks)."""
        return self.pausing.paused(endpoint)

    @property
    def fleet_paused(self) -> bool:
        return self.pausing.fleet_paused

    def pauses(self) -> list[PauseRow]:
        return self.pausing.pauses()

    async def pause(self, *, actor: Actor, endpoint: str | None = None, why: str = "") -> Answer:
        """Automatic repair off (fleet-wide, or for `endpoint`) until `resume`."""
        return await self.pausing.pause(actor=actor, endpoint=endpoint, why=why)

    async def resume(self, *, actor: Actor, endpoint: str | None = None, why: str = "") -> Answer:
        """Automatic repair on again; endpoints left down meanwhile are taken on now."""
        return await self.pausing.resume(actor=actor, endpoint=endpoint, why=why)

    # -- acks and restarts ----------------------------------------------------------------------

    async def ack(self, incident_id: int, *, actor: Actor, why: str = "") -> Answer:
        """No more reminders of an escalated incident."""
        incident = await self.store.incident(incident_id)
        target = f"#{incident_id}"
        if incident is None:
            text = entries.no_incident_text(incident_id)
            return await self.desk.refused("ack", target, actor, why, Code.NOT_FOUND, text)
        entry = entries.ack_entry(incident.subject, self.desk.clock.now(), actor, why=why)
        worker = self.desk.workers.get(incident.subject)
        if worker is not None:
            await worker.append(entry, incident_id=incident_id)
        else:  # a host's incident
            await self.store.append(incident_id, entry)
        for hook in list(self.on_ack):
            await hook(incident_id, actor)
        answer = Answer(
            code=Code.DONE, text=entries.acked_text(incident_id), subjects=(incident.subject,)
        )
        return await self.desk.journaled("ack", target, actor, why, answer)

    async def restart(self, endpoint: str, *, actor: Actor, why: str = "") -> Answer:
        """Restart the endpoint's units through the one attempt runner (its guards apply)."""
        refused = await self.desk.check_endpoint("restart", endpoint, actor=actor, why=why)
        if refused is not None:
            return refused
        if self.desk.remediator is None:
            text = entries.RESTARTS_NOT_AVAILABLE
            return await self.desk.refused("restart", endpoint, actor, why, Code.REFUSED, text)
        result = await self.desk.remediator.restart(self.desk.workers[endpoint], who=actor.who)
        code = Code.DONE if result.ok else Code.REFUSED
        answer = Answer(code=code, text=result.text, subjects=(endpoint,))
        return await self.desk.journaled("restart", endpoint, actor, why, answer)

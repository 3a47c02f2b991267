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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta

import structlog

from supervisor.clock import Clock
from supervisor.config import FleetConfig
from supervisor.control import entries
from supervisor.control.matchers import MatchError, covers, select
from supervisor.control.model import FLEET, Actor, Answer, Code, JournalRow, PauseRow, SilenceRow
from supervisor.control.tables import ControlStore
from supervisor.machine import State, Trigger
from supervisor.remediation.runner import Remediator
from supervisor.store import Store
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.control")

AckHook = Callable[[int, Actor], Awaitable[None]]


class ControlApi:
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

    async def start(self) -> None:
        """Create the tables if missing; put stored pauses and silences back in force."""
        await self.tables.ensure()
        self._pauses = {row.scope: row for row in await self.tables.pauses()}
        await self.restore_silences()

    async def restore_silences(self) -> list[str]:
        """Endpoints a stored silence covers that are not in maintenance now (a new endpoint a
        glob names, a store whose snapshot was lost) are silenced again; returns them."""
        now = self._clock.now()
        restored = []
        for row in await self.tables.silences(active_at=now):
            for name, worker in list(self._workers.items()):
                if worker.state is State.MAINTENANCE or not covers(row.target, name, self._hosts()):
                    continue
                note = entries.restored_note(row.id, row.who)
                data = {"until": row.until.isoformat(), "silence": str(row.id)}
                if await worker.apply(Trigger.SILENCE, note, data=data, until=row.until):
                    restored.append(name)
        return restored

    # -- reading ---------------------------------------------------------------------------

    def paused(self, endpoint: str) -> str:
        """Why automatic action on `endpoint` is paused, or '' (the repair runner asks)."""
        if FLEET in self._pauses:
            return entries.pause_reason(None)
        if endpoint in self._pauses:
            return entries.pause_reason(endpoint)
        return ""

    @property
    def fleet_paused(self) -> bool:
        return FLEET in self._pauses

    def pauses(self) -> list[PauseRow]:
        return sorted(self._pauses.values(), key=lambda p: p.scope)

    async def silences(self) -> list[SilenceRow]:
        """The silences in force now."""
        return await self.tables.silences(active_at=self._clock.now())

    async def journal(
        self, subject: str | None = None, *, latest: int | None = None
    ) -> list[JournalRow]:
        return await self.tables.journal(subject, latest=latest)

    # -- silences --------------------------------------------------------------------------

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
        now = self._clock.now()
        if length is not None:
            until = now + length
        if until is None:
            text = entries.NO_END
            return await self._refused("silence", target, actor, why, Code.BAD_REQUEST, text)
        if length is not None and length <= timedelta(0):
            text = entries.NOT_LONGER_THAN_ZERO
            return await self._refused("silence", target, actor, why, Code.BAD_REQUEST, text)
        if until <= now:
            text = entries.past_until_text(until)
            return await self._refused("silence", target, actor, why, Code.BAD_REQUEST, text)
        try:
            subjects = self._select(target)
        except MatchError as err:
            return await self._refused("silence", target, actor, why, err.code, err.text)
        quiet = [n for n in subjects if self._workers[n].state is not State.MAINTENANCE]
        if not quiet:
            text = entries.already_silenced_text(subjects)
            return await self._refused("silence", target, actor, why, Code.REFUSED, text, subjects)
        silence_id = await self.tables.add_silence(
            target=target, who=actor.who, via=actor.via.value, why=why, at=now, until=until
        )
        length_text = entries.length_text(now, until)
        note = entries.silence_note(actor, length=length_text, why=why)
        data = entries.silence_data(silence_id, actor, until=until, target=target, why=why)
        silenced = []
        for name in quiet:
            change = await self._workers[name].apply(Trigger.SILENCE, note, data=data, until=until)
            if change is not None:
                silenced.append(name)
        answer = Answer(
            code=Code.DONE,
            text=entries.silenced_text(silenced, length_text),
            subjects=tuple(silenced),
        )
        return await self._journal("silence", target, actor, why, answer, until=until)

    async def unsilence(self, target: str, *, actor: Actor, why: str = "") -> Answer:
        """End the silences covering what `target` names; every endpoint no other silence
        covers leaves maintenance and is judged afresh."""
        try:
            subjects = self._select(target)
        except MatchError as err:
            return await self._refused("unsilence", target, actor, why, err.code, err.text)
        now, hosts = self._clock.now(), self._hosts()
        active = await self.tables.silences(active_at=now)
        ending = [s for s in active if any(covers(s.target, n, hosts) for n in subjects)]
        staying = [s for s in active if s not in ending]
        freed = list(subjects)
        for row in ending:
            freed += [n for n in self._workers if covers(row.target, n, hosts) and n not in freed]
        freed = [n for n in freed if not any(covers(s.target, n, hosts) for s in staying)]
        if ending:
            await self.tables.end_silences([s.id for s in ending], at=now, by=actor.who)
        unsilenced = []
        for name in freed:
            worker = self._workers.get(name)
            if worker is None:
                continue
            if await worker.apply(Trigger.UNSILENCE, entries.unsilence_note(actor)) is not None:
                unsilenced.append(name)
        if not unsilenced:
            text = entries.not_silenced_text(subjects)
            return await self._refused(
                "unsilence", target, actor, why, Code.REFUSED, text, subjects
            )
        answer = Answer(
            code=Code.DONE, text=entries.unsilenced_text(unsilenced), subjects=tuple(unsilenced)
        )
        return await self._journal("unsilence", target, actor, why, answer)

    # -- pauses ----------------------------------------------------------------------------

    async def pause(self, *, actor: Actor, endpoint: str | None = None, why: str = "") -> Answer:
        """Automatic repair off (fleet-wide, or for `endpoint`) until `resume`."""
        scope, refused = await self._scope("pause", endpoint, actor, why)
        if refused is not None:
            return refused
        row = PauseRow(
            scope=scope, who=actor.who, via=actor.via.value, why=why, at=self._clock.now()
        )
        await self.tables.pause(row)
        self._pauses[scope] = row
        await self._note_pause(actor, scope=scope, why=why, paused=True)
        log.warning("automatic action paused", scope=scope, by=str(actor), why=why)
        answer = Answer(
            code=Code.DONE, text=entries.paused_text(endpoint), subjects=self._in(scope)
        )
        return await self._journal("pause", scope, actor, why, answer)

    async def resume(self, *, actor: Actor, endpoint: str | None = None, why: str = "") -> Answer:
        """Automatic repair on again; endpoints left down meanwhile are taken on now."""
        scope, refused = await self._scope("resume", endpoint, actor, why)
        if refused is not None:
            return refused
        if not await self.tables.resume(scope):
            text = entries.not_paused_text(endpoint)
            return await self._refused("resume", scope, actor, why, Code.REFUSED, text)
        self._pauses.pop(scope, None)
        await self._note_pause(actor, scope=scope, why=why, paused=False)
        log.warning("automatic action resumed", scope=scope, by=str(actor), why=why)
        if self._remediator is not None:
            for name in self._in(scope):
                worker = self._workers[name]
                actionable = worker.state in (State.DOWN, State.DEGRADED, State.UNREACHABLE)
                if actionable and not self.paused(name):
                    self._remediator.schedule(worker)
        answer = Answer(
            code=Code.DONE, text=entries.resumed_text(endpoint), subjects=self._in(scope)
        )
        return await self._journal("resume", scope, actor, why, answer)

    async def _scope(
        self, action: str, endpoint: str | None, actor: Actor, why: str
    ) -> tuple[str, Answer | None]:
        if self._remediator is None:
            text = entries.PAUSE_NOT_AVAILABLE
            return "", await self._refused(
                action, endpoint or FLEET, actor, why, Code.REFUSED, text
            )
        if endpoint is None:
            return FLEET, None
        if endpoint not in self._workers:
            text = self._unknown(endpoint)
            return "", await self._refused(action, endpoint, actor, why, Code.NOT_FOUND, text)
        return endpoint, None

    async def _note_pause(self, actor: Actor, *, scope: str, why: str, paused: bool) -> None:
        now = self._clock.now()
        for name in self._in(scope):
            worker = self._workers[name]
            if worker.incident_id is not None:
                entry = entries.pause_entry(name, now, actor, paused=paused, scope=scope, why=why)
                await worker.record(entry)

    # -- ack and restart -------------------------------------------------------------------

    async def ack(self, incident_id: int, *, actor: Actor, why: str = "") -> Answer:
        """No more reminders of an escalated incident."""
        incident = await self.store.incident(incident_id)
        target = f"#{incident_id}"
        if incident is None:
            text = entries.no_incident_text(incident_id)
            return await self._refused("ack", target, actor, why, Code.NOT_FOUND, text)
        entry = entries.ack_entry(incident.subject, self._clock.now(), actor, why=why)
        worker = self._workers.get(incident.subject)
        if worker is not None:
            await worker.record(entry, incident_id=incident_id)
        else:  # a host's incident
            await self.store.append(incident_id, entry)
        for hook in list(self.on_ack):
            await hook(incident_id, actor)
        answer = Answer(
            code=Code.DONE, text=entries.acked_text(incident_id), subjects=(incident.subject,)
        )
        return await self._journal("ack", target, actor, why, answer)

    async def restart(self, endpoint: str, *, actor: Actor, why: str = "") -> Answer:
        """Restart the endpoint's units through the one attempt runner (its guards apply)."""
        refused = await self.check_endpoint("restart", endpoint, actor=actor, why=why)
        if refused is not None:
            return refused
        if self._remediator is None:
            text = entries.RESTARTS_NOT_AVAILABLE
            return await self._refused("restart", endpoint, actor, why, Code.REFUSED, text)
        result = await self._remediator.restart(self._workers[endpoint], who=actor.who)
        code = Code.DONE if result.ok else Code.REFUSED
        answer = Answer(code=code, text=result.text, subjects=(endpoint,))
        return await self._journal("restart", endpoint, actor, why, answer)

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

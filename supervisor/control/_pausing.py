"""Pauses: automatic repair off and on again, fleet-wide or for one endpoint; the repair
runner asks `paused(name)`. Held by `ControlApi`; the pauses in force are kept here."""

from __future__ import annotations

from supervisor.control import entries
from supervisor.control._desk import ControlDesk, log
from supervisor.control.model import FLEET, Answer, Code, PauseRow
from supervisor.core.actor import Actor
from supervisor.judge.machine import State


class Pauses:
    """The pauses in force (loaded by `load`), and pause and resume."""

    def __init__(self, desk: ControlDesk) -> None:
        self._desk = desk
        self._pauses: dict[str, PauseRow] = {}

    async def load(self) -> None:
        """The stored pauses are in force again."""
        self._pauses = {row.scope: row for row in await self._desk.tables.pauses()}

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

    async def pause(self, *, actor: Actor, endpoint: str | None = None, why: str = "") -> Answer:
        """Automatic repair off (fleet-wide, or for `endpoint`) until `resume`."""
        scope, refused = await self._scope("pause", endpoint, actor, why)
        if refused is not None:
            return refused
        row = PauseRow(
            scope=scope, who=actor.who, via=str(actor.via or ""), why=why, at=self._desk.clock.now()
        )
        await self._desk.tables.pause(row)
        self._pauses[scope] = row
        await self._note_pause(actor, scope=scope, why=why, paused=True)
        log.warning("automatic action paused", scope=scope, by=str(actor), why=why)
        answer = Answer(
            code=Code.DONE,
            text=entries.paused_text(endpoint),
            subjects=self._desk.scope_names(scope),
        )
        return await self._desk.journaled("pause", scope, actor, why, answer)

    async def resume(self, *, actor: Actor, endpoint: str | None = None, why: str = "") -> Answer:
        """Automatic repair on again; endpoints left down meanwhile are taken on now."""
        scope, refused = await self._scope("resume", endpoint, actor, why)
        if refused is not None:
            return refused
        if not await self._desk.tables.resume(scope):
            text = entries.not_paused_text(endpoint)
            return await self._desk.refused("resume", scope, actor, why, Code.REFUSED, text)
        self._pauses.pop(scope, None)
        await self._note_pause(actor, scope=scope, why=why, paused=False)
        log.warning("automatic action resumed", scope=scope, by=str(actor), why=why)
        if self._desk.remediator is not None:
            for name in self._desk.scope_names(scope):
                worker = self._desk.workers[name]
                actionable = worker.state in (State.DOWN, State.DEGRADED, State.UNREACHABLE)
                if actionable and not self.paused(name):
                    self._desk.remediator.schedule(worker)
        answer = Answer(
            code=Code.DONE,
            text=entries.resumed_text(endpoint),
            subjects=self._desk.scope_names(scope),
        )
        return await self._desk.journaled("resume", scope, actor, why, answer)

    async def _scope(
        self, action: str, endpoint: str | None, actor: Actor, why: str
    ) -> tuple[str, Answer | None]:
        if self._desk.remediator is None:
            text = entries.PAUSE_NOT_AVAILABLE
            return "", await self._desk.refused(
                action, endpoint or FLEET, actor, why, Code.REFUSED, text
            )
        if endpoint is None:
            return FLEET, None
        if endpoint not in self._desk.workers:
            text = self._desk.unknown(endpoint)
            return "", await self._desk.refused(action, endpoint, actor, why, Code.NOT_FOUND, text)
        return endpoint, None

    async def _note_pause(self, actor: Actor, *, scope: str, why: str, paused: bool) -> None:
        now = self._desk.clock.now()
        for name in self._desk.scope_names(scope):
            worker = self._desk.workers[name]
            if worker.record.incident_id is not None:
                entry = entries.pause_entry(name, now, actor, paused=paused, scope=scope, why=why)
                await worker.append(entry)

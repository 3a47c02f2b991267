"""Silences: maintenance for the endpoints a target names until a time, ended by unsilence,
and put back in force on start (`ControlApi.start`). Held by `ControlApi`."""

from __future__ import annotations

from datetime import datetime, timedelta

from supervisor.control import entries
from supervisor.control._desk import ControlDesk
from supervisor.control.matchers import MatchError, covers
from supervisor.control.model import Answer, Code, SilenceRow
from supervisor.core.actor import Actor
from supervisor.judge.machine import State, Trigger
from supervisor.record.store.records import TimelineEntry


class Silences:
    """Silence, edit, unsilence; the silences themselves are the control tables'."""

    def __init__(self, desk: ControlDesk) -> None:
        self._desk = desk

    async def restore(self) -> list[str]:
        """Endpoints a stored silence covers that are not in maintenance now (a new endpoint a
        glob names, a store whose snapshot was lost) are silenced again; returns them."""
        now = self._desk.clock.now()
        restored = []
        for row in await self._desk.tables.silences(active_at=now):
            for name, worker in list(self._desk.workers.items()):
                if worker.state is State.MAINTENANCE or not covers(
                    row.target, name, self._desk.hosts()
                ):
                    continue
                note = entries.restored_note(row.id, row.who)
                data = {"until": row.until.isoformat(), "silence": str(row.id)}
                if await worker.apply(Trigger.SILENCE, note, data=data, until=row.until):
                    restored.append(name)
        return restored

    async def active(self) -> list[SilenceRow]:
        """The silences in force now."""
        return await self._desk.tables.silences(active_at=self._desk.clock.now())

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
        now = self._desk.clock.now()
        if length is not None:
            until = now + length
        if until is None:
            text = entries.NO_END
            return await self._desk.refused("silence", target, actor, why, Code.BAD_REQUEST, text)
        if length is not None and length <= timedelta(0):
            text = entries.NOT_LONGER_THAN_ZERO
            return await self._desk.refused("silence", target, actor, why, Code.BAD_REQUEST, text)
        if until <= now:
            text = entries.past_until_text(until)
            return await self._desk.refused("silence", target, actor, why, Code.BAD_REQUEST, text)
        try:
            subjects = self._desk.select(target)
        except MatchError as err:
            return await self._desk.refused("silence", target, actor, why, err.code, err.text)
        quiet = [n for n in subjects if self._desk.workers[n].state is not State.MAINTENANCE]
        if not quiet:
            text = entries.already_silenced_text(subjects)
            return await self._desk.refused(
                "silence", target, actor, why, Code.REFUSED, text, subjects
            )
        silence_id = await self._desk.tables.add_silence(
            target=target, who=actor.who, via=str(actor.via or ""), why=why, at=now, until=until
        )
        length_text = entries.length_text(now, until)
        note = entries.silence_note(actor, length=length_text, why=why)
        data = entries.silence_data(silence_id, actor, until=until, target=target, why=why)
        silenced = []
        for name in quiet:
            worker = self._desk.workers[name]
            if await worker.apply(Trigger.SILENCE, note, data=data, until=until) is not None:
                silenced.append(name)
                said = entries.silenced_entry(
                    name, now, actor, target=target, until=until, why=why, silence=silence_id
                )
                await worker.append(said)
        answer = Answer(
            code=Code.DONE,
            text=entries.silenced_text(silenced, length_text),
            subjects=tuple(silenced),
        )
        return await self._desk.journaled("silence", target, actor, why, answer, until=until)

    async def edit(
        self,
        silence_id: int,
        *,
        actor: Actor,
        why: str = "",
        length: timedelta | None = None,
        until: datetime | None = None,
    ) -> Answer:
        """A silence in force ends at `until` (or `length` from now: extend, shorten) with `why`
        as its reason; the endpoints it covers stay in maintenance until then (or until a longer
        silence covering them ends)."""
        now, target = self._desk.clock.now(), f"#{silence_id}"
        if length is not None:
            until = now + length
        if until is None or until <= now:
            text = entries.NO_END if until is None else entries.past_until_text(until)
            return await self._desk.refused("edit", target, actor, why, Code.BAD_REQUEST, text)
        found = {row.id: row for row in await self._desk.tables.silences()}
        row = found.get(silence_id)
        if row is None:
            text = entries.no_silence_text(silence_id)
            return await self._desk.refused("edit", target, actor, why, Code.NOT_FOUND, text)
        if not row.active(now):
            text = entries.silence_over_text(silence_id)
            return await self._desk.refused("edit", target, actor, why, Code.REFUSED, text)
        await self._desk.tables.change_silence(silence_id, until=until, why=why)
        hosts = self._desk.hosts()
        active = await self._desk.tables.silences(active_at=now)
        moved = []
        for name, worker in list(self._desk.workers.items()):
            if not covers(row.target, name, hosts):
                continue
            end = max(s.until for s in active if covers(s.target, name, hosts))
            if await worker.move_silence_end(end):
                moved.append(name)
                note = entries.edited_note(silence_id, end, actor, why=why)
                await worker.append(TimelineEntry(at=now, subject=name, record=note))
        text = entries.edited_text(silence_id, row.target, until, moved)
        answer = Answer(code=Code.DONE, text=text, subjects=tuple(moved))
        return await self._desk.journaled("edit", row.target, actor, why, answer, until=until)

    async def unsilence(self, target: str, *, actor: Actor, why: str = "") -> Answer:
        """End the silences covering what `target` names; every endpoint no other silence
        covers leaves maintenance and is judged afresh."""
        try:
            subjects = self._desk.select(target)
        except MatchError as err:
            return await self._desk.refused("unsilence", target, actor, why, err.code, err.text)
        now, hosts = self._desk.clock.now(), self._desk.hosts()
        active = await self._desk.tables.silences(active_at=now)
        ending = [s for s in active if any(covers(s.target, n, hosts) for n in subjects)]
        staying = [s for s in active if s not in ending]
        freed = list(subjects)
        for row in ending:
            freed += [
                n for n in self._desk.workers if covers(row.target, n, hosts) and n not in freed
            ]
        freed = [n for n in freed if not any(covers(s.target, n, hosts) for s in staying)]
        if ending:
            await self._desk.tables.end_silences([s.id for s in ending], at=now, by=actor.who)
        unsilenced = []
        for name in freed:
            worker = self._desk.workers.get(name)
            if worker is None:
                continue
            note, data = entries.unsilence_note(actor), entries.actor_data(actor)
            if await worker.apply(Trigger.UNSILENCE, note, data=data) is not None:
                unsilenced.append(name)
                ended = [s.id for s in ending if covers(s.target, name, hosts)]
                said = entries.unsilenced_entry(
                    name, now, actor, target=target, why=why, silences=ended
                )
                await worker.append(said)
        if not unsilenced:
            text = entries.not_silenced_text(subjects)
            return await self._desk.refused(
                "unsilence", target, actor, why, Code.REFUSED, text, subjects
            )
        answer = Answer(
            code=Code.DONE, text=entries.unsilenced_text(unsilenced), subjects=tuple(unsilenced)
        )
        return await self._desk.journaled("unsilence", target, actor, why, answer)

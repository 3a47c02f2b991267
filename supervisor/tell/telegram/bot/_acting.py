"""The bot's commands that act, each a call of the control API (`supervisor.control`), as from
the CLI and HTTP: `/restart` (asks first with a Confirm button: `bot_questions`), `/ack`,
`/silence`, `/unsilence`, `/pause`, `/resume`; and the control API's ack hook, which stops the
composer's reminders."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace

from supervisor.control import ControlApi
from supervisor.core.actor import Actor
from supervisor.core.durations import DurationError, parse_duration
from supervisor.record.store.outbox import OutboxStore
from supervisor.repair import Remediator
from supervisor.tell.telegram.bot._common import (
    Ask,
    UsageError,
    chat_actor,
    control_of,
    endpoint_arg,
    incident_arg,
    optional_endpoint,
    said,
)
from supervisor.tell.telegram.bot._questions import Questions
from supervisor.tell.telegram.memory import Memory
from supervisor.tell.telegram.texts import h
from supervisor.worker import EndpointWorker


class Acting:
    def __init__(
        self,
        *,
        outbox: OutboxStore,
        workers: Mapping[str, EndpointWorker],
        remediator: Remediator | None,
        control: ControlApi | None,
        questions: Questions,
        memory_lock: asyncio.Lock,
    ) -> None:
        self._outbox = outbox
        self._workers = workers
        self._remediator = remediator
        self._control = control
        self._questions = questions
        self._memory_lock = memory_lock

    async def restart(self, args: list[str], who: str) -> str:
        worker = endpoint_arg(self._workers, args, "/restart NAME")
        if self._remediator is None or self._control is None:
            raise UsageError("restarts are not available here")
        raise Ask(
            f"Restart <b>{h(worker.name)}</b> (now {worker.state.value})? It goes through the "
            "guarded repair path: budgets, locks and startup grace apply.",
            self._questions.ask("restart", worker.name),
            ("Confirm restart", "Cancel"),
        )

    async def ack(self, args: list[str], who: str) -> str:
        incident_id = incident_arg(args, "/ack ID")
        return said(await control_of(self._control).ack(incident_id, actor=chat_actor(who)))

    async def remember_ack(self, incident_id: int, actor: Actor) -> None:
        """The control API's ack hook: the composer sends no more reminders."""
        async with self._memory_lock:
            memory = Memory.from_json(await self._outbox.state(incident_id))
            memory = replace(memory, acked_by=actor.who)
            await self._outbox.put_state(incident_id, memory.to_json(), active=memory.active)

    async def silence(self, args: list[str], who: str) -> str:
        if len(args) < 2:
            raise UsageError("usage: /silence NAME 2h")
        try:
            length = parse_duration(args[1])
        except DurationError as exc:
            raise UsageError(str(exc)) from None
        answer = await control_of(self._control).silence(
            args[0], actor=chat_actor(who), length=length, why=" ".join(args[2:])
        )
        return said(answer)

    async def unsilence(self, args: list[str], who: str) -> str:
        if len(args) != 1:
            raise UsageError("usage: /unsilence NAME")
        return said(await control_of(self._control).unsilence(args[0], actor=chat_actor(who)))

    async def pause(self, args: list[str], who: str) -> str:
        endpoint = optional_endpoint(args, "/pause [NAME]")
        return said(await control_of(self._control).pause(actor=chat_actor(who), endpoint=endpoint))

    async def resume(self, args: list[str], who: str) -> str:
        endpoint = optional_endpoint(args, "/resume [NAME]")
        return said(
            await control_of(self._control).resume(actor=chat_actor(who), endpoint=endpoint)
        )

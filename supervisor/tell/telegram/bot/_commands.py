"""The operator's commands and buttons. Every update first passes the gate (allow-listed users
in allow-listed chats); `/restart` asks first with a Confirm button, then takes the same guarded
path as automatic repairs; confirm-mode rules ask Apply/Skip (`Commands.approve`). Silences,
pauses, acks and restarts are calls of the control API (`supervisor.control`), as from the CLI
and HTTP.

This module is the gate, the table of commands and how an answer goes back to the chat (through
the sender's paced, retrying path: `replies`); the commands themselves are `_looking` (they
change nothing) and `_acting` (control actions), the questions with buttons `_questions`, and
what they share `_common`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from telegram import BotCommand, InlineKeyboardMarkup, Update
from telegram.ext import ApplicationHandlerStop, CallbackQueryHandler, CommandHandler, TypeHandler

from supervisor.config.models import FleetConfig
from supervisor.config.sections import TelegramConfig
from supervisor.control import ControlApi
from supervisor.core.actor import Actor, Via
from supervisor.core.clock import Clock
from supervisor.hear.reachability import HostWatcher
from supervisor.playbook.model import Rule
from supervisor.record.store.outbox import OutboxStore
from supervisor.record.store.store import Store
from supervisor.repair import Remediator
from supervisor.tell.telegram import texts
from supervisor.tell.telegram.auth import REFUSAL, allowed
from supervisor.tell.telegram.bot._acting import Acting
from supervisor.tell.telegram.bot._common import (
    App,
    Ask,
    Ctx,
    UsageError,
    keyboard,
    log,
    send_quietly,
    who_asked,
)
from supervisor.tell.telegram.bot._looking import Looking
from supervisor.tell.telegram.bot._questions import Questions
from supervisor.tell.telegram.replies import Replies
from supervisor.tell.telegram.texts import h
from supervisor.worker import EndpointWorker

__all__ = ["COMMANDS", "Commands"]

COMMANDS: tuple[tuple[str, str], ...] = (
    ("status", "every endpoint: state, since when, last TTFT and tok/s"),
    ("restart", "NAME: restart an endpoint (asks first)"),
    ("incidents", "[N]: the latest incidents"),
    ("timeline", "ID: one incident's timeline"),
    ("diagnose", "NAME: gather evidence now and say which rule matches"),
    ("ack", "ID: stop the reminders of an escalated incident"),
    ("silence", "NAME|GLOB|host:H|all 2h [WHY]: maintenance for a while"),
    ("unsilence", "NAME|GLOB|host:H|all: end maintenance now"),
    ("pause", "[NAME]: pause automatic action (all, or one endpoint)"),
    ("resume", "[NAME]: resume automatic action"),
    ("help", "what the bot understands"),
)

Command = Callable[[list[str], str], Awaitable[str | list[str]]]
"""A command: its arguments and who asked -> the answer (texts in HTML)."""


class Commands:
    def __init__(
        self,
        *,
        config: FleetConfig,
        telegram: TelegramConfig,
        store: Store,
        outbox: OutboxStore,
        workers: Mapping[str, EndpointWorker],
        hosts: Mapping[str, HostWatcher],
        remediator: Remediator | None,
        clock: Clock,
        memory_lock: asyncio.Lock,
        replies: Replies,
        control: ControlApi | None = None,
        diagnose: Callable[[str], Awaitable[list[str]]] | None = None,
    ) -> None:
        self.telegram = telegram
        self._replies = replies
        self.outbox = outbox
        self.control = control
        self.clock = clock
        self._questions = Questions(
            config=config,
            telegram=telegram,
            workers=workers,
            remediator=remediator,
            control=control,
            replies=replies,
        )
        looking = Looking(
            store=store,
            workers=workers,
            hosts=hosts,
            control=control,
            clock=clock,
            diagnose=diagnose,
        )
        self._acting = Acting(
            outbox=outbox,
            workers=workers,
            remediator=remediator,
            control=control,
            questions=self._questions,
            memory_lock=memory_lock,
        )
        acting = self._acting
        #: each command of COMMANDS by name
        self._commands: dict[str, Command] = {
            "status": looking.status,
            "restart": acting.restart,
            "incidents": looking.incidents,
            "timeline": looking.timeline,
            "diagnose": looking.diagnose,
            "ack": acting.ack,
            "silence": acting.silence,
            "unsilence": acting.unsilence,
            "pause": acting.pause,
            "resume": acting.resume,
            "help": self._help,
        }
        self._tasks: set[asyncio.Task[Any]] = set()

    def install(self, app: App) -> None:
        app.add_handler(TypeHandler(Update, self._gate), group=-1)
        for name, _ in COMMANDS:
            app.add_handler(CommandHandler(name, self._wrap(self._commands[name])))
        app.add_handler(CallbackQueryHandler(self._questions.on_button))

    @staticmethod
    async def register(app: App) -> None:
        """So clients list the commands."""
        await app.bot.set_my_commands([BotCommand(n, d) for n, d in COMMANDS])

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._questions.cancel()

    async def approve(self, app: App, endpoint: str, rule: Rule, plan: list[str]) -> bool | None:
        """The Approver of confirm-mode rules (`Questions.approve`)."""
        return await self._questions.approve(app, endpoint, rule, plan)

    async def remember_ack(self, incident_id: int, actor: Actor) -> None:
        """The control API's ack hook: the composer sends no more reminders."""
        await self._acting.remember_ack(incident_id, actor)

    # -- the gate --------------------------------------------------------------------------

    async def _gate(self, update: Update, _context: Ctx) -> None:
        user, chat = update.effective_user, update.effective_chat
        user_id = user.id if user else None
        chat_id = chat.id if chat else None
        if allowed(self.telegram, user_id=user_id, chat_id=chat_id):
            return
        message = update.effective_message
        text = message.text or "" if message else ""
        if update.callback_query is not None:
            text = f"button {update.callback_query.data}"
        username = (user.username or user.full_name) if user else ""
        await self.outbox.refuse(
            at=self.clock.now(), user_id=user_id, chat_id=chat_id, username=username, text=text
        )
        log.warning("telegram: refused", user=user_id, chat=chat_id, text=text[:100])
        command = text.split(maxsplit=1)[0].lstrip("/") if text.startswith("/") else ""
        if self.control is not None and command in _CONTROL:
            actor = Actor(who=username or f"Telegram user {user_id}", via=Via.TELEGRAM)
            await self.control.refuse(command, text[:200], actor=actor, why=REFUSAL)
        if update.callback_query is not None:
            await send_quietly(update.callback_query.answer(REFUSAL))
        elif message is not None:
            await send_quietly(message.reply_text(REFUSAL))
        raise ApplicationHandlerStop

    def _wrap(self, command: Command) -> Callable[[Update, Ctx], Coroutine[Any, Any, None]]:
        async def handler(update: Update, context: Ctx) -> None:
            message = update.effective_message
            if message is None:
                return
            # its place among this chat's answers, taken before the command runs (their order)
            reply = self._replies.reserve(message.chat_id, message.message_id)
            try:
                parts, buttons = await self._run(command, update, list(context.args or []))
            except BaseException:  # nothing to say: its place is freed for the next answer
                self._replies.fill(reply, [])
                raise
            self._replies.fill(reply, parts, buttons)

        return handler

    @staticmethod
    async def _run(
        command: Command, update: Update, args: list[str]
    ) -> tuple[list[str], InlineKeyboardMarkup | None]:
        """The command's answer: its parts (each under Telegram's limit) and its buttons."""
        try:
            answer = await command(args, who_asked(update))
        except UsageError as exc:
            answer = h(str(exc))
        except Ask as ask:
            return texts.split(ask.text)[:1], keyboard(ask.nonce, ask.labels)
        answers = [answer] if isinstance(answer, str) else answer
        return [part for text in answers for part in texts.split(text)], None

    async def _help(self, _args: list[str], _who: str) -> str:
        return "\n".join(f"/{n} {h(d)}" for n, d in COMMANDS)


_CONTROL = frozenset({"silence", "unsilence", "pause", "resume", "ack", "restart"})
"""Commands that are control actions: a stranger's try is recorded in the control journal."""

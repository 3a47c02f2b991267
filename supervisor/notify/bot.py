"""The operator's commands and buttons. Every update first passes the gate (allow-listed users
in allow-listed chats); `/restart` asks first with a Confirm button, then takes the same guarded
path as automatic repairs; confirm-mode rules ask Apply/Skip (`Commands.approve`). Silences,
pauses, acks and restarts are calls of the control API (`supervisor.control`), as from the CLI
and HTTP."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog
from telegram import BotCommand, InlineKeyboardButton, InlineKeyboardMarkup, Message, Update
from telegram.constants import ParseMode
from telegram.error import TelegramError
from telegram.ext import (
    Application,
    ApplicationHandlerStop,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    TypeHandler,
)

from supervisor.clock import Clock
from supervisor.config import FleetConfig
from supervisor.config.models import TelegramConfig
from supervisor.control import Actor, Answer, ControlApi, Via
from supervisor.durations import DurationError, format_duration, parse_duration
from supervisor.hosts import HostWatcher
from supervisor.notify import texts
from supervisor.notify.auth import REFUSAL, allowed
from supervisor.notify.compose import Memory
from supervisor.notify.texts import h
from supervisor.playbook.model import Rule
from supervisor.remediation.runner import Remediator
from supervisor.store import Store
from supervisor.store.lease_view import leader_view, leadership_line
from supervisor.store.outbox import OutboxStore
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.notify")

Ctx = ContextTypes.DEFAULT_TYPE
App = Application[Any, Any, Any, Any, Any, Any]

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


class UsageError(Exception):
    """A bad argument: the text goes back to the chat as is."""


@dataclass(frozen=True, kw_only=True)
class _Question:
    kind: str  #: restart or approve
    endpoint: str
    answer: asyncio.Future[bool] | None = None


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
        control: ControlApi | None = None,
        diagnose: Callable[[str], Awaitable[list[str]]] | None = None,
    ) -> None:
        self.config = config
        self.telegram = telegram
        self.store = store
        self.outbox = outbox
        self.workers = workers
        self.hosts = hosts
        self.remediator = remediator
        self.control = control
        self.clock = clock
        self._memory_lock = memory_lock
        self._diagnose = diagnose
        self._questions: dict[str, _Question] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def install(self, app: App) -> None:
        app.add_handler(TypeHandler(Update, self._gate), group=-1)
        for name, _ in COMMANDS:
            app.add_handler(CommandHandler(name, self._wrap(getattr(self, f"cmd_{name}"))))
        app.add_handler(CallbackQueryHandler(self._on_button))

    @staticmethod
    async def register(app: App) -> None:
        """So clients list the commands."""
        await app.bot.set_my_commands([BotCommand(n, d) for n, d in COMMANDS])

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for question in self._questions.values():
            if question.answer is not None and not question.answer.done():
                question.answer.cancel()

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
            await _quietly(update.callback_query.answer(REFUSAL))
        elif message is not None:
            await _quietly(message.reply_text(REFUSAL))
        raise ApplicationHandlerStop

    def _wrap(
        self, command: Callable[[list[str], str], Awaitable[str | list[str]]]
    ) -> Callable[[Update, Ctx], Coroutine[Any, Any, None]]:
        async def handler(update: Update, context: Ctx) -> None:
            message = update.effective_message
            if message is None:
                return
            who = _who(update)
            try:
                answer = await command(list(context.args or []), who)
            except UsageError as exc:
                answer = h(str(exc))
            except _Ask as ask:
                keyboard = _keyboard(ask.nonce, ask.labels)
                await message.reply_text(ask.text, parse_mode=ParseMode.HTML, reply_markup=keyboard)
                return
            if isinstance(answer, str):
                answer = [answer]
            for text in answer:
                for part in texts.split(text):
                    await message.reply_text(part, parse_mode=ParseMode.HTML)

        return handler

    # -- looking ---------------------------------------------------------------------------

    async def cmd_help(self, _args: list[str], _who: str) -> str:
        return "\n".join(f"/{n} {h(d)}" for n, d in COMMANDS)

    async def cmd_status(self, _args: list[str], _who: str) -> str:
        now = self.clock.now()
        lines = []
        for name, w in self.workers.items():
            line = f"<b>{h(name)}</b>: {w.state.value} for {texts.ago(now - w.since)}"
            figures = []
            if w.last_ttft_s is not None:
                figures.append(f"ttft {w.last_ttft_s:.2f}s")
            if w.last_tok_s is not None:
                figures.append(f"{w.last_tok_s:.1f} tok/s")
            if figures:
                line += f" ({', '.join(figures)})"
            if w.incident_id is not None:
                line += f" · incident #{w.incident_id}"
            lines.append(line)
        for name, host in self.hosts.items():
            lines.append(f"host {h(name)}: {host.state} for {texts.ago(now - host.since)}")
        paused = self.control is not None and self.control.fleet_paused
        lines.append("automatic action: " + ("paused (/resume)" if paused else "on"))
        if self.store.fence_epoch is not None:  # [leadership] several instances: who leads
            lines.append(h(leadership_line(await leader_view(self.store))))
        return "\n".join(lines)

    async def cmd_incidents(self, args: list[str], _who: str) -> str:
        limit = _number(args[0], "N", low=1, high=50) if args else 5
        rows = await self.store.incidents(limit=limit)
        if not rows:
            return "no incidents"
        lines = []
        for row in rows:
            when = row.opened_at.strftime("%Y-%m-%d %H:%M:%SZ")
            took = row.duration
            status = "open" if took is None else f"closed after {texts.ago(took)}"
            lines.append(f"#{row.id} {h(row.subject)} {h(row.last_state)} · {when} · {status}")
            lines.append(f"  {h(row.cause)}")
        return "\n".join(lines)

    async def cmd_timeline(self, args: list[str], _who: str) -> str:
        incident_id = _incident_arg(args, "/timeline ID")
        incident = await self.store.incident(incident_id)
        if incident is None:
            raise UsageError(f"no incident {incident_id}")
        lines = [f"incident #{incident.id}: {h(incident.subject)}: {h(incident.cause)}"]
        for row in await self.store.timeline(incident_id):
            summary = row.summary if len(row.summary) <= 300 else row.summary[:299] + "…"
            lines.append(f"{row.at.strftime('%H:%M:%S')} {row.kind.value}: {h(summary)}")
        return "\n".join(lines)

    async def cmd_diagnose(self, args: list[str], _who: str) -> str:
        worker = self._endpoint(args, "/diagnose NAME")
        if self._diagnose is None:
            raise UsageError("diagnosis is not available here")
        lines = await self._diagnose(worker.name)
        return "\n".join(h(line) for line in lines)

    # -- acting ----------------------------------------------------------------------------

    async def cmd_restart(self, args: list[str], who: str) -> str:
        worker = self._endpoint(args, "/restart NAME")
        if self.remediator is None or self.control is None:
            raise UsageError("restarts are not available here")
        raise _Ask(
            f"Restart <b>{h(worker.name)}</b> (now {worker.state.value})? It goes through the "
            "guarded repair path: budgets, locks and startup grace apply.",
            self._ask("restart", worker.name),
            ("Confirm restart", "Cancel"),
        )

    async def cmd_ack(self, args: list[str], who: str) -> str:
        incident_id = _incident_arg(args, "/ack ID")
        return _said(await self._control().ack(incident_id, actor=_actor(who)))

    async def remember_ack(self, incident_id: int, actor: Actor) -> None:
        """The control API's ack hook: the composer sends no more reminders."""
        async with self._memory_lock:
            memory = Memory.from_json(await self.outbox.state(incident_id))
            memory = replace(memory, acked_by=actor.who)
            await self.outbox.put_state(incident_id, memory.to_json(), active=memory.active)

    async def cmd_silence(self, args: list[str], who: str) -> str:
        if len(args) < 2:
            raise UsageError("usage: /silence NAME 2h")
        try:
            length = parse_duration(args[1])
        except DurationError as exc:
            raise UsageError(str(exc)) from None
        answer = await self._control().silence(
            args[0], actor=_actor(who), length=length, why=" ".join(args[2:])
        )
        return _said(answer)

    async def cmd_unsilence(self, args: list[str], who: str) -> str:
        if len(args) != 1:
            raise UsageError("usage: /unsilence NAME")
        return _said(await self._control().unsilence(args[0], actor=_actor(who)))

    async def cmd_pause(self, args: list[str], who: str) -> str:
        endpoint = self._optional_endpoint(args, "/pause [NAME]")
        return _said(await self._control().pause(actor=_actor(who), endpoint=endpoint))

    async def cmd_resume(self, args: list[str], who: str) -> str:
        endpoint = self._optional_endpoint(args, "/resume [NAME]")
        return _said(await self._control().resume(actor=_actor(who), endpoint=endpoint))

    def _control(self) -> ControlApi:
        if self.control is None:
            raise UsageError("control is not available here")
        return self.control

    # -- questions and buttons -------------------------------------------------------------

    def _ask(self, kind: str, endpoint: str, answer: asyncio.Future[bool] | None = None) -> str:
        nonce = secrets.token_urlsafe(8)
        self._questions[nonce] = _Question(kind=kind, endpoint=endpoint, answer=answer)
        return nonce

    async def approve(self, app: App, endpoint: str, rule: Rule, plan: list[str]) -> bool | None:
        """The Approver of confirm-mode rules: Apply/Skip in every chat; None after the
        confirm timeout."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        nonce = self._ask("approve", endpoint, answer)
        lines = [f"❓ <b>{h(endpoint)}</b>: rule {h(rule.id)} matched: {h(rule.title)}"]
        lines += [f"{i}. {h(step)}" for i, step in enumerate(plan, 1)]
        lines.append("Apply it?")
        keyboard = _keyboard(nonce, ("Apply", "Skip"))
        sent = []
        for chat_id in self.telegram.chat_ids:
            try:
                sent.append(
                    await app.bot.send_message(
                        chat_id,
                        texts.split("\n".join(lines))[0],
                        parse_mode=ParseMode.HTML,
                        reply_markup=keyboard,
                    )
                )
            except TelegramError as exc:
                log.warning("telegram: cannot ask", endpoint=endpoint, error=str(exc))
        timeout = self.config.notify.confirm_timeout
        try:
            async with asyncio.timeout(timeout.total_seconds()):
                return await answer
        except TimeoutError:
            for message in sent:
                note = f"no answer within {format_duration(timeout)}: {rule.id} skipped"
                await _quietly(message.edit_text(h(note)))
            return None
        finally:
            self._questions.pop(nonce, None)

    async def _on_button(self, update: Update, _context: Ctx) -> None:
        query = update.callback_query
        if query is None or not query.data:
            return
        nonce, _, choice = query.data.partition(":")
        question = self._questions.pop(nonce, None)
        if question is None:
            await _quietly(query.answer("this question has expired"))
            return
        yes = choice == "yes"
        who = _who(update)
        await _quietly(query.answer())
        if question.kind == "approve" and question.answer is not None:
            if not question.answer.done():
                question.answer.set_result(yes)
            verdict = "applying" if yes else "skipped"
            await _quietly(query.edit_message_text(h(f"{question.endpoint}: {verdict} ({who})")))
            return
        worker = self.workers.get(question.endpoint)
        if not yes or worker is None or self.remediator is None:
            await _quietly(query.edit_message_text(h(f"restart of {question.endpoint} cancelled")))
            return
        await _quietly(query.edit_message_text(h(f"restarting {worker.name} (asked by {who})…")))
        answer = await self._control().restart(worker.name, actor=_actor(who))
        if isinstance(query.message, Message):
            await _quietly(query.message.reply_text(h(answer.text)))

    # -- arguments -------------------------------------------------------------------------

    def _optional_endpoint(self, args: list[str], usage: str) -> str | None:
        if len(args) > 1:
            raise UsageError(f"usage: {usage}")
        return args[0] if args else None

    def _endpoint(self, args: list[str], usage: str) -> EndpointWorker:
        if len(args) != 1:
            raise UsageError(f"usage: {usage}")
        worker = self.workers.get(args[0])
        if worker is None:
            known = ", ".join(self.workers) or "none"
            raise UsageError(f"no endpoint {args[0]!r} (endpoints: {known})")
        return worker


class _Ask(Exception):  # noqa: N818 - not an error: a question with buttons
    def __init__(self, text: str, nonce: str, labels: tuple[str, str]) -> None:
        super().__init__(text)
        self.text, self.nonce, self.labels = text, nonce, labels


def _keyboard(nonce: str, labels: tuple[str, str]) -> InlineKeyboardMarkup:
    yes, no = labels
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton(yes, callback_data=f"{nonce}:yes"),
                InlineKeyboardButton(no, callback_data=f"{nonce}:no"),
            ]
        ]
    )


_CONTROL = frozenset({"silence", "unsilence", "pause", "resume", "ack", "restart"})
"""Commands that are control actions: a stranger's try is recorded in the control journal."""


def _actor(who: str) -> Actor:
    return Actor(who=who, via=Via.TELEGRAM)


def _said(answer: Answer) -> str:
    return h(answer.text)


def _who(update: Update) -> str:
    user = update.effective_user
    if user is None:
        return "someone on Telegram"
    return f"@{user.username}" if user.username else f"Telegram user {user.id}"


def _number(text: str, name: str, *, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise UsageError(f"{name} must be a whole number from {low} to {high}, got {text!r}")
    return value


def _incident_arg(args: list[str], usage: str) -> int:
    if len(args) != 1:
        raise UsageError(f"usage: {usage}")
    try:
        value = int(args[0].lstrip("#"))
    except ValueError:
        raise UsageError(f"an incident id is a number, got {args[0]!r}") from None
    return value


async def _quietly(call: Awaitable[object]) -> None:
    try:
        await call
    except TelegramError as exc:
        log.warning("telegram call failed", error=str(exc))

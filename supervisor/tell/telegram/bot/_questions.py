"""The bot's questions with buttons: a `/restart` waits for its Confirm button, a confirm-mode
rule for Apply or Skip (`Questions.approve`, the runner's Approver, with the confirm timeout).
A button answers the question its nonce names, once; an unknown or used nonce has expired."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from telegram import Message, Update
from telegram.constants import ParseMode
from telegram.error import TelegramError

from supervisor.config.models import FleetConfig
from supervisor.config.sections import TelegramConfig
from supervisor.control import ControlApi
from supervisor.core.durations import format_duration
from supervisor.playbook.model import Rule
from supervisor.repair import Remediator
from supervisor.tell.telegram import texts
from supervisor.tell.telegram.bot._common import (
    App,
    Ctx,
    chat_actor,
    control_of,
    keyboard,
    log,
    send_quietly,
    who_asked,
)
from supervisor.tell.telegram.replies import Replies
from supervisor.tell.telegram.texts import h
from supervisor.worker import EndpointWorker


@dataclass(frozen=True, kw_only=True)
class _Question:
    kind: str  #: restart or approve
    endpoint: str
    answer: asyncio.Future[bool] | None = None


class Questions:
    def __init__(
        self,
        *,
        config: FleetConfig,
        telegram: TelegramConfig,
        workers: Mapping[str, EndpointWorker],
        remediator: Remediator | None,
        control: ControlApi | None,
        replies: Replies,
    ) -> None:
        self._replies = replies
        self._config = config
        self._telegram = telegram
        self._workers = workers
        self._remediator = remediator
        self._control = control
        self._questions: dict[str, _Question] = {}

    def ask(self, kind: str, endpoint: str, answer: asyncio.Future[bool] | None = None) -> str:
        """A new question about `endpoint`; its nonce goes into the buttons' data."""
        nonce = secrets.token_urlsafe(8)
        self._questions[nonce] = _Question(kind=kind, endpoint=endpoint, answer=answer)
        return nonce

    def cancel(self) -> None:
        """The bot stops: nobody waits for an answer any more."""
        for question in self._questions.values():
            if question.answer is not None and not question.answer.done():
                question.answer.cancel()

    async def approve(self, app: App, endpoint: str, rule: Rule, plan: list[str]) -> bool | None:
        """The Approver of confirm-mode rules: Apply/Skip in every chat; None after the
        confirm timeout."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        nonce = self.ask("approve", endpoint, answer)
        lines = [f"❓ <b>{h(endpoint)}</b>: rule {h(rule.id)} matched: {h(rule.title)}"]
        lines += [f"{i}. {h(step)}" for i, step in enumerate(plan, 1)]
        lines.append("Apply it?")
        buttons = keyboard(nonce, ("Apply", "Skip"))
        sent = []
        for chat_id in self._telegram.chat_ids:
            try:
                sent.append(
                    await app.bot.send_message(
                        chat_id,
                        texts.split("\n".join(lines))[0],
                        parse_mode=ParseMode.HTML,
                        reply_markup=buttons,
                    )
                )
            except TelegramError as exc:
                log.warning("telegram: cannot ask", endpoint=endpoint, error=str(exc))
        timeout = self._config.notify.confirm_timeout
        try:
            async with asyncio.timeout(timeout.total_seconds()):
                return await answer
        except TimeoutError:
            for message in sent:
                note = f"no answer within {format_duration(timeout)}: {rule.id} skipped"
                await send_quietly(message.edit_text(h(note)))
            return None
        finally:
            self._questions.pop(nonce, None)

    async def on_button(self, update: Update, _context: Ctx) -> None:
        query = update.callback_query
        if query is None or not query.data:
            return
        nonce, _, choice = query.data.partition(":")
        question = self._questions.pop(nonce, None)
        if question is None:
            await send_quietly(query.answer("this question has expired"))
            return
        yes = choice == "yes"
        who = who_asked(update)
        await send_quietly(query.answer())
        if question.kind == "approve" and question.answer is not None:
            if not question.answer.done():
                question.answer.set_result(yes)
            verdict = "applying" if yes else "skipped"
            await send_quietly(
                query.edit_message_text(h(f"{question.endpoint}: {verdict} ({who})"))
            )
            return
        worker = self._workers.get(question.endpoint)
        if not yes or worker is None or self._remediator is None:
            await send_quietly(
                query.edit_message_text(h(f"restart of {question.endpoint} cancelled"))
            )
            return
        await send_quietly(
            query.edit_message_text(h(f"restarting {worker.name} (asked by {who})…"))
        )
        answer = await control_of(self._control).restart(worker.name, actor=chat_actor(who))
        if isinstance(query.message, Message):  # on the answers' paced, retrying path
            self._replies.say(query.message.chat_id, query.message.message_id, [h(answer.text)])

"""What the bot's parts share: a bad argument (`UsageError`, its text goes back to the chat as
is), a question with buttons (`Ask`), reading the arguments, who asked, and Telegram calls whose
failure is only logged."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

import structlog
from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import TelegramError
from telegram.ext import Application, ContextTypes

from supervisor.control import ControlApi
from supervisor.control.model import Answer
from supervisor.core.actor import Actor, Via
from supervisor.tell.telegram.texts import h
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.notify")

Ctx = ContextTypes.DEFAULT_TYPE
App = Application[Any, Any, Any, Any, Any, Any]


class UsageError(Exception):
    """A bad argument: the text goes back to the chat as is."""


class Ask(Exception):  # noqa: N818 - not an error: a question with buttons
    """The answer to a command is a question: `text` with two buttons (`labels`, yes first)."""

    def __init__(self, text: str, nonce: str, labels: tuple[str, str]) -> None:
        super().__init__(text)
        self.text, self.nonce, self.labels = text, nonce, labels


def keyboard(nonce: str, labels: tuple[str, str]) -> InlineKeyboardMarkup:
    yes, no = labels
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton(yes, callback_data=f"{nonce}:yes"),
                InlineKeyboardButton(no, callback_data=f"{nonce}:no"),
            ]
        ]
    )


def chat_actor(who: str) -> Actor:
    return Actor(who=who, via=Via.TELEGRAM)


def said(answer: Answer) -> str:
    return h(answer.text)


def who_asked(update: Update) -> str:
    user = update.effective_user
    if user is None:
        return "someone on Telegram"
    return f"@{user.username}" if user.username else f"Telegram user {user.id}"


def parse_number(text: str, name: str, *, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise UsageError(f"{name} must be a whole number from {low} to {high}, got {text!r}")
    return value


def incident_arg(args: list[str], usage: str) -> int:
    if len(args) != 1:
        raise UsageError(f"usage: {usage}")
    try:
        value = int(args[0].lstrip("#"))
    except ValueError:
        raise UsageError(f"an incident id is a number, got {args[0]!r}") from None
    return value


def optional_endpoint(args: list[str], usage: str) -> str | None:
    if len(args) > 1:
        raise UsageError(f"usage: {usage}")
    return args[0] if args else None


def endpoint_arg(
    workers: Mapping[str, EndpointWorker], args: list[str], usage: str
) -> EndpointWorker:
    if len(args) != 1:
        raise UsageError(f"usage: {usage}")
    worker = workers.get(args[0])
    if worker is None:
        known = ", ".join(workers) or "none"
        raise UsageError(f"no endpoint {args[0]!r} (endpoints: {known})")
    return worker


async def send_quietly(call: Awaitable[object]) -> None:
    try:
        await call
    except TelegramError as exc:
        log.warning("telegram call failed", error=str(exc))


def control_of(control: ControlApi | None) -> ControlApi:
    if control is None:
        raise UsageError("control is not available here")
    return control

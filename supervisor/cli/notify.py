"""`notify-test`: send one message to every configured chat and say what happened to each. The
Telegram client is imported when the command runs, not when the CLI loads (`run` does not need
it unless Telegram is configured)."""

from __future__ import annotations

import argparse
import asyncio
import os

from supervisor.cli.common import CliError, load
from supervisor.config.sections import TelegramConfig
from supervisor.tell.telegram.auth import NotifyError, load_token, quiet_http_logs

TEXT = "fleet-supervisor: test message. Alerts and commands will come through this chat."


def main(args: argparse.Namespace) -> int:
    config = load(args)
    telegram = config.notify.telegram
    if telegram is None:
        raise CliError(f"no notify.telegram section in {config.source}")
    if not telegram.chat_ids:
        raise CliError("notify.telegram.chat_ids is empty: no chat to send to")
    try:
        token = load_token(telegram, os.environ)
    except NotifyError as exc:
        raise CliError(str(exc)) from None
    quiet_http_logs(token)
    lines, ok = asyncio.run(_send(telegram, token))
    print("\n".join(lines))
    return 0 if ok else 1


async def _send(telegram: TelegramConfig, token: str) -> tuple[list[str], bool]:
    from telegram import Bot
    from telegram.error import TelegramError

    bot = Bot(token, base_url=telegram.base_url or "https://api.telegram.org/bot")
    lines: list[str] = []
    ok = True
    try:
        async with bot:
            lines.append(f"bot @{bot.username}")
            for chat_id in telegram.chat_ids:
                try:
                    message = await bot.send_message(chat_id, TEXT)
                    lines.append(f"chat {chat_id}: sent (message {message.message_id})")
                except TelegramError as exc:
                    ok = False
                    lines.append(f"chat {chat_id}: not sent: {exc}")
    except TelegramError as exc:
        return [f"cannot reach the Bot API: {str(exc).replace(token, '<token>')}"], False
    return lines, ok

"""Who may speak to the bot, and where its token comes from (never the YAML, never a log)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from supervisor.config.sections import TelegramConfig

REFUSAL = "Sorry, you are not allowed to use this bot."


class NotifyError(Exception):
    """A plain one-line problem with the Telegram set-up."""


def load_token(telegram: TelegramConfig, environ: Mapping[str, str]) -> str:
    """The bot token from `token_file`, else `$token_env`; errors never contain the token."""
    if telegram.token_file is not None:
        path = Path(telegram.token_file)
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise NotifyError(f"cannot read the Telegram token file {path}: {reason}") from None
        if not token:
            raise NotifyError(f"the Telegram token file {path} is empty")
        return token
    token = environ.get(telegram.token_env, "").strip()
    if not token:
        raise NotifyError(
            f"no Telegram token: set notify.telegram.token_file or ${telegram.token_env}"
        )
    return token


def allowed(telegram: TelegramConfig, *, user_id: int | None, chat_id: int | None) -> bool:
    """Only allow-listed users, and only in allow-listed chats."""
    return (
        user_id is not None
        and chat_id is not None
        and user_id in telegram.user_ids
        and chat_id in telegram.chat_ids
    )


class _Redact(logging.Filter):
    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if self._token in text:
            record.msg, record.args = text.replace(self._token, "<token>"), None
        return True


def quiet_http_logs(token: str) -> None:
    """httpx logs every request URL at INFO, and python-telegram-bot puts the token in the
    URL: keep those loggers at WARNING and scrub the token from whatever they still say."""
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in (
        "httpx",
        "httpcore",
        "telegram",
        "telegram.ext",
        "telegram.ext.Updater",
        "telegram.ext.Application",
        "telegram.Bot",
        "telegram.ext.ExtBot",
    ):
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, _Redact)]:
            logger.removeFilter(old)
        logger.addFilter(_Redact(token))

"""Every Bot API call of the daemon's bot passes here first (python-telegram-bot's request
class, one for the poller's `getUpdates` and one for the rest): a leader that no longer holds
its lease by its own clock (`supervisor.core.tenure`: woken from a freeze, say) makes no call at
all. The poller's long poll then waits, without a request, until the supervisor is torn down (so
python-telegram-bot neither retries nor logs); any other call is refused with `DeposedError`."""

from __future__ import annotations

from typing import Any

import structlog
from telegram.error import Conflict, TelegramError
from telegram.request import HTTPXRequest

from supervisor.core.tenure import Tenure

log = structlog.get_logger("supervisor.notify")


class DeposedError(TelegramError):
    """A Bot API call a deposed leader did not make."""

    expected_end = True  #: a warning without traceback (`supervisor.core.logs`)


class TenuredRequest(HTTPXRequest):
    def __init__(self, tenure: Tenure, *, part: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tenure = tenure
        self._part = part

    async def do_request(
        self, url: str, method: str, *args: Any, **kwargs: Any
    ) -> tuple[int, bytes]:
        if self._tenure.stops(self._part):
            name = url.rsplit("/", 1)[-1]
            raise DeposedError(f"{name} not sent: this instance no longer leads")
        return await super().do_request(url, method, *args, **kwargs)


def polling_failed(exc: TelegramError) -> None:
    """python-telegram-bot's poller could not get updates (its `error_callback`): one warning,
    no traceback; it retries on its own. A conflict says what it means."""
    if isinstance(exc, DeposedError):
        return  # said once already (`deposed`)
    if isinstance(exc, Conflict):
        log.warning(
            "telegram: another instance polls with this bot's token",
            meaning="the Bot API lets one consumer poll a token; the other one ended our long "
            "poll (a second daemon on this token, or a deposed leader woken from a freeze); we "
            "poll again",
            error=str(exc),
        )
        return
    log.warning("telegram: polling failed; retrying", error=str(exc))

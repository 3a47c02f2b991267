"""Every Bot API call of the daemon's bot passes here first (python-telegram-bot's request
class, one for the poller's `getUpdates` and one for the rest): a leader that no longer holds
its lease by its own clock (`supervisor.core.tenure`: woken from a freeze, say) makes no call at
all. The poller's long poll then waits, without a request, until the supervisor is torn down (so
python-telegram-bot neither retries nor logs); any other call is refused with `DeposedError`."""

from __future__ import annotations

from typing import Any

from telegram.error import TelegramError
from telegram.request import HTTPXRequest

from supervisor.core.tenure import Tenure


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

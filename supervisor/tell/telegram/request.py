"""Every Bot API call of the daemon's bot passes here first (python-telegram-bot's request
class, one for the poller's `getUpdates` and one for the rest): a leader that no longer holds
its lease by its own clock (`supervisor.core.tenure`: woken from a freeze, say) makes no call at
all; the call is refused with `DeposedError` (python-telegram-bot's poller retries it without a
request and says nothing: `polling_failed`).

The check is made twice: when the call begins (`do_request`), and again just before its
headers and its body are written to the connection (httpx's documented `trace` request
extension, put on each request by the client's `request` event hook), so a leader frozen
between the two (waiting for a pooled connection, say) and woken after its lease ran out still
sends nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import structlog
from telegram.error import Conflict, NetworkError, TelegramError
from telegram.request import HTTPXRequest

from supervisor.core.tenure import Tenure
from supervisor.core.tls import default_tls

log = structlog.get_logger("supervisor.notify")

#: the trace events (httpcore's names, through httpx) that start writing a request's bytes
WRITES = frozenset(
    f"{http}.{step}.started"
    for http in ("http11", "http2")
    for step in ("send_request_headers", "send_request_body")
)


class DeposedError(TelegramError):
    """A Bot API call a deposed leader did not make."""

    expected_end = True  #: a warning without traceback (`supervisor.core.logs`)


def _refused(method: str) -> DeposedError:
    return DeposedError(f"{method} not sent: this instance no longer leads")


def _fence(tenure: Tenure, part: str) -> Callable[[httpx.Request], Awaitable[None]]:
    """The client's `request` hook: the request's writes first ask `tenure`."""

    async def on_request(request: httpx.Request) -> None:
        method = request.url.path.rsplit("/", 1)[-1]

        async def trace(event: str, _info: dict[str, Any]) -> None:
            if event in WRITES and tenure.stops(part):
                raise _refused(method)

        request.extensions["trace"] = trace

    return on_request


class TenuredRequest(HTTPXRequest):
    """python-telegram-bot's httpx request, fenced by `tenure`. It verifies with the process's
    one CA-bundle context, read at the first TLS connection (httpx's default reads certifi's
    bundle for each client: about 50 ms of CPU, twice at each start)."""

    def __init__(self, tenure: Tenure, *, part: str, connection_pool_size: int) -> None:
        super().__init__(
            connection_pool_size=connection_pool_size,
            httpx_kwargs={
                "verify": default_tls(),
                "event_hooks": {"request": [_fence(tenure, part)]},
            },
        )
        self._tenure = tenure
        self._part = part

    async def do_request(
        self, url: str, method: str, *args: Any, **kwargs: Any
    ) -> tuple[int, bytes]:
        name = url.rsplit("/", 1)[-1]
        if self._tenure.stops(self._part):
            raise _refused(name)
        try:
            return await super().do_request(url, method, *args, **kwargs)
        except NetworkError:
            if self._tenure.stops(self._part):  # lost while the answer was awaited
                raise _refused(name) from None
            raise


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

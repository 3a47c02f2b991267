"""Every Bot API call of the daemon's bot passes here first (python-telegram-bot's request
class, one for the poller's `getUpdates` and one for the rest): a leader that no longer holds
its lease by its own clock (`supervisor.core.tenure`: woken from a freeze, say) makes no call at
all; the call is refused with `DeposedError` (python-telegram-bot's poller retries it without a
request and says nothing: `polling_failed`).

The check is made twice: when the call begins, and again as its bytes are written to the socket
(a network backend under httpx's pool), so a leader frozen between the two (waiting for a pooled
connection, say) and woken after its lease ran out still sends nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import httpcore
import httpx
import structlog
from telegram.error import Conflict, NetworkError, TelegramError
from telegram.request import HTTPXRequest

from supervisor.core.tenure import Tenure
from supervisor.probe.wire import default_tls

log = structlog.get_logger("supervisor.notify")


class DeposedError(TelegramError):
    """A Bot API call a deposed leader did not make."""

    expected_end = True  #: a warning without traceback (`supervisor.core.logs`)


class _TenuredStream(httpcore.AsyncNetworkStream):
    """A connection whose every write first asks whether we still lead."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, holds: Callable[[], bool]) -> None:
        self._inner = inner
        self._holds = holds

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not self._holds():
            raise httpcore.WriteError("not sent: this instance no longer leads")
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        inner = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return _TenuredStream(inner, self._holds)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _TenuredBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend, holds: Callable[[], bool]) -> None:
        self._inner = inner
        self._holds = holds

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _TenuredStream(stream, self._holds)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_unix_socket(path, timeout, socket_options)
        return _TenuredStream(stream, self._holds)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _transport(tenure: Tenure, connections: int) -> httpx.AsyncHTTPTransport:
    """httpx's transport, its connections' writes asking `tenure` (httpx builds the pool; the
    pool's network backend is wrapped). It verifies with the process's one CA-bundle context,
    read at the first TLS connection (httpx's default reads certifi's bundle for each transport:
    about 50 ms of CPU, twice at each start)."""
    transport = httpx.AsyncHTTPTransport(
        verify=default_tls(), limits=httpx.Limits(max_connections=connections)
    )
    pool = transport._pool
    pool._network_backend = _TenuredBackend(pool._network_backend, tenure.holds)
    return transport


class TenuredRequest(HTTPXRequest):
    def __init__(self, tenure: Tenure, *, part: str, connection_pool_size: int) -> None:
        super().__init__(
            connection_pool_size=connection_pool_size,
            httpx_kwargs={"transport": _transport(tenure, connection_pool_size)},
        )
        self._tenure = tenure
        self._part = part

    async def do_request(
        self, url: str, method: str, *args: Any, **kwargs: Any
    ) -> tuple[int, bytes]:
        name = url.rsplit("/", 1)[-1]
        if self._tenure.stops(self._part):
            raise DeposedError(f"{name} not sent: this instance no longer leads")
        try:
            return await super().do_request(url, method, *args, **kwargs)
        except NetworkError:
            if self._tenure.stops(self._part):  # refused as it was written (`_TenuredStream`)
                raise DeposedError(f"{name} not sent: this instance no longer leads") from None
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

"""The daemon's one HTTP client, on aiohttp: the probes', the repair runner's, the `/metrics`
reads', the doctor's and the CLI's. `HttpClient` makes its `aiohttp.ClientSession` at its first
request, so one made for a healthy fleet that never asks costs nothing.

What every request gets, on purpose:

- no redirects followed (a 3xx is the answer), no proxies from the environment, no cookies, no
  `Accept-Encoding` asked for (servers answer as they are; nothing is decompressed);
- no timeout of its own: the caller bounds each request with `asyncio.timeout` (a request cut
  half way closes its connection);
- TLS only for `https` URLs, with the context given, else the shared `default_tls()`;
- keep-alive: a connection whose answer was read to its end serves the next request to its
  origin while it has been idle less than `KEEPALIVE_S`; one the server closed while idle is
  dropped before it is used. aiohttp sends a GET once more on a new connection when a kept one
  ends before an answer (RFC 9112, 9.3.1: idempotent); a POST never: a completion is not sent
  twice to a server that may have received it.

Its failures are aiohttp's exceptions (`HttpError`); `failure_reason` says what one means in
plain words. The rest of the daemon reaches aiohttp's client through this module only (an import
contract): aiohttp is imported here, first, without the CA bundle reads of its default contexts.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import ssl
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, Self

from supervisor import __version__
from supervisor.core.tls import default_tls, no_default_ca_reads

with no_default_ca_reads():  # the contexts aiohttp makes for clients made without one
    import aiohttp

USER_AGENT = f"fleet-supervisor/{__version__}"

KEEPALIVE_S = 4.0
"""How long an idle kept connection may serve the next request: under the 5 s after which vLLM
(uvicorn's `timeout_keep_alive`, `VLLM_HTTP_TIMEOUT_KEEP_ALIVE`) and llama.cpp's server close an
idle one, so a request is never written into a connection its server is closing (a POST that
met such a close would fail, not be sent again)."""

CLOSED_EARLY = "connection closed before the response finished"

HttpError = aiohttp.ClientError
"""What a request that got no usable answer raises (refused, cut short, not HTTP, a bad URL)."""
Response = aiohttp.ClientResponse
"""A streamed answer (`HttpClient.stream`): `status`, `headers`, `content` read as it arrives."""

Headers = Mapping[str, str]
Files = Mapping[str, tuple[str, bytes, str]]  #: field: (file name, content, content type)

_compact = partial(json.dumps, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class WholeReply:
    """One answer, read whole."""

    status_code: int
    headers: Mapping[str, str]  #: case-insensitive names
    content: bytes
    charset: str | None = None  #: the content type's, if it names one

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        """The body as text: its charset when Python knows it, else UTF-8 (bad bytes replaced)."""
        try:
            return self.content.decode(self.charset or "utf-8", "replace")
        except LookupError:
            return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON; raises `ValueError` when it is not."""
        return json.loads(self.content)


class HttpClient:
    """GET and POST read whole (`WholeReply`), or a request streamed (`stream`: aiohttp's response,
    its body read as it arrives). `headers` are sent with that request only."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                ssl=self._tls or default_tls(), limit=0, keepalive_timeout=KEEPALIVE_S
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": USER_AGENT},
                skip_auto_headers=("Accept-Encoding",),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                timeout=aiohttp.ClientTimeout(),  # none: the caller's asyncio.timeout bounds it
                json_serialize=_compact,
            )
        return self._session

    async def get(self, url: str, *, headers: Headers | None = None) -> WholeReply:
        request = self._open().get(url, headers=headers, allow_redirects=False)
        async with request as response:
            return await _whole(response)

    async def post(
        self,
        url: str,
        *,
        json: Any = None,
        form: Mapping[str, str] | None = None,
        files: Files | None = None,
        headers: Headers | None = None,
    ) -> WholeReply:
        """POST a JSON body (`json`), or a form with files (`form`, `files`: multipart)."""
        if form is None and files is None:
            request = self._open().post(url, json=json, headers=headers, allow_redirects=False)
        else:
            data = aiohttp.FormData()
            for name, value in (form or {}).items():
                data.add_field(name, value)
            for name, (filename, content, kind) in (files or {}).items():
                data.add_field(name, content, filename=filename, content_type=kind)
            request = self._open().post(url, data=data, headers=headers, allow_redirects=False)
        async with request as response:
            return await _whole(response)

    def stream(
        self, url: str, *, json: Any, headers: Headers | None = None
    ) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
        """`async with client.stream(url, json=...) as response`: a POST whose answer is read as
        it arrives (`response.content`, line by line)."""
        return self._open().post(url, json=json, headers=headers, allow_redirects=False)


async def _whole(response: aiohttp.ClientResponse) -> WholeReply:
    return WholeReply(
        status_code=response.status,
        headers=response.headers,
        content=await response.read(),
        charset=response.charset,
    )


def failure_reason(exc: aiohttp.ClientError) -> str:
    """A request that got no usable answer, in plain words: `connection refused`, `cannot
    connect: <why>`, `connection closed before the response finished`, `bad URL: <url>`."""
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unreachable, DNS, TLS
        return connect_reason(exc)
    if isinstance(exc, aiohttp.NonHttpUrlClientError):
        return f"bad URL: {exc} (not http:// or https://)"
    if isinstance(exc, aiohttp.InvalidURL):
        why = f" ({_one_line(str(exc.__cause__))})" if exc.__cause__ is not None else ""
        return f"bad URL: {exc.url}{why}"
    # the server closed or reset the connection, cut the body short, or did not speak HTTP
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError):
        return CLOSED_EARLY
    if isinstance(exc, aiohttp.ClientResponseError):  # what aiohttp's parser could not read
        return CLOSED_EARLY
    return f"request failed: {_one_line(str(exc)) or type(exc).__name__}"


def connect_reason(exc: BaseException) -> str:
    """`connection refused` for ECONNREFUSED, else `cannot connect: <the OS's, resolver's or
    TLS's words>`."""
    chain = _chain(exc)
    cause = next((e for e in reversed(chain) if isinstance(e, OSError) and e.errno), None)
    code = cause.errno if cause is not None else None
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"cannot connect: certificate verify failed: {cause.verify_message}"
    if isinstance(cause, ssl.SSLError):
        return f"cannot connect: TLS: {cause.reason or _one_line(str(cause))}"
    if isinstance(cause, socket.gaierror):  # its errno is the resolver's, not the OS's
        return f"cannot connect: {cause.strerror}"
    if code == errno.ECONNREFUSED:
        return "connection refused"
    if code is not None:
        # the OS's words for the errno: asyncio's strerror is "Connect call failed (addr)"
        return f"cannot connect: {os.strerror(code)}"
    innermost = chain[-1]  # aiohttp's own words only wrap it (`Cannot connect to host ...`)
    return f"cannot connect: {_one_line(str(innermost)) or type(innermost).__name__}"


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what caused it, outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _one_line(text: str) -> str:
    return " ".join(text.split())

"""The probes' HTTP/1.1 client: asyncio streams, one small parser, keep-alive per origin.

A probe is a few small requests and one streamed completion, every few seconds, to hundreds of
servers; through httpx each request crossed httpx, httpcore, h11 and anyio (a cancel scope per
layer), and each streamed SSE piece five layers of iterators: that was most of the daemon's CPU
(bench/RESULTS.md, "The probe's cost"). Here a request is one write and a response is read
straight from the socket's buffer: status line, headers, then the body by `Content-Length`,
chunked, or up to the close; an SSE body is read line by line as its chunks arrive.

What it does, and what it leaves out on purpose:

- keep-alive: a connection whose response was read to its end goes back to its origin's idle
  list (scheme, host, port) and serves the next request; one the server closed while idle is
  dropped, and a request that finds its kept connection closed before any byte of an answer is
  sent once more on a new one (a server's idle timeout is not a failed probe);
- TLS only for `https` URLs, with the context given (the CA bundle loaded once), else certifi's;
- no proxies from the environment, no redirects followed (a 3xx is the answer), no cookies, no
  compression asked for (no `Accept-Encoding`: servers answer as is);
- no timeouts of its own: the caller's deadline (`asyncio.timeout` around the probe) bounds
  every request, and a request cancelled half way closes its connection;
- its failures are httpx's exception classes (`ConnectError`, `RemoteProtocolError`,
  `ReadError`, `UnsupportedProtocol`, `InvalidURL`), so that what names them
  (`supervisor.probe.http.transport_reason`, the doctor) reads them as before.

`ProbeHttp`'s `get`, `post`, `stream` and its answers' `status_code`, `headers`, `content`, `text`,
`is_success`, `aread` and `aiter_lines` are the subset of httpx's client the checks use.
"""

from __future__ import annotations

import asyncio
import codecs
import json as jsonlib
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from functools import cache
from types import TracebackType
from typing import Any, ClassVar, NamedTuple, Self
from urllib.parse import quote, urlsplit

import certifi
import httpx

LINE_LIMIT = 1 << 16  #: the longest status, header or chunk-size line taken
READ_SIZE = 1 << 16  #: the most a body read asks the socket for
MAX_HEADERS = 100
IDLE_PER_ORIGIN = 4  #: kept connections per origin (a probe uses one at a time)
_NO_BODY = frozenset({204, 304})
_URL_CACHE = 1024
_SAFE = "/?&=%:@!$'()*+,;~[]"  #: kept as they are in a request target


@cache
def default_tls() -> ssl.SSLContext:
    """The CA bundle httpx uses by default (certifi's), loaded once, on the first `https` URL."""
    return ssl.create_default_context(cafile=certifi.where())


class _Target(NamedTuple):
    origin: tuple[str, str, int]  #: scheme, host, port
    host_header: bytes
    target: bytes  #: path and query, as sent


_targets: dict[str, _Target] = {}


def _target(url: str) -> _Target:
    """Where `url` goes (cached: a probe asks the same few URLs over and over)."""
    found = _targets.get(url)
    if found is not None:
        return found
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if not scheme:
        raise httpx.UnsupportedProtocol(
            "Request URL is missing an 'http://' or 'https://' protocol."
        )
    if scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{scheme}://'.")
    try:
        port = parts.port
    except ValueError as exc:
        raise httpx.InvalidURL(str(exc)) from None
    host = parts.hostname
    if not host:
        raise httpx.InvalidURL(f"Invalid URL {url!r}: no host")
    default = 443 if scheme == "https" else 80
    shown = f"[{host}]" if ":" in host else host
    if port not in (None, default):
        shown = f"{shown}:{port}"
    path = parts.path or "/"
    raw = f"{path}?{parts.query}" if parts.query else path
    found = _Target(
        origin=(scheme, host, port or default),
        host_header=shown.encode("ascii") if shown.isascii() else shown.encode("idna"),
        target=quote(raw, safe=_SAFE).encode("ascii"),
    )
    if len(_targets) >= _URL_CACHE:
        _targets.clear()
    _targets[url] = found
    return found


class _Connection:
    __slots__ = ("origin", "reader", "writer")

    def __init__(
        self,
        origin: tuple[str, str, int],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.origin = origin
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        """Still open on both sides (a server that closed it while idle left its EOF here)."""
        reader = self.reader
        return not (
            reader.at_eof() or reader.exception() is not None or self.writer.transport.is_closing()
        )

    def close(self) -> None:
        self.writer.close()


class _NoAnswerError(Exception):
    """Not one byte of an answer came back (EOF or a reset): a kept connection may be retried."""


def _closed_early() -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError("peer closed connection without sending complete message body")


def _charset(content_type: str) -> str:
    """The `charset` of a content type when Python knows it, else UTF-8 (as httpx reads)."""
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip("\"'")
            try:
                return codecs.lookup(charset).name
            except LookupError:
                break
    return "utf-8"


class ProbeResponse:
    """One answer: status and headers at once, the body when read (`aread`, `aiter_lines`)."""

    __slots__ = (
        "_chunked",
        "_conn",
        "_done",
        "_keep",
        "_left",
        "_pool",
        "_released",
        "content",
        "headers",
        "status_code",
    )

    def __init__(
        self,
        pool: ProbeHttp,
        conn: _Connection,
        status_code: int,
        headers: dict[str, str],
        *,
        keep: bool,
        no_body: bool,
    ) -> None:
        self._pool = pool
        self._conn = conn
        self.status_code = status_code
        self.headers: Mapping[str, str] = headers  #: lower-case names; repeated ones joined
        self.content = b""  #: the body, once `aread` has read it
        self._chunked = False
        self._left = -1  #: bytes left in the body (Content-Length) or the chunk; -1 until close
        self._done = no_body
        if no_body:
            self._left = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked, self._left = True, 0
        elif "transfer-encoding" not in headers and "content-length" in headers:
            value = headers["content-length"]
            if not value.isdigit():
                raise httpx.RemoteProtocolError(f"bad content-length: {value!r}")
            self._left = int(value)
            self._done = self._left == 0
        self._keep = keep and self._left >= 0  #: a body that ends at the close ends the connection
        self._released = False

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode(_charset(self.headers.get("content-type", "")), "replace")

    async def aread(self) -> bytes:
        """The whole body (the connection goes back to its pool when the request ends)."""
        parts = []
        while piece := await self._read_some():
            parts.append(piece)
        self.content = b"".join(parts)
        return self.content

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines, without their ends (`\\n`, `\\r\\n` or `\\r`), as they arrive."""
        decoder = codecs.getincrementaldecoder(_charset(self.headers.get("content-type", "")))(
            errors="replace"
        )
        pending = ""
        while piece := await self._read_some():
            text = pending + decoder.decode(piece)
            if "\r" in text:  # SSE allows \r\n and a lone \r; a \r last may be half of \r\n
                tail = "\r" if text.endswith("\r") else ""
                text = text[:-1] if tail else text
                lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
                pending = lines.pop() + tail
            else:
                lines = text.split("\n")
                pending = lines.pop()
            for line in lines:
                yield line
        rest = pending + decoder.decode(b"", final=True)
        rest = rest[:-1] if rest.endswith("\r") else rest
        if rest:
            for line in rest.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
                yield line

    async def _read_some(self) -> bytes:
        """The next piece of the body as it arrives; b"" at its end."""
        if self._done:
            return b""
        reader = self._conn.reader
        try:
            if self._chunked:
                return await self._read_chunk(reader)
            if self._left < 0:  # up to the close
                piece = await reader.read(READ_SIZE)
                self._done = not piece
                return piece
            piece = await reader.read(min(self._left, READ_SIZE))
            if not piece:
                raise _closed_early()
            self._left -= len(piece)
            self._done = self._left == 0
            return piece
        except OSError as exc:  # a reset, a TLS failure
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc

    async def _read_chunk(self, reader: asyncio.StreamReader) -> bytes:
        while self._left == 0:
            size = await _line(reader)
            try:
                self._left = int(size.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise httpx.RemoteProtocolError(f"bad chunk size: {size[:40]!r}") from None
            if self._left < 0:
                raise httpx.RemoteProtocolError(f"bad chunk size: {size[:40]!r}")
            if self._left == 0:  # the last chunk: trailers up to a blank line
                for _ in range(MAX_HEADERS + 1):
                    if not (await _line(reader)).strip():
                        self._done = True
                        return b""
                raise httpx.RemoteProtocolError("too many trailers")
        piece = await reader.read(min(self._left, READ_SIZE))
        if not piece:
            raise _closed_early()
        self._left -= len(piece)
        if self._left == 0 and (await _line(reader)).strip():
            raise httpx.RemoteProtocolError("a chunk longer than its size")
        return piece

    def release(self) -> None:
        """Back to the pool when read to its end and the server keeps it open; else closed."""
        if self._released:
            return
        self._released = True
        if self._keep and self._done:
            self._pool.keep(self._conn)
        else:
            self._conn.close()


async def _line(reader: asyncio.StreamReader) -> bytes:
    """One line of the head or of the chunked framing, with its end."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        raise _closed_early() from None
    except asyncio.LimitOverrunError:
        raise httpx.RemoteProtocolError("a line longer than 64 KiB") from None
    return line


class _Streaming:
    """`async with client.stream(...) as response`: the response, released at the end."""

    __slots__ = ("_args", "_client", "_response")

    def __init__(self, client: ProbeHttp, args: tuple[str, str, bytes, str | None]) -> None:
        self._client = client
        self._args = args
        self._response: ProbeResponse | None = None

    async def __aenter__(self) -> ProbeResponse:
        self._response = await self._client.send(*self._args)
        return self._response

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._response is not None:
            self._response.release()


class ProbeHttp:
    """One endpoint's probe client (any origin; kept connections per origin)."""

    follow_redirects: ClassVar[bool] = False  #: a 3xx is the answer

    def __init__(self, tls: ssl.SSLContext | None = None, *, user_agent: str) -> None:
        self._tls = tls
        self._head = f"\r\nAccept: */*\r\nUser-Agent: {user_agent}\r\n".encode()
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    async def get(self, url: str) -> ProbeResponse:
        return await self.request("GET", url)

    async def post(
        self,
        url: str,
        *,
        json: Any = None,
        data: Mapping[str, str] | None = None,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
    ) -> ProbeResponse:
        """POST a JSON body (`json`), or a form with files (`data`, `files`: multipart)."""
        if files is not None or data is not None:
            body, kind = multipart(data or {}, files or {})
            return await self.request("POST", url, body=body, content_type=kind)
        return await self.request("POST", url, body=json_body(json), content_type=JSON)

    async def request(
        self, method: str, url: str, *, body: bytes = b"", content_type: str | None = None
    ) -> ProbeResponse:
        """Send and read the whole answer."""
        response = await self.send(method, url, body, content_type)
        try:
            await response.aread()
        finally:
            response.release()
        return response

    def stream(self, method: str, url: str, *, json: Any = None) -> _Streaming:
        """`async with client.stream("POST", url, json=...) as response`: read as it arrives."""
        body = b"" if json is None else json_body(json)
        return _Streaming(self, (method, url, body, None if json is None else JSON))

    async def send(
        self, method: str, url: str, body: bytes, content_type: str | None
    ) -> ProbeResponse:
        """Send the request and read the answer's head; its body is the caller's to read, and
        the caller must `release()` the answer."""
        where = _target(url)
        head = b"%s %s HTTP/1.1\r\nHost: %s%s" % (
            method.encode("ascii"),
            where.target,
            where.host_header,
            self._head,
        )
        if body or method == "POST":
            kind = b"" if content_type is None else b"Content-Type: %s\r\n" % content_type.encode()
            head += kind + b"Content-Length: %d\r\n" % len(body)
        head += b"\r\n"
        kept = self._take(where.origin)
        while True:
            conn = kept if kept is not None else await self._connect(where.origin)
            try:
                return await self._exchange(conn, head, body, no_body=method == "HEAD")
            except _NoAnswerError:
                conn.close()
                if kept is None:
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response."
                    ) from None
                kept = None  # the server closed its kept connection: once more on a new one
            except BaseException:
                conn.close()
                raise

    async def _exchange(
        self, conn: _Connection, head: bytes, body: bytes, *, no_body: bool
    ) -> ProbeResponse:
        writer, reader = conn.writer, conn.reader
        try:
            if len(body) > 4096:
                writer.write(head)
                writer.write(body)
                await writer.drain()
            else:
                writer.write(head + body)
            first = await reader.readuntil(b"\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                raise _closed_early() from None
            raise _NoAnswerError from None
        except asyncio.LimitOverrunError:
            raise httpx.RemoteProtocolError("a status line longer than 64 KiB") from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
        try:
            while True:
                status, keep = _status(first)
                headers = await _headers(reader)
                if not 100 <= status < 200:
                    break
                first = await _line(reader)  # 100 Continue, 103 Early Hints: the answer follows
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
        connection = headers.get("connection", "").lower()
        keep = ("keep-alive" in connection) if not keep else ("close" not in connection)
        return ProbeResponse(
            self, conn, status, headers, keep=keep, no_body=no_body or status in _NO_BODY
        )

    def _take(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn
            conn.close()
        return None

    def keep(self, conn: _Connection) -> None:
        """A connection whose answer was read to its end, for the origin's next request."""
        idle = self._idle.setdefault(conn.origin, [])
        if self._closed or len(idle) >= IDLE_PER_ORIGIN or not conn.usable():
            conn.close()
        else:
            idle.append(conn)

    async def _connect(self, origin: tuple[str, str, int]) -> _Connection:
        scheme, host, port = origin
        tls = (self._tls or default_tls()) if scheme == "https" else None
        try:
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=tls,
                server_hostname=host if tls is not None else None,
                limit=LINE_LIMIT,
                happy_eyeballs_delay=0.25,
            )
        except OSError as exc:
            if exc.errno is None and str(exc).startswith("Multiple exceptions"):
                # every address failed, each its own way (asyncio's words; anyio's below)
                raise httpx.ConnectError("All connection attempts failed") from None
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return _Connection(origin, reader, writer)


def _status(line: bytes) -> tuple[int, bool]:
    """The status code of `HTTP/1.1 200 OK`, and whether HTTP/1.1 keeps the connection."""
    parts = line.split(None, 2)
    code = parts[1] if len(parts) >= 2 else b""
    if (
        len(parts) < 2
        or not parts[0].startswith(b"HTTP/1.")
        or len(code) != 3
        or not code.isdigit()
    ):
        raise httpx.RemoteProtocolError(f"bad status line: {line[:60]!r}")
    return int(code), parts[0] == b"HTTP/1.1"


async def _headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = await _line(reader)
        if line in (b"\r\n", b"\n"):
            return headers
        name, colon, value = line.decode("latin-1").partition(":")
        key = name.strip().lower()
        if not colon or not key:
            raise httpx.RemoteProtocolError(f"bad header line: {line[:60]!r}")
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    raise httpx.RemoteProtocolError("too many headers")


JSON = "application/json"


def json_body(value: Any) -> bytes:
    """As httpx sends `json=`: compact, UTF-8, no NaN."""
    return jsonlib.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _quoted(name: str) -> str:
    return name.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


def multipart(
    data: Mapping[str, str], files: Mapping[str, tuple[str, bytes, str]]
) -> tuple[bytes, str]:
    """A `multipart/form-data` body of fields then files, and its content type."""
    boundary = os.urandom(16).hex()
    parts: list[bytes] = []
    for name, value in data.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(name)}"\r\n\r\n'
            f"{value}\r\n".encode()
        )
    for name, (filename, content, kind) in files.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{_quoted(name)}"; '
            f'filename="{_quoted(filename)}"\r\nContent-Type: {kind}\r\n\r\n'.encode()
            + content
            + b"\r\n"
        )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"

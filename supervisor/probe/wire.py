"""The probes' HTTP/1.1 client: one asyncio protocol, one small parser, keep-alive per origin.

A probe is a few small requests and one streamed completion, every few seconds, to hundreds of
servers; through httpx each request crossed httpx, httpcore, h11 and anyio (a cancel scope per
layer), and each streamed SSE piece five layers of iterators: that was most of the daemon's CPU
(bench/RESULTS.md, "The probe's cost"). Here a request is one write; an answer's head and a whole
body are read from the connection's buffer (status line, headers, then the body by
`Content-Length`, chunked, or up to the close); a streamed body is read in the connection's own
callback as its bytes arrive (`ProbeResponse.read_lines`: framing, lines, and the caller's line
reader, with no task woken per piece).

What it does, and what it leaves out on purpose:

- keep-alive: a connection whose answer was read to its end goes back to its origin's idle list
  (scheme, host, port) and serves the next request; one the server closed while idle is dropped,
  and a request that finds its kept connection closed before any byte of an answer is sent once
  more on a new one (a server's idle timeout is not a failed probe);
- TLS only for `https` URLs, with the context given, else one `CertifiContext` (certifi's CA
  bundle, as httpx verifies by default, read on the first TLS connection);
- no proxies from the environment, no redirects followed (a 3xx is the answer), no cookies, no
  compression asked for (no `Accept-Encoding`: servers answer as is);
- no timeouts of its own: the caller's deadline (`asyncio.timeout` around the probe) bounds
  every request, and a request cancelled half way closes its connection;
- its failures are httpx's exception classes (`ConnectError`, `RemoteProtocolError`,
  `ReadError`, `UnsupportedProtocol`, `InvalidURL`), so that what names them
  (`supervisor.probe.http.transport_reason`, the doctor) reads them as before.

`ProbeHttp`'s `get`, `post`, `stream` and its answers' `status_code`, `headers`, `content`,
`text`, `is_success` and `aread` are the subset of httpx's client the checks use.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import json as jsonlib
import os
import socket
import ssl
import sys
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, ClassVar, NamedTuple, Self
from urllib.parse import quote, urlsplit

import certifi
import httpx

LINE_LIMIT = 1 << 16  #: the longest head (status line and headers) or chunk-size line taken
MAX_HEADERS = 100
IDLE_PER_ORIGIN = 4  #: kept connections per origin (a probe uses one at a time)
_NO_BODY = frozenset({204, 304})
_URL_CACHE = 1024
_SAFE = "/?&=%:@!$'()*+,;~[]"  #: kept as they are in a request target


class CertifiContext(ssl.SSLContext):
    """`ssl.create_default_context(cafile=certifi.where())` (what httpx verifies with by default)
    that reads the CA bundle on its first TLS connection (`wrap_bio`: asyncio's and anyio's;
    `wrap_socket`): a fleet of plain-HTTP endpoints never holds its ~1.6 MB of certificates."""

    _loaded = False

    def __new__(cls) -> Self:
        context = super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)  # hostname checked, cert required
        keylog = os.environ.get("SSLKEYLOGFILE")
        if keylog and not sys.flags.ignore_environment:  # as create_default_context does
            context.keylog_filename = keylog
        return context

    def _load(self) -> None:
        if not self._loaded:
            self.load_verify_locations(cafile=certifi.where())
            self._loaded = True

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self._load()
        return super().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self._load()
        return super().wrap_socket(*args, **kwargs)


@cache
def default_tls() -> ssl.SSLContext:
    """One `CertifiContext` for the clients made without one."""
    return CertifiContext()


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


class _Wire(asyncio.Protocol):
    """One connection's bytes: kept in `buffer` for a head or a whole body, or, while a `sink`
    is set, handed to it as they arrive (a streamed body read in the callback: no task wakes up
    for each piece)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.sink: Callable[[bytes | bytearray], None] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink(data)
        else:
            self.buffer += data
            self.wake()

    def eof_received(self) -> bool:
        self.eof = True
        self.wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def more(self) -> None:
        """Until more bytes arrive or the connection ends."""
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def ended(self) -> httpx.HTTPError:
        """What a read that needed more bytes than came says (a reset, a TLS failure, an EOF)."""
        if isinstance(self.error, OSError):
            return httpx.ReadError(str(self.error) or type(self.error).__name__)
        return _closed_early()


class _Connection:
    __slots__ = ("origin", "transport", "wire")

    def __init__(
        self, origin: tuple[str, str, int], transport: asyncio.Transport, wire: _Wire
    ) -> None:
        self.origin = origin
        self.transport = transport
        self.wire = wire

    def usable(self) -> bool:
        """Open on both sides and quiet (a server that closed it while idle left its EOF)."""
        wire = self.wire
        return not (wire.eof or wire.buffer or self.transport.is_closing())

    def close(self) -> None:
        self.wire.sink = None
        self.transport.close()


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


_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class _Framing:
    """A body's bytes out of what the connection brings: by length, chunked, or up to the close
    (`length` -1). `take` returns the body's pieces in `data`; `done` once the body ended;
    `spare` when bytes came after its end (they are dropped, and so is the connection)."""

    __slots__ = ("_buffer", "_chunked", "_left", "_lines", "_state", "spare")

    def __init__(self, *, chunked: bool, length: int) -> None:
        self._chunked = chunked
        self._left = length  #: of the body (by length), of the chunk (chunked), -1 up to the close
        self._state = _DONE if length == 0 and not chunked else _SIZE if chunked else _DATA
        self._buffer = bytearray()  #: chunked framing not yet complete
        self._lines = 0  #: trailer lines
        self.spare = False

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def to_close(self) -> bool:
        return self._left < 0 and not self._chunked

    def take(self, data: bytes | bytearray) -> list[bytes]:
        if self._state == _DONE:
            self.spare = self.spare or bool(data)
            return []
        if not self._chunked:
            if self._left < 0:
                return [bytes(data)] if data else []
            piece = bytes(data[: self._left])
            self.spare = len(data) > self._left
            self._left -= len(piece)
            if self._left == 0:
                self._state = _DONE
            return [piece] if piece else []
        return self._chunks(data)

    def _chunks(self, data: bytes | bytearray) -> list[bytes]:
        if not self._buffer and self._state == _SIZE:  # most often: one whole chunk, as sent
            end = data.find(b"\r\n")
            head = data[:end]
            if 0 < end <= 8 and not head.strip(b"0123456789abcdefABCDEF"):
                stop = end + 2 + int(head, 16)
                if stop > end + 2 and len(data) == stop + 2 and data.endswith(b"\r\n"):
                    return [bytes(data[end + 2 : stop])]
        buffer = self._buffer
        buffer += data
        pieces: list[bytes] = []
        at = 0
        while at < len(buffer):
            if self._state == _DONE:  # bytes after the last chunk's blank line
                self.spare = True
                at = len(buffer)
                break
            if self._state == _DATA:
                piece = bytes(buffer[at : at + self._left])
                at += len(piece)
                self._left -= len(piece)
                pieces.append(piece)
                if self._left == 0:
                    self._state = _DATA_END
                continue
            end = buffer.find(b"\n", at)
            if end < 0:
                if len(buffer) - at > LINE_LIMIT:
                    raise httpx.RemoteProtocolError("a chunk-size line longer than 64 KiB")
                break
            line = bytes(buffer[at:end]).strip()
            at = end + 1
            if self._state == _SIZE:
                size = line.split(b";", 1)[0].strip()
                if not size or size.strip(b"0123456789abcdefABCDEF"):
                    raise httpx.RemoteProtocolError(f"bad chunk size: {line[:40]!r}")
                self._left = int(size, 16)
                self._state = _DATA if self._left else _TRAILER
            elif self._state == _DATA_END:
                if line:
                    raise httpx.RemoteProtocolError("a chunk longer than its size")
                self._state = _SIZE
            elif self._state == _TRAILER:
                self._lines += 1
                if not line:
                    self._state = _DONE
                elif self._lines > MAX_HEADERS:
                    raise httpx.RemoteProtocolError("too many trailers")
        del buffer[:at]
        return pieces


class _Lines:
    """Text lines out of body pieces, without their ends (`\\n`, `\\r\\n` or a lone `\\r`)."""

    __slots__ = ("_decoder", "_pending")

    def __init__(self, charset: str) -> None:
        self._decoder = codecs.getincrementaldecoder(charset)(errors="replace")
        self._pending = ""

    def take(self, piece: bytes) -> list[str]:
        text = self._pending + self._decoder.decode(piece)
        if "\r" in text:  # a `\r` last may be half of a `\r\n`: kept for the next piece
            tail = "\r" if text.endswith("\r") else ""
            text = text[:-1] if tail else text
            lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
            self._pending = lines.pop() + tail
        else:
            lines = text.split("\n")
            self._pending = lines.pop()
        return lines

    def end(self) -> list[str]:
        rest = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        rest = rest[:-1] if rest.endswith("\r") else rest
        return rest.replace("\r\n", "\n").replace("\r", "\n").split("\n") if rest else []


class ProbeResponse:
    """One answer: its status and headers at once, its body when read (`aread`, `read_lines`)."""

    __slots__ = ("_conn", "_framing", "_keep", "_pool", "content", "headers", "status_code")

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
        self._pool: ProbeHttp | None = pool  #: None once released
        self._conn = conn
        self.status_code = status_code
        self.headers: Mapping[str, str] = headers  #: lower-case names; repeated ones joined
        self.content = b""  #: the body, once `aread` has read it
        if no_body:
            self._framing = _Framing(chunked=False, length=0)
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._framing = _Framing(chunked=True, length=0)
        elif "transfer-encoding" not in headers and "content-length" in headers:
            value = headers["content-length"].strip()
            if not value.isdigit():
                raise httpx.RemoteProtocolError(f"bad content-length: {value!r}")
            self._framing = _Framing(chunked=False, length=int(value))
        else:
            self._framing = _Framing(chunked=False, length=-1)
        self._keep = keep and not self._framing.to_close  #: a body up to the close ends it

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode(_charset(self.headers.get("content-type", "")), "replace")

    async def aread(self) -> bytes:
        """The whole body (the connection goes back to its pool when the request ends)."""
        parts: list[bytes] = []
        framing, wire = self._framing, self._conn.wire
        while True:
            if wire.buffer:
                parts += framing.take(wire.buffer)
                wire.buffer.clear()
            if framing.done:
                break
            if wire.eof:
                if not framing.to_close:
                    raise wire.ended()
                break
            await wire.more()
        self.content = b"".join(parts)
        return self.content

    async def read_lines(self, take: Callable[[str], bool]) -> bool:
        """Hand each line of the body to `take` as it arrives, from the connection's callback,
        until `take` returns True (then True: the rest of the body is `finish`'s) or the body
        ends (False). What `take` raises ends the read and is raised here."""
        framing, wire = self._framing, self._conn.wire
        lines = _Lines(_charset(self.headers.get("content-type", "")))
        outcome: list[bool | BaseException] = []

        def stop(result: bool | BaseException) -> None:
            outcome.append(result)
            wire.sink = None
            wire.wake()

        def sink(data: bytes | bytearray) -> None:
            try:
                for piece in framing.take(data):
                    for line in lines.take(piece):
                        if take(line):
                            stop(True)
                            return
                if framing.done:
                    stop(any(take(line) for line in lines.end()))
            except Exception as exc:  # the reader's own verdict, or a broken framing
                stop(exc)

        buffered = bytes(wire.buffer)
        wire.buffer.clear()
        wire.sink = sink
        if buffered:
            sink(buffered)
        try:
            while not outcome:
                if wire.eof:
                    if not framing.to_close:
                        raise wire.ended()
                    return any(take(line) for line in lines.end())
                await wire.more()
        finally:
            wire.sink = None  # cut short (the deadline) or not, nothing reads for it any more
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    async def finish(self) -> None:
        """Read the rest of the body and let it go (so that the connection can be kept)."""
        self.content = b""
        await self.aread()
        self.content = b""

    def release(self) -> None:
        """Back to the pool when read to its end and the server keeps it open; else closed."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if self._keep and self._framing.done and not self._framing.spare:
            pool.keep(self._conn)
        else:
            self._conn.close()


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

    async def __aexit__(self, *exc_info: object) -> None:
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

    async def __aexit__(self, *exc_info: object) -> None:
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
                conn.transport.write(head + body if len(body) < 4096 else head)
                if len(body) >= 4096:
                    conn.transport.write(body)
                status, headers, keep = await _read_head(conn.wire)
                return ProbeResponse(
                    self,
                    conn,
                    status,
                    headers,
                    keep=keep,
                    no_body=method == "HEAD" or status in _NO_BODY,
                )
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
            transport, wire = await asyncio.get_running_loop().create_connection(
                _Wire,
                host,
                port,
                ssl=tls,
                server_hostname=host if tls is not None else None,
                happy_eyeballs_delay=None if _is_address(host) else 0.25,
            )
        except (ssl.SSLError, socket.gaierror) as exc:  # the handshake, the name: as httpx says
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        except OSError as exc:  # refused, unreachable (every address): in anyio's words
            raise httpx.ConnectError("All connection attempts failed") from exc
        assert isinstance(transport, asyncio.Transport)
        return _Connection(origin, transport, wire)


def _is_address(host: str) -> bool:
    """An IP address, not a name: one address to try, so no Happy Eyeballs race. (Python
    3.11's race, cancelled by a probe's timeout as a connection comes up, can leave that
    socket open; the plain connect closes it.)"""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def _read_head(wire: _Wire) -> tuple[int, dict[str, str], bool]:
    """The answer's status, headers and whether HTTP/1.1 keeps the connection (after any
    `100 Continue`); `_NoAnswerError` when the connection ends before its first byte."""
    buffer = wire.buffer
    while True:
        end = buffer.find(b"\r\n\r\n")
        size = 4
        if end < 0:
            end, size = buffer.find(b"\n\n"), 2
        if end >= 0:
            lines = bytes(buffer[:end]).split(b"\n")
            del buffer[: end + size]
            status, keep = _status(lines[0])
            if 100 <= status < 200:
                continue  # 100 Continue, 103 Early Hints: the answer follows
            headers = _headers(lines[1:])
            connection = headers.get("connection", "").lower()
            keep = ("close" not in connection) if keep else ("keep-alive" in connection)
            return status, headers, keep
        if len(buffer) > LINE_LIMIT:
            raise httpx.RemoteProtocolError("a head longer than 64 KiB")
        if wire.eof:
            if not buffer:
                raise _NoAnswerError
            raise wire.ended()
        await wire.more()


def _status(line: bytes) -> tuple[int, bool]:
    """The status code of `HTTP/1.1 200 OK`, and whether it is HTTP/1.1."""
    parts = line.split(None, 2)
    code = parts[1] if len(parts) >= 2 else b""
    if len(code) != 3 or not code.isdigit() or not parts[0].startswith(b"HTTP/1."):
        raise httpx.RemoteProtocolError(f"bad status line: {line[:60]!r}")
    return int(code), parts[0] == b"HTTP/1.1"


def _headers(lines: list[bytes]) -> dict[str, str]:
    if len(lines) > MAX_HEADERS:
        raise httpx.RemoteProtocolError("too many headers")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.decode("latin-1").partition(":")
        key = name.strip().lower()
        if not colon or not key or key != name.lower():
            raise httpx.RemoteProtocolError(f"bad header line: {line[:60]!r}")
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


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

"""Just enough HTTP/1.1 for the simulated servers: keep-alive, Content-Length bodies, chunked
streaming responses. Built on asyncio streams; no framework, no new dependency."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

MAX_BODY = 8 * 1024 * 1024


class BadRequestError(Exception):
    """The request cannot be parsed; the connection answers 400 and closes."""


@dataclass(frozen=True, kw_only=True)
class Request:
    method: str
    path: str
    query: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)  #: names lower-cased
    body: bytes = b""

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"

    def json(self) -> Any:
        """The body as JSON; raises `ValueError` when it is not."""
        return json.loads(self.body.decode("utf-8"))


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on the connection, or None when the client closed it cleanly."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequestError("the request ended inside its headers") from None
        return None
    except asyncio.LimitOverrunError:
        raise BadRequestError("request headers too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequestError(f"bad request line: {lines[0][:80]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequestError(f"bad header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise BadRequestError("chunked request bodies are not supported")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise BadRequestError("bad Content-Length") from None
    if length < 0 or length > MAX_BODY:
        raise BadRequestError("bad Content-Length")
    body = await reader.readexactly(length) if length else b""
    path, _, query = target.partition("?")
    return Request(
        method=method.upper(), path=path, query=query, version=version, headers=headers, body=body
    )


class Responder:
    """Writes one response (whole or chunked) to the connection."""

    def __init__(self, writer: asyncio.StreamWriter, *, server: str, keep_alive: bool) -> None:
        self._writer = writer
        self._server = server
        self.keep_alive = keep_alive
        self.status: int | None = None

    def _head(self, status: int, headers: dict[str, str]) -> bytes:
        self.status = status
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
        lines.append(f"date: {formatdate(usegmt=True)}")
        lines.append(f"server: {self._server}")
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if not self.keep_alive:
            lines.append("connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(self, status: int, body: bytes = b"", content_type: str | None = None) -> None:
        headers = {"content-length": str(len(body))}
        if content_type is not None:
            headers["content-type"] = content_type
        self._writer.write(self._head(status, headers) + body)
        await self._writer.drain()

    async def send_json(self, status: int, data: Any) -> None:
        await self.send(status, json.dumps(data).encode(), "application/json")

    async def send_text(self, status: int, text: str, content_type: str = "text/plain") -> None:
        await self.send(status, text.encode(), f"{content_type}; charset=utf-8")

    async def start_stream(self, status: int, content_type: str) -> None:
        headers = {"content-type": content_type, "transfer-encoding": "chunked"}
        self._writer.write(self._head(status, headers))
        await self._writer.drain()

    async def chunk(self, data: bytes) -> None:
        if data:
            self._writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await self._writer.drain()

    async def end_stream(self) -> None:
        self._writer.write(b"0\r\n\r\n")
        await self._writer.drain()

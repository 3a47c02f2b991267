"""The daemon's own HTTP server (asyncio streams, loopback by default): `/metrics`
(Prometheus text), `/healthz` (200 when the loop and the store answer, else 503 with the
reason) and `/status` (the `status --json` document, from the live daemon); and the control API
under `/control/` (see `supervisor.control.routes`), answered to loopback peers only.

One request per connection (`Connection: close`); anything else is a plain-text 404/405/400.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import structlog

from supervisor.control import routes as control_routes
from supervisor.ops import metrics
from supervisor.ops.leadership import leadership_metrics
from supervisor.ops.view import gather, status_document
from supervisor.store.lease_view import leader_view, leadership_document

if TYPE_CHECKING:
    from supervisor.control import ControlApi
    from supervisor.daemon import Daemon

log = structlog.get_logger("supervisor.ops.http")

STORE_DEADLINE = 2.0
"""Seconds the store has to answer /healthz."""
_READ_DEADLINE = 5.0
_MAX_HEAD = 16 * 1024
_MAX_BODY = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS |= {403: "Forbidden", 409: "Conflict"}
_REASONS |= {500: "Internal Server Error", 503: "Service Unavailable"}


class ListenError(ValueError):
    """`http.listen` is not HOST:PORT."""


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:9464` -> ("127.0.0.1", 9464); `[::1]:9464` -> ("::1", 9464)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenError(f"http.listen: expected HOST:PORT like 127.0.0.1:9464, got {text!r}")
    return host, int(port)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"

    def encode(self) -> bytes:
        head = (
            f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Error')}\r\n"
            f"Content-Type: {self.content_type}\r\n"
            f"Content-Length: {len(self.body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        return head.encode() + self.body


def _text(status: int, message: str) -> Response:
    return Response(status, (message + "\n").encode())


class OpsServer:
    """Serves the daemon's /metrics, /healthz and /status. `start`, then `stop`."""

    def __init__(
        self,
        daemon: Daemon,
        *,
        listen: str,
        started_at: datetime,
        control: ControlApi | None = None,
    ) -> None:
        self._daemon = daemon
        self._api = control
        self._host, self._port = parse_listen(listen)
        self._started_at = started_at
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when `listen` asked for port 0)."""
        if self._server is None or not self._server.sockets:
            return self._port
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Listen; raises OSError when the address cannot be bound."""
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        log.info("http listening", url=self.url)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_DEADLINE):
                head = await reader.readuntil(b"\r\n\r\n")
                length = _headers(head).get("content-length", "0")
                size = int(length) if length.isdigit() else 0
                body = await reader.readexactly(size) if 0 < size <= _MAX_BODY else b""
            response = await self.respond(head, body, peer=_peer(writer))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            response = _text(400, "bad request: expected one HTTP/1.1 request head")
        except ConnectionError:
            writer.close()
            return
        try:
            writer.write(response.encode())
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def respond(self, head: bytes, body: bytes = b"", *, peer: str = "") -> Response:
        """The response to one request head (request line and headers) and its body, from
        `peer` (an IP address; '' when unknown)."""
        if len(head) > _MAX_HEAD:
            return _text(400, "bad request: request head too large")
        words = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            return _text(400, "bad request: expected a request line like GET /metrics HTTP/1.1")
        method, target = words[0], words[1].split("?", 1)[0]
        if target.startswith(control_routes.PREFIX):
            return await self._control(method, target, head, body, peer)
        routes = {"/metrics": self._metrics, "/healthz": self._healthz, "/status": self._status}
        handler = routes.get(target)
        if handler is None:
            return _text(404, f"not found: {target} (try /metrics, /healthz or /status)")
        if method != "GET":
            return _text(405, f"method not allowed: {method} (only GET)")
        try:
            return await handler()
        except Exception as exc:  # a broken page must not take the daemon down
            log.exception("http handler failed", path=target)
            return _text(500, f"internal error: {exc}")

    async def _control(
        self, method: str, target: str, head: bytes, body: bytes, peer: str
    ) -> Response:
        api = self._api
        if not _loopback(peer):
            return _text(403, f"forbidden: the control API answers loopback peers only, not {peer}")
        if api is None:
            return _text(503, "unavailable: the control API has not started")
        try:
            status, document = await control_routes.handle(
                api, method, target, _headers(head), body
            )
        except Exception as exc:  # a broken control call must not take the daemon down
            log.exception("control request failed", path=target)
            return _text(500, f"internal error: {exc}")
        return Response(status, document, "application/json")

    async def _metrics(self) -> Response:
        view = await gather(self._daemon, self._started_at)
        leader = leadership_metrics(await leader_view(self._daemon.store))  # [leadership]
        return Response(200, (metrics.render(view) + leader).encode(), metrics.CONTENT_TYPE)

    async def _status(self) -> Response:
        document = status_document(await gather(self._daemon, self._started_at))
        document["leadership"] = leadership_document(await leader_view(self._daemon.store))
        body = json.dumps(document, indent=2).encode()
        return Response(200, body, "application/json")

    async def _healthz(self) -> Response:
        reason = await health_problem(self._daemon)
        return _text(503, f"unhealthy: {reason}") if reason else _text(200, "ok")


def _headers(head: bytes) -> dict[str, str]:
    """The request's headers, names lower-cased."""
    found = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            found[name.strip().lower()] = value.strip()
    return found


def _peer(writer: asyncio.StreamWriter) -> str:
    address = writer.get_extra_info("peername")
    return str(address[0]) if isinstance(address, tuple) and address else ""


def _loopback(peer: str) -> bool:
    try:
        return ipaddress.ip_address(peer).is_loopback
    except ValueError:
        return False


async def health_problem(daemon: Daemon) -> str:
    """'' when the daemon is healthy, else why not: its store does not answer, or a worker died.

    (That the event loop answers is shown by this running at all: a hung loop answers nothing.)"""
    store = daemon.store
    try:
        async with asyncio.timeout(STORE_DEADLINE):
            await store.snapshots()
    except TimeoutError:
        return f"the store did not answer within {STORE_DEADLINE:g}s"
    except Exception as exc:
        return f"the store does not answer: {exc}"
    for name in daemon.workers:
        task = worker_task(daemon, name)
        if task is not None and task.done():
            return f"the worker of endpoint {name} stopped"
    return ""


def worker_task(daemon: Daemon, name: str) -> asyncio.Task[None] | None:
    """The task running endpoint `name`'s worker: the newest (a reload restarts workers)."""
    running = [t for t in daemon.worker_tasks(name) if not t.cancelled()]
    return running[-1] if running else None

"""A TCP proxy in the test's event loop between one daemon and PostgreSQL that can stop
forwarding without closing anything (the silent kind of partition: a switch port, a firewall
rule that drops) and later resume: `close()` holds every byte either side sends (and every new
connection) until `open()`; `close_at(start)` closes it as a client sends bytes that begin with
`start` (a partition that begins just as a given message is on its way)."""

from __future__ import annotations

import asyncio
import contextlib


class TcpGate:
    def __init__(self, port: int) -> None:
        self.port = port  #: PostgreSQL's
        self.listen_port = 0  #: the gate's, for the daemon's store URL
        self.forwarding = asyncio.Event()
        self.forwarding.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._close_at: bytes | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        """Stop forwarding: nothing passes, nothing is closed."""
        self.forwarding.clear()

    def close_at(self, start: bytes) -> None:
        """Stop forwarding from the first bytes a client sends that begin with `start` (those
        held too)."""
        self._close_at = start

    def open(self) -> None:
        """Forward again what was held, and what comes."""
        self.forwarding.set()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self.forwarding.wait()
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
            await asyncio.gather(
                self._pipe(reader, up_writer, upstream=True), self._pipe(up_reader, writer)
            )
        except (ConnectionError, OSError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            # here too, not only in the pipes: stopped as it connected, the pipes' tasks are
            # cancelled before their first step, and a task that never started runs no `finally`
            if up_writer is not None:
                up_writer.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool = False
    ) -> None:
        try:
            while data := await reader.read(65536):
                if upstream and self._close_at is not None and data.startswith(self._close_at):
                    self._close_at = None
                    self.close()
                await self.forwarding.wait()  # held, not dropped: TCP's own behaviour
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

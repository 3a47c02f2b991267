"""A transport over ONE SSH connection per host, opened when first needed and again after it
dies; short commands and the follow share it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import asyncssh

from supervisor.config.supervised import Host
from supervisor.execute.base import Failure
from supervisor.execute.local import OutputTail
from supervisor.execute.ssh import SshConnectError, connect, host_where
from supervisor.hear.streams.protocol import (
    STOP_WITHIN_S,
    Follow,
    Ran,
    TransportError,
    command,
    pump,
)


class _SshFollow:
    def __init__(
        self, conn: asyncssh.SSHClientConnection, process: asyncssh.SSHClientProcess[bytes]
    ) -> None:
        self._conn = conn
        self._process = process
        self._err = OutputTail()
        self._pump = asyncio.ensure_future(pump(process.stderr, self._err))

    async def readline(self) -> bytes:
        try:
            return await self._process.stdout.readline()
        except (asyncssh.Error, OSError):
            return b""  # the connection died: the follow has ended

    async def stop(self) -> Ran:
        if self._process.returncode is None and not self._process.is_closing():
            with suppress(OSError, asyncssh.Error):
                self._process.send_signal("TERM")
        self._process.close()
        with suppress(TimeoutError, asyncssh.Error, OSError):
            async with asyncio.timeout(STOP_WITHIN_S):
                await self._process.wait_closed()
                await self._pump
        lost = self._process.returncode is None and self._conn.is_closed()
        error = "connection lost" if lost else ""
        return Ran(status=self._process.returncode, stdout="", stderr=self._err.text(), error=error)


class SshTransport:
    """One SSH connection to `host`, opened when first needed and again after it dies."""

    def __init__(
        self, host: Host, known_hosts_default: Path | None = None, connect_timeout: float = 15.0
    ) -> None:
        self.host = host
        self._known_hosts_default = known_hosts_default
        self._connect_timeout = connect_timeout
        self._conn: asyncssh.SSHClientConnection | None = None
        self._connects = 0

    @property
    def connection(self) -> asyncssh.SSHClientConnection | None:
        """The live connection, if any (tests close it to cut the stream)."""
        return self._conn

    async def _connection(self) -> asyncssh.SSHClientConnection:
        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        self._conn = None
        try:
            async with asyncio.timeout(self._connect_timeout):
                self._conn = await connect(self.host, self._known_hosts_default)
                self._connects += 1
        except TimeoutError:
            raise TransportError(
                f"cannot connect to {host_where(self.host)}: "
                f"no answer within {self._connect_timeout:g}s"
            ) from None
        except SshConnectError as exc:
            raise TransportError(str(exc), lasting=exc.cause is not Failure.CONNECT) from None
        return self._conn

    async def _start(self, argv: Sequence[str], sudo: bool) -> asyncssh.SSHClientProcess[bytes]:
        conn = await self._connection()
        line = command(self.host, argv, sudo=sudo)
        try:
            return await conn.create_process(line, encoding=None, stdin=asyncssh.DEVNULL)
        except (asyncssh.Error, OSError) as exc:
            conn.close()
            raise TransportError(f"connection to {host_where(self.host)} lost: {exc}") from None

    async def run(self, argv: Sequence[str], *, timeout: float, sudo: bool = False) -> Ran:
        process = await self._start(argv, sudo)
        out, err = OutputTail(), OutputTail()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(pump(process.stdout, out), pump(process.stderr, err))
                await process.wait_closed()
        except TimeoutError:
            process.close()
            error = f"timed out after {timeout:g}s"
            return Ran(status=None, stdout=out.text(), stderr=err.text(), error=error)
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"connection to {host_where(self.host)} lost: {exc}") from None
        return Ran(status=process.returncode, stdout=out.text(), stderr=err.text())

    async def follow(self, argv: Sequence[str], *, sudo: bool = False) -> Follow:
        process = await self._start(argv, sudo)
        assert self._conn is not None
        return _SshFollow(self._conn, process)

    @property
    def connects(self) -> int:
        """How many connections this transport opened (a warm one handed over opens none)."""
        return self._connects

    async def wait_closed(self) -> None:
        """Until the connection open now is closed (by the host, by keepalives, by `close`)."""
        if self._conn is not None:
            await self._conn.wait_closed()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with suppress(TimeoutError):
                async with asyncio.timeout(STOP_WITHIN_S):
                    await conn.wait_closed()

"""How the stream reaches a host: one small protocol, over SSH (asyncssh) or a local subprocess.

A transport runs short commands (`run`, each with a deadline) and one long one whose stdout is
read line by line (`follow`). `SshTransport` keeps ONE connection per host (opened with the
fleet's SSH settings, host key checked: `supervisor.executor.ssh.connect`) and runs both over
it, so confirming a unit's state never opens a second connection. A dead connection is found by
SSH keepalives (15 s x 3): the follow then ends, and the stream reconnects.

Errors are `TransportError`: `lasting` when trying again soon cannot help (the login or host key
was refused, the key cannot be read), else a connection that may come back.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import asyncssh

from supervisor.config import Host
from supervisor.executor.base import command_line, tail
from supervisor.executor.local import OutputTail
from supervisor.executor.ssh import SshConnectError, connect, where

LINE_LIMIT = 1024 * 1024  #: bytes one journal line may have (journald's own limit is 48 KiB)
STOP_WITHIN_S = 2.0


class TransportError(Exception):
    """The host cannot be reached or the command cannot be started; the message says why."""

    def __init__(self, reason: str, *, lasting: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.lasting = lasting


@dataclass(frozen=True, kw_only=True)
class Ran:
    """What a short command did: its exit status (None: cut off) and output."""

    status: int | None
    stdout: str
    stderr: str
    error: str = ""  #: why it was cut off (`timed out`, `connection lost`), '' when it ended

    @property
    def ok(self) -> bool:
        return self.status == 0

    def why(self) -> str:
        """The command's own last words: the last line of stderr, else its exit status."""
        if self.error:
            return self.error
        last = tail(self.stderr, 1).strip()
        return last or f"exit status {self.status}"


class Follow(Protocol):
    """A running command whose output is read line by line."""

    async def readline(self) -> bytes:
        """The next line (with its newline); b'' once the command has ended."""
        ...

    async def stop(self) -> Ran:
        """Stop the command (if it still runs) and say how it ended."""
        ...


class Transport(Protocol):
    async def run(self, argv: Sequence[str], *, timeout: float, sudo: bool = False) -> Ran:
        """Run a short command (as root when `sudo`); `TransportError` when the host cannot be
        reached."""
        ...

    async def follow(self, argv: Sequence[str], *, sudo: bool = False) -> Follow:
        """Start a long command; `TransportError` when the host cannot be reached."""
        ...

    async def close(self) -> None: ...


def _is_root_login(host: Host) -> bool:
    if host.local:
        return os.geteuid() == 0
    try:
        return (host.user or getpass.getuser()) == "root"
    except (KeyError, OSError):
        return True


def command(host: Host, argv: Sequence[str], *, sudo: bool) -> str:
    """The line to run: `sudo -n` in front when asked, unless the login is root already."""
    return command_line(argv, sudo=sudo and not _is_root_login(host))


async def _pump(reader: asyncio.StreamReader | asyncssh.SSHReader[bytes], sink: OutputTail) -> None:
    with suppress(asyncssh.Error, OSError):
        while chunk := await reader.read(65536):
            sink.add(chunk)


class _LocalFollow:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._stdout = proc.stdout
        self._err = OutputTail()
        self._pump = asyncio.ensure_future(_pump(proc.stderr, self._err))

    async def readline(self) -> bytes:
        try:
            return await self._stdout.readline()
        except ValueError:  # longer than LINE_LIMIT: dropped, and counted as malformed
            return b"(a line longer than LINE_LIMIT)\n"

    async def stop(self) -> Ran:
        if self._proc.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                async with asyncio.timeout(STOP_WITHIN_S):
                    await self._proc.wait()
            except TimeoutError:
                with suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                await self._proc.wait()
        with suppress(TimeoutError):
            async with asyncio.timeout(STOP_WITHIN_S):
                await self._pump
        return Ran(status=self._proc.returncode, stdout="", stderr=self._err.text())


class LocalTransport:
    """The box the daemon runs on (`local: true`): subprocesses, no shell. `prefix` goes in
    front of every command (the lab enters a simulated host with `nsenter`)."""

    def __init__(self, host: Host, prefix: Sequence[str] = ()) -> None:
        self.host = host
        self._prefix = tuple(prefix)

    async def _spawn(self, argv: Sequence[str], sudo: bool) -> asyncio.subprocess.Process:
        root = () if not sudo or _is_root_login(self.host) else ("sudo", "-n")
        try:
            return await asyncio.create_subprocess_exec(
                *self._prefix,
                *root,
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=LINE_LIMIT,
            )
        except OSError as exc:
            raise TransportError(
                f"cannot run {argv[0]}: {exc.strerror or exc}", lasting=True
            ) from None

    async def run(self, argv: Sequence[str], *, timeout: float, sudo: bool = False) -> Ran:
        proc = await self._spawn(argv, sudo)
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return Ran(status=None, stdout="", stderr="", error=f"timed out after {timeout:g}s")
        return Ran(
            status=proc.returncode,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
        )

    async def follow(self, argv: Sequence[str], *, sudo: bool = False) -> Follow:
        return _LocalFollow(await self._spawn(argv, sudo))

    async def close(self) -> None:
        return None


class _SshFollow:
    def __init__(
        self, conn: asyncssh.SSHClientConnection, process: asyncssh.SSHClientProcess[bytes]
    ) -> None:
        self._conn = conn
        self._process = process
        self._err = OutputTail()
        self._pump = asyncio.ensure_future(_pump(process.stderr, self._err))

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
                f"cannot connect to {where(self.host)}: no answer within {self._connect_timeout:g}s"
            ) from None
        except SshConnectError as exc:
            transient = str(exc).startswith("cannot connect to ")
            raise TransportError(str(exc), lasting=not transient) from None
        return self._conn

    async def _start(self, argv: Sequence[str], sudo: bool) -> asyncssh.SSHClientProcess[bytes]:
        conn = await self._connection()
        line = command(self.host, argv, sudo=sudo)
        try:
            return await conn.create_process(line, encoding=None, stdin=asyncssh.DEVNULL)
        except (asyncssh.Error, OSError) as exc:
            conn.close()
            raise TransportError(f"connection to {where(self.host)} lost: {exc}") from None

    async def run(self, argv: Sequence[str], *, timeout: float, sudo: bool = False) -> Ran:
        process = await self._start(argv, sudo)
        out, err = OutputTail(), OutputTail()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(_pump(process.stdout, out), _pump(process.stderr, err))
                await process.wait_closed()
        except TimeoutError:
            process.close()
            error = f"timed out after {timeout:g}s"
            return Ran(status=None, stdout=out.text(), stderr=err.text(), error=error)
        except (asyncssh.Error, OSError) as exc:
            raise TransportError(f"connection to {where(self.host)} lost: {exc}") from None
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


def transport_for(host: Host, known_hosts_default: Path | None = None) -> Transport:
    return LocalTransport(host) if host.local else SshTransport(host, known_hosts_default)

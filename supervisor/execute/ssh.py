"""Commands on remote hosts over SSH (asyncssh): one connection per host, reused for every command.

Each command runs in its own session on the host's connection (OpenSSH allows 10 at once; we
open at most `MAX_SESSIONS`). A connection that has closed is replaced on the next command. The
call's `timeout` bounds everything: waiting for the connection, logging in and the command.
Errors name the host and say what went wrong; key contents and passphrases never appear.
"""

from __future__ import annotations

import asyncio
import errno
import getpass
import os
import socket
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import asyncssh
import structlog

from supervisor.config.supervised import Host
from supervisor.core.durations import format_duration
from supervisor.execute.base import CommandResult, Failure, command_line
from supervisor.execute.local import OutputTail

log = structlog.get_logger("supervisor.ssh")

MAX_SESSIONS = 8  #: sessions open at once on one connection (OpenSSH's MaxSessions is 10)
#: Waits before opening a session again when sshd refused it on a live connection (OpenSSH
#: answers "open failed", code 2, when its MaxSessions slots are full). A session the client
#: has seen close holds its slot until sshd reads the client's close, late on a loaded host;
#: nothing was sent, so trying again is safe.
SESSION_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
KEEPALIVE_INTERVAL_S = 15
KEEPALIVE_COUNT_MAX = 3
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
READ_CHUNK = 65536


class _CommandError(Exception):
    """The command could not run to completion; the message is the result's error, `cause`
    its kind."""

    def __init__(self, message: str, cause: Failure) -> None:
        super().__init__(message)
        self.cause = cause


def host_where(host: Host) -> str:
    """`spark1 (127.0.0.11:22)`: the host as errors name it."""
    address = host.address or host.name
    shown = f"[{address}]" if ":" in address else address
    return f"{host.name} ({shown}:{host.port})"


def _plain(exc: BaseException) -> str:
    """An exception's reason as a plain phrase: `connection refused`, `no route to host`."""
    if isinstance(exc, asyncssh.DisconnectError | asyncssh.ChannelOpenError):
        text = exc.reason
    elif isinstance(exc, OSError) and not isinstance(exc, socket.gaierror) and exc.errno:
        text = os.strerror(exc.errno)  # asyncio's own text is "Connect call failed (...)"
    elif isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


def _local_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "root"


@dataclass
class _Link:
    """One host's live connection and the sessions it may still open."""

    host: Host
    conn: asyncssh.SSHClientConnection
    sessions: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_SESSIONS))


@dataclass
class _Progress:
    """How far one command got, so a timeout can say what it cut off and keep the output."""

    out: OutputTail = field(default_factory=OutputTail)
    err: OutputTail = field(default_factory=OutputTail)
    connected: bool = False
    process: asyncssh.SSHClientProcess[bytes] | None = None


class SshExecutor:
    """Runs argument lists on hosts over SSH. Hosts without `known_hosts` use
    `known_hosts_default`, else `~/.ssh/known_hosts`."""

    def __init__(self, known_hosts_default: Path | None = None) -> None:
        self._known_hosts_default = known_hosts_default
        self._links: dict[str, _Link] = {}
        self._connect_locks: dict[str, asyncio.Lock] = {}
        self._warned: set[str] = set()

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        timeout: timedelta,
        sudo: bool = False,
        mutating: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        line = command_line(argv, sudo=sudo)
        started = time.monotonic()
        progress = _Progress()
        status: int | None = None
        error = ""
        failure: Failure | None = None
        try:
            async with asyncio.timeout(timeout.total_seconds()):
                status = await self._execute(host, line, stdin, progress)
        except TimeoutError:
            after = f"timed out after {format_duration(timeout)}"
            error = (
                after if progress.connected else f"cannot connect to {host_where(host)}: {after}"
            )
            failure = Failure.TIMED_OUT if progress.connected else Failure.CONNECT
            if progress.process is not None:
                _stop(progress.process)
        except _CommandError as exc:
            error, failure = str(exc), exc.cause
        return CommandResult(
            host=host.name,
            command=line,
            exit_status=status,
            stdout=progress.out.text(),
            stderr=progress.err.text(),
            duration_s=time.monotonic() - started,
            error=error,
            failure=failure,
        )

    async def close(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            link.conn.close()
        for link in links:
            with suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await link.conn.wait_closed()

    async def _execute(self, host: Host, line: str, stdin: str | None, progress: _Progress) -> int:
        for _attempt in range(2):
            link, fresh = await self._link(host)
            progress.connected = True
            async with link.sessions:
                try:
                    process = await _open_session(link.conn, line, stdin)
                except asyncssh.ChannelOpenError as exc:
                    if not link.conn.is_closed():
                        message = f"cannot start a command on {host_where(host)}: {_plain(exc)}"
                        raise _CommandError(message, Failure.START) from None
                    self._drop(host.name, link)
                    if fresh:
                        raise _CommandError(lost_reason(exc), Failure.LOST) from None
                    progress.connected = False
                    continue  # the reused connection had died unnoticed; nothing was sent
                except (asyncssh.Error, OSError) as exc:
                    self._drop(host.name, link)
                    raise _CommandError(lost_reason(exc), Failure.LOST) from None
                progress.process = process
                try:
                    return await _finish(process, progress)
                except _CommandError:
                    self._drop(host.name, link)
                    raise
        raise _CommandError(
            f"cannot connect to {host_where(host)}: the connection closed at once", Failure.CONNECT
        )

    async def _link(self, host: Host) -> tuple[_Link, bool]:
        """The host's connection (opened if need be) and whether it was opened just now."""
        link = self._links.get(host.name)
        if link is not None and link.host == host and not link.conn.is_closed():
            return link, False
        async with self._connect_locks.setdefault(host.name, asyncio.Lock()):
            link = self._links.get(host.name)
            if link is not None and link.host == host and not link.conn.is_closed():
                return link, False
            if link is not None:
                self._drop(host.name, link)
            if not host.check_host_key and host.name not in self._warned:
                self._warned.add(host.name)
                log.warning("ssh host key checks are off", host=host.name)
            link = _Link(host=host, conn=await self.open_connection(host))
            self._links[host.name] = link
            log.info("ssh connected", host=host.name, address=host_where(host), key=str(host.key))
            return link, True

    async def open_connection(self, host: Host) -> asyncssh.SSHClientConnection:
        """A new connection to `host` (user, key, known_hosts, keepalives); raises
        `_CommandError` with the reason."""
        user = host.user or _local_user()
        options: dict[str, object] = {"known_hosts": self._known_hosts(host)}
        if host.key is not None:
            try:
                options["client_keys"] = [asyncssh.read_private_key(host.key)]
            except (OSError, asyncssh.KeyImportError) as exc:
                message = f"cannot load SSH key {host.key} for {host.name}: {_plain(exc)}"
                raise _CommandError(message, Failure.LOGIN) from None
        try:
            return await asyncssh.connect(
                host.address or host.name,
                host.port,
                username=user,
                config=None,  # the fleet file says how to reach a host, not ~/.ssh/config
                keepalive_interval=KEEPALIVE_INTERVAL_S,
                keepalive_count_max=KEEPALIVE_COUNT_MAX,
                **options,
            )
        except TimeoutError:
            raise
        except asyncssh.HostKeyNotVerifiable as exc:
            raise _CommandError(
                f"host key of {host_where(host)} is not trusted: {_plain(exc)}", Failure.HOST_KEY
            ) from None
        except asyncssh.PermissionDenied:
            raise _CommandError(
                f"authentication failed for {user}@{host_where(host)}", Failure.LOGIN
            ) from None
        except (asyncssh.Error, OSError) as exc:
            raise _CommandError(
                f"cannot connect to {host_where(host)}: {_plain(exc)}", Failure.CONNECT
            ) from None

    def _known_hosts(self, host: Host) -> asyncssh.SSHKnownHosts | None:
        if not host.check_host_key:
            return None
        path = host.known_hosts or self._known_hosts_default or DEFAULT_KNOWN_HOSTS.expanduser()
        try:
            return asyncssh.read_known_hosts(str(path))
        except (OSError, ValueError) as exc:
            message = f"cannot read known_hosts file {path} for {host.name}: {_plain(exc)}"
            raise _CommandError(message, Failure.HOST_KEY) from None

    def _drop(self, name: str, link: _Link) -> None:
        if self._links.get(name) is link:
            del self._links[name]
        link.conn.close()


class SshConnectError(Exception):
    """No connection to the host (refused, key not trusted, login failed); the message says why,
    `cause` what kind of failure it is (`Failure.CONNECT` may pass; the others last)."""

    def __init__(self, message: str, cause: Failure) -> None:
        super().__init__(message)
        self.cause = cause


async def connect(
    host: Host, known_hosts_default: Path | None = None
) -> asyncssh.SSHClientConnection:
    """A new connection to `host`, opened exactly as the executor opens its own (user, key,
    known_hosts, keepalives; ~/.ssh/config is not read). Raises `SshConnectError`."""
    try:
        return await SshExecutor(known_hosts_default).open_connection(host)
    except _CommandError as exc:
        raise SshConnectError(str(exc), exc.cause) from None


async def _open_session(
    conn: asyncssh.SSHClientConnection, line: str, stdin: str | None
) -> asyncssh.SSHClientProcess[bytes]:
    """A session running `line`; one sshd refused while its slots are full is asked for again
    after each wait of `SESSION_RETRY_S`, then its refusal is raised."""

    async def create() -> asyncssh.SSHClientProcess[bytes]:
        return await conn.create_process(
            line,
            encoding=None,
            input=stdin.encode() if stdin is not None else None,
            stdin=asyncssh.PIPE if stdin is not None else asyncssh.DEVNULL,
        )

    for wait in SESSION_RETRY_S:
        try:
            return await create()
        except asyncssh.ChannelOpenError:
            if conn.is_closed():
                raise
        await asyncio.sleep(wait)
    return await create()


async def _finish(process: asyncssh.SSHClientProcess[bytes], progress: _Progress) -> int:
    """Read both streams to their end and return the exit status (negative: killed by that
    signal). Raises `_CommandError` when the connection dies first."""
    try:
        await asyncio.gather(
            _pump(process.stdout, progress.out), _pump(process.stderr, progress.err)
        )
        await process.wait_closed()
    except (asyncssh.Error, OSError) as exc:
        raise _CommandError(lost_reason(exc), Failure.LOST) from None
    status = process.returncode
    if status is None:
        raise _CommandError(
            "connection lost: the session closed without an exit status", Failure.LOST
        )
    return status


#: How the end of a connection the host closed mid-command reaches us, as it happens to fall:
#: asyncssh reads the end ("connection lost"), or a write after it fails (EPIPE), or the
#: host's kernel answers with a reset (ECONNRESET).
_HOST_CLOSED = frozenset({errno.EPIPE, errno.ECONNRESET})


def lost_reason(exc: BaseException) -> str:
    """`connection lost: the host closed the connection`, or the other reason the connection
    ended while a command ran."""
    if isinstance(exc, OSError) and exc.errno in _HOST_CLOSED:
        return "connection lost: the host closed the connection"
    reason = _plain(exc)
    if reason == "connection lost":  # asyncssh's word for a TCP connection that just ended
        reason = "the host closed the connection"
    return f"connection lost: {reason}"


async def _pump(reader: asyncssh.SSHReader[bytes], sink: OutputTail) -> None:
    while chunk := await reader.read(READ_CHUNK):
        sink.add(chunk)


def _stop(process: asyncssh.SSHClientProcess[bytes]) -> None:
    """Stop a command that ran too long: ask sshd to kill its process group (OpenSSH does this
    for non-root logins), then close the session, which closes the command's pipes."""
    with suppress(OSError, asyncssh.Error):
        process.send_signal("KILL")
    process.close()

"""What a transport is (`Transport`, `Follow`), what a short command gives (`Ran`), how one
fails (`TransportError`), and what the local and SSH transports share: the command line, the
output pump and the limits."""

from __future__ import annotations

import asyncio
import getpass
import os
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

import asyncssh

from supervisor.config.supervised import Host
from supervisor.execute.base import command_line, tail
from supervisor.execute.local import OutputTail

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


def is_root_login(host: Host) -> bool:
    if host.local:
        return os.geteuid() == 0
    try:
        return (host.user or getpass.getuser()) == "root"
    except (KeyError, OSError):
        return True


def command(host: Host, argv: Sequence[str], *, sudo: bool) -> str:
    """The line to run: `sudo -n` in front when asked, unless the login is root already."""
    return command_line(argv, sudo=sudo and not is_root_login(host))


async def pump(reader: asyncio.StreamReader | asyncssh.SSHReader[bytes], sink: OutputTail) -> None:
    with suppress(asyncssh.Error, OSError):
        while chunk := await reader.read(65536):
            sink.add(chunk)

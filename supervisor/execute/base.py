"""The executor seam: run one command on one host, always with a deadline, never raising.

Commands are argument lists, never shell strings: `command_line` quotes every argument, so a
unit name or a path from a rule can never become shell syntax. A step that needs a shell (a
redirect into /proc) runs `sh -c SCRIPT` with a fixed script whose arguments are quoted.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Protocol

from supervisor.config.supervised import Host

TAIL_LINES = 20


def command_line(argv: Sequence[str], *, sudo: bool = False) -> str:
    """The exact line sent to the host: every argument quoted, `sudo -n` in front when asked."""
    return shlex.join(["sudo", "-n", *argv] if sudo else list(argv))


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class Failure(StrEnum):
    """Why a command could not run to completion (its `error` says it in words)."""

    TIMED_OUT = "timed_out"  #: it had started and ran past its deadline
    CONNECT = "connect"  #: no connection to the host (refused, no answer, no route)
    HOST_KEY = "host_key"  #: the host's key is not trusted, or known_hosts cannot be read
    LOGIN = "login"  #: the login was refused, or the client key cannot be loaded
    LOST = "lost"  #: the connection died while the command ran
    START = "start"  #: the command could not be started (no such program, no session)
    NOT_RUN = "not_run"  #: held back on purpose (no lease to act under)


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    """What one command did. `error` is set when it could not run to completion (no connection,
    host key refused, timed out); then `exit_status` is None or what it had when it was cut off."""

    host: str
    command: str  #: the exact line (see `command_line`)
    exit_status: int | None
    stdout: str
    stderr: str
    duration_s: float
    error: str = ""  #: e.g. "timed out after 10s", "cannot connect to spark1 (127.0.0.11:22): ..."
    failure: Failure | None = None  #: why it could not run to completion (set with `error`)
    dry_run: bool = False  #: not run: the executor only recorded it

    @property
    def ok(self) -> bool:
        return not self.error and (self.dry_run or self.exit_status == 0)

    def summary(self) -> str:
        """`exit 0 in 0.12s`, `exit 127 in 0.05s`, `timed out after 10s`, `dry run`."""
        if self.dry_run:
            return "dry run"
        if self.error:
            return self.error
        return f"exit {self.exit_status} in {self.duration_s:.2f}s"

    def output_tail(self, lines: int = TAIL_LINES) -> str:
        both = "\n".join(part for part in (self.stdout.rstrip(), self.stderr.rstrip()) if part)
        return tail(both, lines)


class Executor(Protocol):
    """Runs commands on hosts. Implementations: `SshExecutor`, `LocalExecutor`, `FleetExecutor`
    (routes by `host.local`), `DryRunExecutor` (records mutating commands, runs the rest)."""

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
        """Run `argv` on `host`. Never raises for a failed, refused or timed-out command: the
        result says what happened. `mutating` marks commands that change the host (dry-run
        executors record them instead of running them)."""
        ...

    async def close(self) -> None: ...

"""Dry runs: commands that only read run for real (a dry run may gather evidence); commands that
change a host are recorded in `planned` and not run."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from supervisor.config.supervised import Host
from supervisor.execute.base import CommandResult, Executor, command_line


class DryRunExecutor:
    """Wraps `inner`: non-mutating commands go through it, mutating ones are only recorded and
    come back as `CommandResult(dry_run=True, exit_status=None)`."""

    def __init__(self, inner: Executor) -> None:
        self.inner = inner
        self.planned: list[CommandResult] = []

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
        if not mutating:
            return await self.inner.run(host, argv, timeout=timeout, sudo=sudo, stdin=stdin)
        planned = CommandResult(
            host=host.name,
            command=command_line(argv, sudo=sudo),
            exit_status=None,
            stdout="",
            stderr="",
            duration_s=0.0,
            dry_run=True,
        )
        self.planned.append(planned)
        return planned

    async def close(self) -> None:
        await self.inner.close()

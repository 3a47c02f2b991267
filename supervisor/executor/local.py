"""Commands on the box the daemon runs on (`local: true` hosts): a subprocess, no shell."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from contextlib import suppress
from datetime import timedelta

from supervisor.config import Host
from supervisor.durations import format_duration
from supervisor.executor.base import CommandResult, command_line

MAX_OUTPUT = 256 * 1024  #: bytes kept of stdout and of stderr each (the end is kept)


def decode(data: bytes) -> str:
    return data[-MAX_OUTPUT:].decode("utf-8", errors="replace")


class LocalExecutor:
    """Runs argument lists with `asyncio.create_subprocess_exec`. `sudo=True` adds `sudo -n`
    unless the daemon already runs as root."""

    def __init__(self) -> None:
        self._is_root = os.geteuid() == 0

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
        use_sudo = sudo and not self._is_root
        full = ["sudo", "-n", *argv] if use_sudo else list(argv)
        line = command_line(argv, sudo=use_sudo)
        started = time.monotonic()

        def result(status: int | None, out: bytes, err: bytes, error: str = "") -> CommandResult:
            return CommandResult(
                host=host.name,
                command=line,
                exit_status=status,
                stdout=decode(out),
                stderr=decode(err),
                duration_s=time.monotonic() - started,
                error=error,
            )

        try:
            proc = await asyncio.create_subprocess_exec(
                *full,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return result(None, b"", b"", f"cannot run {argv[0]}: {exc.strerror or exc}")
        try:
            async with asyncio.timeout(timeout.total_seconds()):
                out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
        except TimeoutError:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            await proc.wait()
            return result(proc.returncode, b"", b"", f"timed out after {format_duration(timeout)}")
        return result(proc.returncode, out, err)

    async def close(self) -> None:
        return None

"""Commands on the box the daemon runs on (`local: true` hosts): a subprocess, no shell."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Sequence
from contextlib import suppress
from datetime import timedelta

from supervisor.config.supervised import Host
from supervisor.core.durations import format_duration
from supervisor.execute.base import CommandResult, Failure, command_line

MAX_OUTPUT = 256 * 1024  #: bytes kept of stdout and of stderr each (the end is kept)
READ_CHUNK = 65536


def decode_output(data: bytes) -> str:
    return data[-MAX_OUTPUT:].decode("utf-8", errors="replace")


class OutputTail:
    """The last `MAX_OUTPUT` bytes of a stream, collected as it arrives (so a command cut off
    by its deadline still shows what it had printed)."""

    def __init__(self) -> None:
        self._data = bytearray()

    def add(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 2 * MAX_OUTPUT:
            del self._data[:-MAX_OUTPUT]

    def text(self) -> str:
        return decode_output(bytes(self._data))


async def _pump(stream: asyncio.StreamReader | None, sink: OutputTail) -> None:
    if stream is None:
        return
    while chunk := await stream.read(READ_CHUNK):
        sink.add(chunk)


async def _feed(stream: asyncio.StreamWriter | None, data: str | None) -> None:
    if stream is None or data is None:
        return
    with suppress(BrokenPipeError, ConnectionResetError):  # the command did not read it all
        stream.write(data.encode())
        await stream.drain()
    stream.close()


async def reap(proc: asyncio.subprocess.Process) -> None:
    """Kill `proc`'s process group (started in a session of its own) unless it has ended, and
    wait for it: a command past its deadline, or whose caller is cancelled (the daemon
    stopping), never outlives the call, and neither do its pipes."""
    if proc.returncode is None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


class LocalExecutor:
    """Runs argument lists with `asyncio.create_subprocess_exec`. `sudo=True` adds `sudo -n`
    unless the daemon already runs as root. A command past its deadline, or whose caller is
    cancelled, has its whole process group killed; the output it had printed is kept."""

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
        out, err = OutputTail(), OutputTail()

        def result(
            status: int | None, error: str = "", failure: Failure | None = None
        ) -> CommandResult:
            return CommandResult(
                host=host.name,
                command=line,
                exit_status=status,
                stdout=out.text(),
                stderr=err.text(),
                duration_s=time.monotonic() - started,
                error=error,
                failure=failure,
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
            return result(None, f"cannot run {argv[0]}: {exc.strerror or exc}", Failure.START)
        try:
            async with asyncio.timeout(timeout.total_seconds()):
                await asyncio.gather(
                    _pump(proc.stdout, out), _pump(proc.stderr, err), _feed(proc.stdin, stdin)
                )
                status: int | None = await proc.wait()
        except TimeoutError:
            status = None
        finally:
            await reap(proc)
        if status is None:
            return result(None, f"timed out after {format_duration(timeout)}", Failure.TIMED_OUT)
        return result(status)

    async def close(self) -> None:
        return None

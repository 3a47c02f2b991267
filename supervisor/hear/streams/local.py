"""The box the daemon runs on (`local: true`): a transport over subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from contextlib import suppress

from supervisor.config.supervised import Host
from supervisor.execute.local import OutputTail, reap
from supervisor.hear.streams.protocol import (
    LINE_LIMIT,
    STOP_WITHIN_S,
    Follow,
    Ran,
    TransportError,
    is_root_login,
    pump,
)


class _LocalFollow:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._stdout = proc.stdout
        self._err = OutputTail()
        self._pump = asyncio.ensure_future(pump(proc.stderr, self._err))

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
        root = () if not sudo or is_root_login(self.host) else ("sudo", "-n")
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
            return Ran(status=None, stdout="", stderr="", error=f"timed out after {timeout:g}s")
        finally:
            await reap(proc)
        return Ran(
            status=proc.returncode,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
        )

    async def follow(self, argv: Sequence[str], *, sudo: bool = False) -> Follow:
        return _LocalFollow(await self._spawn(argv, sudo))

    async def close(self) -> None:
        return None

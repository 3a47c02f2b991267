"""A warm start for the specs' `python -m supervisor` processes (their daemons and commands).

A new `python -m supervisor` spends about 1.3 CPU-seconds importing its modules (SQLAlchemy,
pydantic, our models) before its first line runs, and a run of the suite starts dozens: on 2
cores that is a minute of the whole run. So each pytest process keeps one server that imported
them once, and forks a child per start: the child takes the caller's stdin, stdout, stderr,
working directory, environment and arguments, and runs `supervisor.__main__` as
`python -m supervisor` would. It is a real process of its own (its own pid, signals, exit code,
files, sockets); what it does not have is a fresh interpreter, so a spec about the start itself
(what the process loads, how it starts as another user or from an installed venv) execs
`python -m supervisor` as before. Before its first fork the server also makes one store and
drops it, so that a child's new store is a copy of that one (`supervisor.record.store.fresh`),
and freezes what it holds out of the garbage collector's sight (`gc.freeze`): together a
daemon's start went from 0.30 CPU-s to 0.13.

The server (this file run as a script) takes a listening Unix socket (SOCK_SEQPACKET: one
message, one request) from the pytest process, and ends when its stdin closes, that is when
the pytest process is gone. A request is a JSON object (argv, env, cwd) with three file
descriptors (the child's 0, 1, 2); the answer is the child's pidfd, then, when it has ended, its
`returncode` as `subprocess` writes it (-N: killed by signal N).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

_MESSAGE = 1 << 20  # a request's largest size (its environment, mostly)


# -- the pytest process's side --------------------------------------------------------------


@dataclass
class _Server:
    process: subprocess.Popen[bytes]
    path: str


_server: _Server | None = None


def _started() -> _Server:
    """This pytest process's server, started on first use."""
    global _server
    if _server is None or _server.process.poll() is not None:
        folder = tempfile.mkdtemp(prefix="warmstart-")
        path = os.path.join(folder, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(path)
        listener.listen(64)
        with open(os.path.join(folder, "server.log"), "ab") as log:
            process = subprocess.Popen(
                [sys.executable, __file__, str(listener.fileno())],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,
                pass_fds=(listener.fileno(),),
            )
        listener.close()  # the server has it; a request waits in its backlog until it serves
        _server = _Server(process, path)
        atexit.register(_stop, _server, folder)
    return _server


def _stop(server: _Server, folder: str) -> None:
    """At this process's exit: the server ends with its stdin (its children run on)."""
    assert server.process.stdin is not None
    server.process.stdin.close()
    server.process.wait()
    shutil.rmtree(folder, ignore_errors=True)


def _ask(argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | Path | None,
         fds: Sequence[int]) -> tuple[socket.socket, int, int]:  # fmt: skip
    """Start a child; returns the connection (its exit code arrives on it), its pid and pidfd."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(_started().path)
    request = {
        "argv": list(argv),
        "env": dict(os.environ if env is None else env),
        "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
    }
    socket.send_fds(conn, [json.dumps(request).encode()], list(fds))
    data, [pidfd], _, _ = socket.recv_fds(conn, 64, 1)
    return conn, int(data), pidfd


def _exit_code(data: bytes) -> int:
    if not data:
        raise RuntimeError("the warm-start server ended before its child")
    return int(data)


class WarmProcess:
    """A child of the server, as `asyncio.subprocess.Process` offers it (pid, returncode,
    wait, send_signal, terminate, kill). Signals go through its pidfd, so never to a pid
    reused after it ended."""

    def __init__(self, conn: socket.socket, pid: int, pidfd: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn, self._pidfd = conn, pidfd
        conn.setblocking(False)
        self._ended = asyncio.get_running_loop().create_task(self._end())

    async def _end(self) -> int:
        try:
            code = _exit_code(await asyncio.get_running_loop().sock_recv(self._conn, 64))
        finally:
            self._conn.close()
        self.returncode = code
        os.close(self._pidfd)
        return code

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with suppress(ProcessLookupError):  # ended, not reaped yet: as asyncio, nothing to do
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


async def spawn(argv: Sequence[str], *, stdout: IO[Any] | int, stderr: IO[Any] | int,
                env: Mapping[str, str] | None = None) -> WarmProcess:  # fmt: skip
    """`python -m supervisor *argv`, warm: `stdout`, `stderr` a file or `subprocess.DEVNULL`."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        fds = [null, *(null if s == subprocess.DEVNULL else _fd(s) for s in (stdout, stderr))]
        conn, pid, pidfd = _ask(argv, env, None, fds)
    finally:
        os.close(null)
    return WarmProcess(conn, pid, pidfd)


def _fd(stream: IO[Any] | int) -> int:
    return stream if isinstance(stream, int) else stream.fileno()


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, -m, supervisor, *argv], capture_output=True, text=True, ...)`,
    warm."""
    with (
        open(os.devnull, "rb") as stdin,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        conn, _, pidfd = _ask(argv, env, cwd, [stdin.fileno(), out.fileno(), err.fileno()])
        try:
            conn.settimeout(timeout)
            try:
                code = _exit_code(conn.recv(64))
            except TimeoutError:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                command = ["python", "-m", "supervisor", *argv]
                raise subprocess.TimeoutExpired(command, timeout) from None
        finally:
            conn.close()
            os.close(pidfd)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(
            ["python", "-m", "supervisor", *argv], code,
            out.read().decode(), err.read().decode(),
        )  # fmt: skip
    if check:
        done.check_returncode()
    return done


async def run_async(
    argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`run` from a coroutine (the wait on a thread of its own)."""
    return await asyncio.to_thread(run, argv, timeout=timeout, env=env)


# -- the server's side ----------------------------------------------------------------------


class _Child(Exception):  # noqa: N818  (not an error: the way out of the loop)
    """Raised in a new child to leave the server's loop and become the command."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__()
        self.request = request


def _serve(listener: socket.socket) -> None:
    """Fork a child per request until stdin closes; tell each caller how its child ended."""
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(sys.stdin.buffer, selectors.EVENT_READ, "stdin")
    while True:
        for key, _ in selector.select():
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 64):
                    return
            elif key.data == "listener":
                conn, _ = listener.accept()
                data, fds, _, _ = socket.recv_fds(conn, _MESSAGE, 3)
                request = json.loads(data)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    conn.close()
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                    for fd in fds:
                        if fd > 2:
                            os.close(fd)
                    raise _Child(request)
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                socket.send_fds(conn, [str(pid).encode()], [pidfd])
                selector.register(pidfd, selectors.EVENT_READ, (pid, conn))
            else:
                pid, conn = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                with suppress(OSError):  # the caller is gone
                    conn.send(str(os.waitstatus_to_exitcode(status)).encode())
                conn.close()


def _become(request: dict[str, Any]) -> None:
    """In the child: the caller's directory, environment and arguments, then the command."""
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # as `python -m` puts it
    sys.argv = ["-m", *request["argv"]]
    runpy.run_module("supervisor", run_name="__main__", alter_sys=True)


#: What a daemon or a command loads, beyond the command line, in the specs: its web page, its
#: Telegram client, the evidence collectors, both stores' drivers, Alembic (a new store) and the
#: lab's stand-in commands. One left out is loaded by the child that needs it, as it would be.
WARM = (
    "supervisor.cli",
    "supervisor.playbook.evidence.registry",
    "supervisor.tell.web.http",
    "supervisor.tell.web.page.app",
    "supervisor.tell.web.site",
    "supervisor.tell.telegram.notifier",
    "supervisor.hear.streams.warm",
    "aiosqlite",
    "sqlalchemy.dialects.sqlite.aiosqlite",
    "sqlalchemy.dialects.postgresql.asyncpg",
    "asyncpg",
    "alembic.command",
    "alembic.config",
    "alembic.script",
    "alembic.runtime.migration",
    "apscheduler.executors.asyncio",
    "apscheduler.triggers.interval",
    "fleet_lab.cli",
)


async def _make_a_store() -> None:
    """A new SQLite store, made and dropped: the first in a process runs every revision and
    keeps its bytes (`supervisor.record.store.fresh`), so each child's new store is a copy of
    it, as its second would be, not 0.1 CPU-s of Alembic again."""
    from supervisor.record.store.store import Store

    with tempfile.TemporaryDirectory(prefix="warmstart-store-") as folder:
        async with await Store.open(Path(folder) / "supervisor.db"):
            pass


def _main(listener_fd: int) -> None:
    import gc
    import importlib

    from supervisor.lean import keep_out

    listener = socket.socket(fileno=listener_fd)
    keep_out()  # first, as `python -m supervisor` does
    for name in WARM:
        importlib.import_module(name)
    with suppress(Exception):  # without it, each child makes its new store itself
        asyncio.run(_make_a_store())
    # What the server holds now is every child's too, never freed: out of the collector's
    # sight, so that a child's collections neither walk it nor, by touching each object,
    # copy the pages it shares with the server (0.22 CPU-s to 0.14 for a daemon's start)
    gc.collect()
    gc.freeze()
    try:
        _serve(listener)
    except _Child as child:
        _become(child.request)


if __name__ == "__main__":
    _main(int(sys.argv[1]))

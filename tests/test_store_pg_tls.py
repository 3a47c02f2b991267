"""asyncpg's TLS question (the store's default URL: `ssl` is `prefer`, so the driver first sends
an SSLRequest) met by a server that stops in the middle of it, the attempt given up at that
moment (its connect timeout, a cancelled caller): nothing is left behind, no socket unclosed
(ResourceWarning) and no future whose exception nobody read (asyncio's "Future exception was
never retrieved", an error line in the daemon's log). The server is a loopback TCP server that
reads the SSLRequest and closes; the moment of the give-up is chosen by wrapping the loop's
`create_connection` (asyncpg makes its TLS probe through it). `connection-made` is where asyncpg
0.32.0 left the probe's failed future unread (`supervisor.record.store.pgengine.mend_tls_probe`);
`server-closed` is the stop mid-question itself (asyncio's task reads the failed answer as it
wakes, cancelled or not)."""

from __future__ import annotations

import asyncio
import gc
import struct
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from supervisor.record.store.listen import Listener
from supervisor.record.store.store import Store
from supervisor.record.store.target import PgTarget

SSL_REQUEST = struct.pack("!ll", 8, 80877103)
"""What a PostgreSQL client sends first to ask for TLS."""

Moment = Literal["connection-made", "server-closed"]


@dataclass
class StopsMidQuestion:
    """A loopback server that reads the TLS question and closes, answering nothing: what asyncpg
    meets when PostgreSQL stops mid-question. `heard`: what each connection sent before its end;
    `client_closed`: connections the client closed before asking."""

    heard: list[bytes] = field(default_factory=list)
    client_closed: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.heard.append(await reader.readexactly(len(SSL_REQUEST)))
        except asyncio.IncompleteReadError as early:
            self.heard.append(early.partial)
            self.client_closed += 1
        finally:
            writer.close()
            await writer.wait_closed()
            self.done.set()


@dataclass
class Cut:
    """Where the attempt was given up: the task that connected; whether the protocol it made is
    asyncpg's TLS probe (not the protocol itself: a reference would keep its future from the
    garbage collector, and so from being reported)."""

    attempt: asyncio.Task[Any] | None = None
    tls_probe: bool = False


def _give_up_at(monkeypatch: pytest.MonkeyPatch, moment: Moment) -> Cut:
    """Cancel the first connection attempt on this loop at `moment`: `connection-made`, as the
    connection comes up (asyncio made the protocol and has not handed over the transport yet);
    `server-closed`, in the loop step that reads the server's close (the answer to the question
    is failed, the attempt not yet resumed)."""
    loop = asyncio.get_running_loop()
    create = loop.create_connection
    cut = Cut()

    async def create_connection(
        factory: Callable[[], asyncio.BaseProtocol], *args: Any, **kwargs: Any
    ) -> Any:
        attempt = asyncio.current_task()
        assert attempt is not None

        def made() -> asyncio.BaseProtocol:
            protocol = factory()
            if cut.attempt is not None:
                return protocol
            cut.attempt, cut.tls_probe = attempt, hasattr(protocol, "on_data")
            if moment == "connection-made":
                loop.call_soon(attempt.cancel)
            else:
                lost = protocol.connection_lost

                def connection_lost(exc: Exception | None) -> None:
                    lost(exc)
                    attempt.cancel()

                protocol.connection_lost = connection_lost  # type: ignore[method-assign]
            return protocol

        return await create(made, *args, **kwargs)

    monkeypatch.setattr(loop, "create_connection", create_connection)
    return cut


@contextmanager
def _leftovers() -> Iterator[list[str]]:
    """What asyncio reports through the running loop's exception handler (a future's exception
    nobody read) and every ResourceWarning (an unclosed socket or transport) while inside."""
    loop = asyncio.get_running_loop()
    found: list[str] = []

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        found.append(f"{context.get('message')}: {context.get('exception')!r}")

    before = loop.get_exception_handler()
    loop.set_exception_handler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            yield found
            found.extend(f"{w.category.__name__}: {w.message}" for w in caught)
    finally:
        loop.set_exception_handler(before)


async def _collect() -> None:
    """The transports' closing callbacks run, then the garbage is collected (a future's
    unread exception and an unclosed socket are reported as they are collected)."""
    for _ in range(5):
        await asyncio.sleep(0.01)
    gc.collect()


@pytest.mark.parametrize("moment", ["connection-made", "server-closed"])
@pytest.mark.parametrize("connecting", ["store", "listener"])
async def test_an_attempt_given_up_mid_tls_question_leaves_nothing_open(
    monkeypatch: pytest.MonkeyPatch,
    moment: Moment,
    connecting: str,
) -> None:
    monkeypatch.delenv("PGSSLMODE", raising=False)  # the driver's default: prefer
    server = StopsMidQuestion()
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    target = PgTarget(url=f"postgresql+asyncpg://fleet@127.0.0.1:{port}/fleet")  # no ?ssl=
    cut = _give_up_at(monkeypatch, moment)
    listener = Listener(target)
    with _leftovers() as leftovers:
        opening = asyncio.create_task(Store.open(target)) if connecting == "store" else None
        try:
            if connecting == "listener":
                listener.start()
            await asyncio.wait_for(server.done.wait(), 10)
            assert cut.attempt is not None
            await asyncio.wait({cut.attempt}, timeout=10)
            assert cut.attempt.cancelled()
            assert opening in (None, cut.attempt)
        finally:
            await listener.close()
            listening.close()
            await listening.wait_closed()
        # a cancelled task keeps its CancelledError, whose frames hold the probe: let go, so
        # the collector reports whatever the attempt left
        cut.attempt = opening = None
        await _collect()
    assert cut.tls_probe  # the question was to be asked
    if moment == "connection-made":  # given up before it asked, and closed: the server saw EOF
        assert (server.heard, server.client_closed) == ([b""], 1)
    else:
        assert (server.heard, server.client_closed) == ([SSL_REQUEST], 0)
    assert leftovers == []

"""PostgreSQL LISTEN/NOTIFY: what one process commits wakes the others at once.

Two channels, each written in the transaction whose commit it announces (PostgreSQL delivers a
notification only once that transaction commits, and not at all if it rolls back):

- `LEASE` (payload: the epoch): the lease was released (a clean stop) or taken over
  (`supervisor.record.store.lease`). A follower's claim loop claims at once instead of at its next
  third of the lease.
- `TIMELINE` (payload: the entry's id): a timeline entry was committed
(`supervisor.record.store.store`).
  A follower's fleet page streams it as the leader's does.

A `Listener` owns one dedicated connection that LISTENs on both and hands each notification to
the callbacks subscribed to its channel. It is a hint, never the source of truth: the claim loop
still claims every third of the lease and the page still ticks, so a lost notification or a
dropped connection only costs the old delay. A dropped connection is opened again with a backoff
(and every subscriber is called once it is back: it may have missed something); a connection
that went silent is found by a ping. One warning says it lost the server, one that it listens
again; the tries between are quiet (debug). On a SQLite store it is a no-op: nothing is ever called.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from supervisor.core.backoff import Backoff
from supervisor.record.store.pgengine import CONNECT_TIMEOUT_S, mend_tls_probe
from supervisor.record.store.target import PgTarget, StoreTarget, parse_pg_url

log = structlog.get_logger("supervisor.store")

LEASE = "fleet_supervisor_lease"
TIMELINE = "fleet_supervisor_timeline"
CHANNELS = (LEASE, TIMELINE)

BACKOFF = Backoff(base_s=0.2, cap_s=5.0)  #: the pauses before reconnecting (jittered)
PING_S = 10.0  #: how often a quiet connection is asked whether it is still there

Callback = Callable[[str], None]


async def notify(conn: AsyncConnection, channel: str, payload: str) -> None:
    """Announce `payload` on `channel` when the caller's transaction commits (PostgreSQL only;
    a SQLite store has nobody to tell)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_notify(:c, :p)"), {"c": channel, "p": payload})


def connect_args(target: PgTarget) -> dict[str, Any]:
    """`asyncpg.connect`'s arguments for the target, read from its URL as the store's engine
    reads them (host, port, user and database, then the query as keywords), so `?ssl=require`
    means the same to both: in a DSN, asyncpg would take `ssl` for a server setting. The
    password, if any, is passed on its own."""
    url = parse_pg_url(target.url)
    return {**url.translate_connect_args(username="user"), **url.query}


class Listener:
    """`subscribe(channel, callback)`, `start()`, ..., `await close()`."""

    def __init__(self, target: StoreTarget | None, *, backoff: Backoff = BACKOFF) -> None:
        #: None (a SQLite file, or none given): a no-op, nothing is ever called
        self.target = target if isinstance(target, PgTarget) else None
        self._backoff = backoff
        self._subscribers: dict[str, list[Callback]] = {c: [] for c in CHANNELS}
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()  #: LISTENing now
        self.connects = 0  #: how many times it connected (the specs watch reconnects)
        self.backend_pid: int | None = None  #: the server process of the connection, while up
        #: since when it has not been listening (monotonic), once that was said (a warning)
        self._cut_off: float | None = None

    def subscribe(self, channel: str, callback: Callback) -> Callable[[], None]:
        """Call `callback(payload)` on each notification of `channel`; returns the unsubscribe."""
        if channel not in self._subscribers:
            raise ValueError(f"no channel {channel!r}: one of {', '.join(CHANNELS)}")
        callbacks = self._subscribers[channel]
        callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in callbacks:
                callbacks.remove(callback)

        return unsubscribe

    def start(self) -> None:
        if self.target is not None and self._task is None:
            self._task = asyncio.create_task(self._run(self.target), name="store:listen")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    def _deliver(self, channel: str, payload: str) -> None:
        for callback in list(self._subscribers.get(channel, ())):
            try:
                callback(payload)
            except Exception:  # one subscriber's bug must not silence the others
                log.exception("listen: a subscriber failed", channel=channel)

    def _on_notification(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        self._deliver(channel, payload)

    async def _run(self, target: PgTarget) -> None:
        """Connect and listen until closed; each failure to connect in a row waits longer
        before the next try (`backoff`), a connection that was up starts over from the first."""
        import asyncpg  # the driver, only for a PostgreSQL store

        mend_tls_probe()
        failures = 0  # in a row
        while True:
            try:
                conn = await asyncpg.connect(
                    **connect_args(target), password=target.password, timeout=CONNECT_TIMEOUT_S
                )
            except Exception as err:  # refused, timed out, a bad password: tried again later
                why = str(err) or type(err).__name__
                if self._cut_off is None:  # said once; the tries that follow, quietly
                    self._cut_off = time.monotonic()
                    log.warning("listen: cannot connect; trying again", error=why)
                else:
                    log.debug("listen: cannot connect", error=why)
                failures += 1
                await asyncio.sleep(self._backoff.delay(failures))
                continue
            failures = 0
            try:
                await self._listen(conn)
            except Exception as err:  # a ping unanswered, the connection dropped mid-LISTEN
                self._cut_off = time.monotonic()
                why = str(err) or type(err).__name__
                log.warning("listen: connection lost; trying again", error=why)
            finally:
                self.connected.clear()
                self.backend_pid = None
                conn.terminate()
            await asyncio.sleep(self._backoff.delay(1))

    async def _listen(self, conn: Any) -> None:
        """LISTEN on every channel, tell every subscriber (it may have missed something while
        not listening), then ping now and then until the connection is gone."""
        gone = asyncio.Event()
        conn.add_termination_listener(lambda _c: gone.set())
        for channel in CHANNELS:
            await conn.add_listener(channel, self._on_notification)
        self.connects += 1
        self.backend_pid = conn.get_server_pid()
        self.connected.set()
        if self._cut_off is not None:  # the one warning when back, as when cut off
            after = round(time.monotonic() - self._cut_off, 1)
            self._cut_off = None
            log.warning("listen: listening again", after_s=after, connects=self.connects)
        else:
            log.info("listen: listening", channels=list(CHANNELS), connects=self.connects)
        for channel in CHANNELS:
            self._deliver(channel, "")
        while not gone.is_set() and not conn.is_closed():
            with suppress(TimeoutError):
                async with asyncio.timeout(PING_S):
                    await gone.wait()
                    return
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await conn.execute("SELECT 1")

"""The SQLite engine's driver mended: aiosqlite 0.22.1's `close()` awaits, in a `finally`, the
future of a second `stop()` that no thread will ever answer once SQLAlchemy's force close has
stopped the connection, and its failed connect stops the connection awaiting nothing
(`supervisor.record.store.engine.mend_aiosqlite_stop`, `drivers_stopped`)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import aiosqlite
import pytest

from supervisor.record.store.engine import drivers_stopped, mend_aiosqlite_stop
from supervisor.record.store.errors import StoreError
from supervisor.record.store.store import Store


async def test_a_close_cancelled_after_the_connection_was_stopped_still_ends(
    tmp_path: Path,
) -> None:
    """What SQLAlchemy does to a connection it invalidates while its caller is cancelled: a
    graceful `close()` in a task of its own, then `stop()`. The connection's thread runs both
    and ends; the close, cancelled before it saw its answer (the loop closing at a daemon's
    stop), must still end."""
    mend_aiosqlite_stop()
    before = set(threading.enumerate())
    conn = await aiosqlite.connect(tmp_path / "store.db")
    (thread,) = set(threading.enumerate()) - before
    closing = asyncio.create_task(conn.close())
    await asyncio.sleep(0)  # the close has queued sqlite3's close and waits for its answer
    conn.stop()  # SQLAlchemy's `_terminate_force_close`
    thread.join(10)  # the thread ran both and ended (the loop has not run: no answer seen yet)
    assert not thread.is_alive()
    closing.cancel()
    for _ in range(10):  # the cancel is delivered at the close's next step
        if closing.done():
            break
        await asyncio.sleep(0)
    assert closing.done(), "close() waits for a stop no thread will answer"
    assert closing.cancelled()
    assert conn.stop() is None  # stopped already: nothing queued, nothing to wait for


async def test_a_stop_is_waited_for_until_the_connection_s_thread_answers(tmp_path: Path) -> None:
    """aiosqlite stops a connection that failed to connect and awaits nothing; a failed open
    waits (`drivers_stopped`) for every such stop, so no thread answers a future of a loop that
    has closed. Here the thread is held by a query while the stop waits behind it."""
    mend_aiosqlite_stop()
    before = set(threading.enumerate())
    conn = await aiosqlite.connect(tmp_path / "store.db")
    (thread,) = set(threading.enumerate()) - before
    gate = threading.Event()
    await conn.create_function("hold", 0, lambda: int(gate.wait(30)))
    held = asyncio.create_task(conn.execute("SELECT hold()"))
    await asyncio.sleep(0)  # the query is queued: the thread runs it and waits at the gate
    conn.stop()  # queued behind the query, awaited by nobody (as after a failed connect)
    waiting = asyncio.create_task(drivers_stopped())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not waiting.done(), "returned before the connection's thread answered its stop"
    gate.set()
    await waiting
    await held
    thread.join(10)
    assert not thread.is_alive()


def test_a_failed_open_leaves_no_driver_thread_to_answer_a_closed_loop(tmp_path: Path) -> None:
    """Each open fails in a loop of its own that closes at once: the connection's thread must
    have answered its stop before (it said `Event loop is closed` from its thread otherwise,
    under load, in the store's open-error specs)."""
    caught: list[threading.ExceptHookArgs] = []
    hook, threading.excepthook = threading.excepthook, caught.append
    (tmp_path / "adir").mkdir()

    async def fail_once() -> None:
        with pytest.raises(StoreError):
            await Store.open(tmp_path / "adir", create=False)

    before = set(threading.enumerate())
    try:
        for _ in range(20):
            asyncio.run(fail_once())
        for thread in set(threading.enumerate()) - before:
            thread.join(10)
    finally:
        threading.excepthook = hook
    assert [str(c.exc_value) for c in caught] == []

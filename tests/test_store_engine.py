"""The SQLite engine's driver mended: aiosqlite 0.22.1's `close()` awaits, in a `finally`, the
future of a second `stop()` that no thread will ever answer once SQLAlchemy's force close has
stopped the connection (`supervisor.record.store.engine.mend_aiosqlite_stop`)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import aiosqlite

from supervisor.record.store.engine import mend_aiosqlite_stop


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

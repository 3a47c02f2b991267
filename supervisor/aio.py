"""Small asyncio helpers the long-running loops share."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait for `event` at most `seconds`; True when it was set.

    A cancellation that arrives as the timeout fires is re-raised, never swallowed as a timeout
    (on Python 3.11 `asyncio.timeout` can turn it into a `TimeoutError`): a loop that waits like
    this always stops when its task is cancelled.
    """
    try:
        async with asyncio.timeout(max(0.0, seconds)):
            await event.wait()
    except TimeoutError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError from None
        return False
    return True

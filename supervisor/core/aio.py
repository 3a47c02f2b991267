"""Small asyncio helpers the long-running loops share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence


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


async def poll(
    predicate: Callable[[], bool | Awaitable[bool]],
    within: float,
    every: float = 0.02,
    at_most: float | None = None,
) -> bool:
    """Ask `predicate` (plain or async) every `every` seconds until it holds (True) or `within`
    seconds have passed (False): a wait with a deadline for what has no event to wait on. With
    `at_most`, each pause is half as long again as the last, up to `at_most` seconds: a long
    wait asks less often, a short one is as quick."""
    deadline = time.monotonic() + within
    pause = every
    while True:
        value = predicate()
        if not isinstance(value, bool):
            value = await value
        if value:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(pause)
        if at_most is not None:
            pause = min(at_most, pause * 1.5)


async def stop_in_order(
    parts: Sequence[tuple[str, Callable[[], Awaitable[object]] | None]],
) -> dict[str, float]:
    """Run each part's stop, in order (None: nothing to stop); the seconds of each that took a
    second or more, by name (so a slow stop can say where it waited)."""
    slow: dict[str, float] = {}
    for name, stop in parts:
        if stop is None:
            continue
        began = time.monotonic()
        await stop()
        if (took := time.monotonic() - began) >= 1.0:
            slow[name] = round(took, 2)
    return slow


def waits_at(task: asyncio.Task[object], depth: int = 12) -> str:
    """Where `task` waits: its coroutine's awaits followed down as far as Python's own
    coroutines go (a driver's compiled code ends the chain), innermost first, at most `depth`
    frames (``file:line function < its caller < ...``); "-" when it has no frame."""
    frames: list[str] = []
    coro: object = task.get_coro()
    while coro is not None and len(frames) < 64:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " < ".join(reversed(frames[-depth:])) or "-"

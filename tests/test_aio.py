"""The shared wait: a set event, a timeout, and a cancel that is never swallowed."""

from __future__ import annotations

import asyncio

import pytest

from supervisor.aio import wait_event


async def test_a_set_event_is_seen_and_a_timeout_is_false() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 10) is True


async def test_a_loop_waiting_on_it_stops_when_cancelled() -> None:
    event = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:  # like the verification loop: wait, then go round again
            rounds += 1
            await wait_event(event, 0.001)

    task = asyncio.create_task(loop())
    for _ in range(50):  # cancel at many points, timeouts firing all along
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)
    assert rounds > 1

"""The shared waits: a set event, a timeout, a cancel that is never swallowed, and a poll with a
deadline."""

from __future__ import annotations

import asyncio

import pytest

from supervisor.core.aio import poll, wait_event


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


async def test_a_poll_sees_a_plain_or_async_predicate_and_gives_up_at_its_deadline() -> None:
    asked: list[int] = []

    def third_time() -> bool:
        asked.append(1)
        return len(asked) == 3

    async def at_once() -> bool:
        return True

    assert await poll(third_time, 10, every=0.001) is True
    assert len(asked) == 3
    assert await poll(at_once, 0) is True
    assert await poll(lambda: False, 0.01, every=0.001) is False


@pytest.mark.parametrize(
    ("at_most", "pauses"),
    [
        (None, [0.02, 0.02, 0.02, 0.02, 0.02, 0.02]),
        (0.1, [0.02, 0.03, 0.045, 0.0675, 0.1, 0.1]),
    ],
)
async def test_a_poll_with_at_most_asks_half_as_long_again_after_each_miss_up_to_it(
    monkeypatch: pytest.MonkeyPatch, at_most: float | None, pauses: list[float]
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    assert await poll(lambda: len(slept) == 6, 10, every=0.02, at_most=at_most) is True
    assert slept == pytest.approx(pauses)

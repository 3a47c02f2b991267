"""Time for the on-demand simulators (Ollama's keep-alive, llama-swap's ttl): the real clock, or a
manual one a spec moves by hand, so that a 5-minute keep-alive expires in no time.

Only the timers run on this clock; a model's load delay is real time (short in specs).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import UTC, datetime, timedelta
from typing import Protocol


class SimClock(Protocol):
    def now(self) -> datetime:
        """Aware UTC time."""

    async def sleep_until(self, when: datetime) -> None:
        """Return once `now() >= when` (at once when it already is)."""


class RealClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        # the wall clock is the fact awaited: nothing sets an event when it passes `when`
        while (left := (when - self.now()).total_seconds()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(left)


class ManualClock:
    """Stands still until `advance()`; the sleepers whose time has come wake then."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
        self._sleepers: list[tuple[datetime, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, waiter = heapq.heappop(self._sleepers)
            if not waiter.done():
                waiter.set_result(None)

    async def sleep_until(self, when: datetime) -> None:
        if when <= self._now:
            return
        waiter = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (when, next(self._order), waiter))
        await waiter


def go_time(when: datetime) -> str:
    """RFC 3339 as Go marshals a UTC `time.Time`: fraction without trailing zeros, `Z`."""
    text = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".")
    return text + "Z"

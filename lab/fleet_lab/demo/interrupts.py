"""Ctrl-C and SIGTERM for the demos (the lab one and the loopback one), heard at any point,
whatever the demo inherited.

Both signals get one Python handler for the whole demo (installed before the lab boots or the
servers start, so a SIGINT the demo inherited as ignored, as a job started in the background of a
script does, is heard too, and no event loop's handler is ever removed under it). While the demo
runs in the event loop, the first signal cancels its task from the loop (so its clean-up runs);
before and after, it raises `KeyboardInterrupt`. `heard` keeps the first signal, so that a
cancellation some await swallowed on the way still ends the demo as interrupted.
"""

from __future__ import annotations

import asyncio
import signal
from types import FrameType


class Interrupts:
    def __init__(self) -> None:
        self.heard: int | None = None
        self._task: asyncio.Task[object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)

    def attach(self) -> None:
        """From the drills' task: from now on a signal cancels this task."""
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()

    def detach(self) -> None:
        """The event loop is done: a signal raises `KeyboardInterrupt` again."""
        self._task = self._loop = None

    def check(self) -> None:
        """Raise `KeyboardInterrupt` if a signal came (its cancellation swallowed or not)."""
        if self.heard is not None:
            raise KeyboardInterrupt

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        first = self.heard is None
        if first:
            self.heard = signum
        if self._task is None or self._loop is None:
            raise KeyboardInterrupt
        if first:
            self._loop.call_soon_threadsafe(self._task.cancel)

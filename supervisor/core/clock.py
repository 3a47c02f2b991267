"""Time, behind one seam so tests can move it: aware UTC wall time and a monotonic counter."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC wall-clock time (what is stored and shown)."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; only differences mean anything."""


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


def utcnow() -> datetime:
    return datetime.now(UTC)

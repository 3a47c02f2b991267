"""Durations as the config writes them: `500ms`, `90s`, `15m`, `2h`, `1d`, or `1h30m`."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")


class DurationError(ValueError):
    """A text that is not a duration; the message says what is expected."""


def parse_duration(text: str) -> timedelta:
    """Parse `90s`, `15m`, `2h`, `1h30m`; a bare number is not accepted (unit required)."""
    cleaned = text.strip().replace(" ", "")
    if not cleaned or not _WHOLE.fullmatch(cleaned):
        raise DurationError(f"expected a duration like 90s, 15m or 2h, got {text!r}")
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(cleaned))
    return timedelta(seconds=seconds)


def format_duration(value: timedelta | float) -> str:
    """The shortest exact spelling: 90 s -> `1m30s`, 0.25 s -> `250ms`."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = round(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"

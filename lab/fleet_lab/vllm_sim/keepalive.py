"""Ollama's `keep_alive` as its API reads it (`api.Duration.UnmarshalJSON`): a Go duration string
("5m", "1h30m", "300ms") or a number of seconds; a negative value keeps the model loaded for ever
(Go's `math.MaxInt64` nanoseconds: some 292 years); 0 unloads it once the request is done.
`OLLAMA_KEEP_ALIVE` also takes a bare integer of seconds."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta
from typing import Any

FOREVER = math.inf
"""A negative keep-alive: never unloaded by a timer."""
GO_MAX_DURATION = timedelta(microseconds=(2**63 - 1) // 1000)
"""`time.Duration(math.MaxInt64)`: what Ollama adds to now for a negative keep-alive."""
DEFAULT_KEEP_ALIVE_S = 300.0

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both micro signs (U+00B5 and U+03BC)
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_NUMBER = re.compile(r"\d+\.?\d*|\.\d+")
_UNIT = re.compile(r"[^\d.]*")


class KeepAliveError(ValueError):
    """Go's own error text (Ollama answers 400 with it)."""


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def parse_go_duration(text: str) -> float:
    """`time.ParseDuration`, in seconds: "1h30m" -> 5400.0, "-5m" -> -300.0."""
    rest, sign = text, 1.0
    if rest[:1] in ("-", "+"):
        sign, rest = (-1.0 if rest[0] == "-" else 1.0), rest[1:]
    if rest == "0":
        return 0.0
    if not rest:
        raise KeepAliveError(f"time: invalid duration {_quote(text)}")
    total = 0.0
    while rest:
        number = _NUMBER.match(rest)
        if number is None:
            raise KeepAliveError(f"time: invalid duration {_quote(text)}")
        rest = rest[number.end() :]
        unit = _UNIT.match(rest)
        name = unit.group() if unit else ""
        if not name:
            raise KeepAliveError(f"time: missing unit in duration {_quote(text)}")
        if name not in _UNITS:
            raise KeepAliveError(f"time: unknown unit {_quote(name)} in duration {_quote(text)}")
        rest = rest[len(name) :]
        total += float(number.group()) * _UNITS[name]
    return sign * total


def keep_alive_seconds(value: Any) -> float:
    """A request's `keep_alive` (JSON string or number) in seconds; `FOREVER` when negative."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        kind = {bool: "bool", list: "[]interface {}", dict: "map[string]interface {}"}
        raise KeepAliveError(f"Unsupported type: '{kind.get(type(value), type(value).__name__)}'")
    seconds = parse_go_duration(value) if isinstance(value, str) else float(value)
    return FOREVER if seconds < 0 else seconds


def server_keep_alive(text: str) -> float:
    """`OLLAMA_KEEP_ALIVE`: a Go duration or a bare integer of seconds; negative = for ever."""
    try:
        seconds = parse_go_duration(text)
    except KeepAliveError:
        seconds = float(int(text))  # ValueError for anything else, as a bad setting should
    return FOREVER if seconds < 0 else seconds


def expiry(now: datetime, seconds: float) -> datetime:
    """`time.Now().Add(sessionDuration)`."""
    return now + (GO_MAX_DURATION if seconds == FOREVER else timedelta(seconds=seconds))

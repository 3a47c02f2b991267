"""Column types: datetimes as ISO-8601 UTC text, timeline details as JSON text.

Datetimes are written in one fixed-width form (``2025-01-31T09:05:00.250000Z``) so that comparing
the text in SQL (``opened_at >= ?``, ``at < ?``) compares the instants.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from supervisor.record.timeline.base import JSONValue


def format_utc(value: datetime) -> str:
    """The stored form of an aware datetime; a naive one is refused (ValueError)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value.isoformat()}: the store takes aware datetimes")
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_utc(text: str) -> datetime:
    """An aware UTC datetime from its stored form."""
    return datetime.fromisoformat(text).astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """An aware datetime, stored as fixed-width ISO-8601 UTC text, read back aware (UTC)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> str | None:
        return None if value is None else format_utc(value)

    def process_result_value(self, value: Any | None, dialect: Dialect) -> datetime | None:
        return None if value is None else parse_utc(str(value))


def _plain(value: object) -> object:
    """json.dumps fallback: a Mapping that is not a dict becomes one."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON: timeline data takes JSON values only")


def dump_json(value: Mapping[str, JSONValue]) -> str:
    return json.dumps(
        dict(value), default=_plain, allow_nan=False, ensure_ascii=False, sort_keys=True
    )


class JSONData(TypeDecorator[Mapping[str, JSONValue]]):
    """A mapping of JSON values, stored as JSON text (keys sorted), read back as a dict."""

    impl = Text
    cache_ok = True

    def process_bind_param(
        self, value: Mapping[str, JSONValue] | None, dialect: Dialect
    ) -> str | None:
        return None if value is None else dump_json(value)

    def process_result_value(
        self, value: Any | None, dialect: Dialect
    ) -> Mapping[str, JSONValue] | None:
        if value is None:
            return None
        loaded: dict[str, JSONValue] = json.loads(value)
        return loaded

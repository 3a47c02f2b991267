"""What a frozen record's field says about its JSON beyond its Python type: read by pydantic,
which writes and reads the timeline's payloads (`supervisor.record.timeline.codec`).

`Maybe[T]` is `T | None`, left out of the payload when None: a payload holds what was set, and
a reader takes a field that is not there as its default (None). `Time` is a datetime written as
`datetime.isoformat()` (`2026-11-23T03:00:00+00:00`, as the timeline has always stored it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, TypeAlias, TypeVar

from pydantic import Field, PlainSerializer

T = TypeVar("T")


def _none(value: object) -> bool:
    return value is None


def _isoformat(value: datetime) -> str:
    return value.isoformat()


Maybe: TypeAlias = Annotated[T | None, Field(exclude_if=_none)]
Time: TypeAlias = Annotated[datetime, PlainSerializer(_isoformat, return_type=str)]

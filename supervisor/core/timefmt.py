"""Times as the machine-readable outputs write them (`status --json`, /status, timelines)."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(value: datetime | None) -> str | None:
    """ISO 8601 with `Z` for UTC: `2026-11-25T07:00:00Z`; None stays None."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def stamp(value: datetime | None) -> str:
    """What people read: UTC to the second with `Z`, `2026-11-25T07:00:00Z` (the page, the
    `silences` listing); '' for None."""
    if value is None:
        return ""
    return value.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")

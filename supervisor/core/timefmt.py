"""Times as the machine-readable outputs write them (`status --json`, /status, timelines)."""

from __future__ import annotations

from datetime import datetime


def iso(value: datetime | None) -> str | None:
    """ISO 8601 with `Z` for UTC: `2026-11-25T07:00:00Z`; None stays None."""
    return None if value is None else value.isoformat().replace("+00:00", "Z")

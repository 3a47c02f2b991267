"""What the new leader says in Telegram (HTML): a takeover, or a restart after an unclean
stop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html import escape

from supervisor.app.leader.elector import Me
from supervisor.core.durations import format_duration
from supervisor.record.store.lease import Lease


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _gap(ms: int) -> str:
    return format_duration(timedelta(seconds=max(0, round(ms / 1000))))


def takeover_text(won: Lease, me: Me) -> str | None:
    """None when the lease was free (the first start, or a clean stop released it)."""
    before = won.previous
    if not won.took_over or before is None or before.released:
        return None
    silent = won.acquired_ms - before.renewed_ms
    if before.holder == me.holder:
        return (
            f"🔁 <b>supervisor was down</b> from {_when(before.renewed_ms)} to "
            f"{_when(won.acquired_ms)} ({_gap(silent)}); {escape(me.holder)} on "
            f"{escape(me.host)} leads again (epoch {won.epoch})"
        )
    return (
        f"🔁 <b>{escape(me.holder)} on {escape(me.host)} took over</b> from "
        f"{escape(before.holder)} on {escape(before.host)} after {_gap(silent)} without a "
        f"heartbeat (epoch {won.epoch})"
    )

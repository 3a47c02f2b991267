"""Who leads, read from the store for people: the `leadership` of `status --json` and
`/status`, and the one line `status` and the chat's /status print."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from supervisor.core.timefmt import iso
from supervisor.record.store.lease import current_lease
from supervisor.record.store.store import Store


@dataclass(frozen=True, kw_only=True)
class LeaderView:
    leader: str | None  #: the lease's holder (None: nobody ever led, or it stepped down)
    host: str
    epoch: int
    since_ms: int
    renewed_ms: int
    expires_ms: int
    now_ms: int
    me: str  #: this instance ('' when read by the CLI)
    my_epoch: int | None  #: the epoch this instance leads under

    @property
    def leading(self) -> bool:
        return self.my_epoch is not None and self.my_epoch == self.epoch and self.current

    @property
    def current(self) -> bool:
        """The lease is held (not run out, not released)."""
        return self.leader is not None and self.expires_ms > self.now_ms


async def leader_view(store: Store) -> LeaderView:
    async with store.tx(write=False) as conn:
        lease = await current_lease(conn)
    if lease is None:
        return LeaderView(
            leader=None, host="", epoch=0, since_ms=0, renewed_ms=0, expires_ms=0, now_ms=0,
            me=store.fence_holder, my_epoch=store.fence_epoch,
        )  # fmt: skip
    return LeaderView(
        leader=None if lease.released else lease.holder,
        host=lease.host,
        epoch=lease.epoch,
        since_ms=lease.acquired_ms,
        renewed_ms=lease.renewed_ms,
        expires_ms=lease.expires_ms,
        now_ms=lease.now_ms,
        me=store.fence_holder,
        my_epoch=store.fence_epoch,
    )


def _at(ms: int) -> str | None:
    return iso(datetime.fromtimestamp(ms / 1000, UTC)) if ms else None


def leadership_document(view: LeaderView) -> dict[str, Any]:
    """The `leadership` part of `/status` and `status --json`."""
    return {
        "leader": view.leader,
        "host": view.host or None,
        "epoch": view.epoch,
        "current": view.current,
        "since": _at(view.since_ms),
        "renewed_at": _at(view.renewed_ms),
        "expires_at": _at(view.expires_ms),
        "this_instance": view.me or None,
        "leading": view.leading,
    }


def leadership_line(view: LeaderView) -> str:
    """`leader: a on forge (epoch 3, renewed 2s ago)`, or why there is none."""
    if view.leader is None:
        return "leader: none (no instance holds the lease)"
    ago = max(0, round((view.now_ms - view.renewed_ms) / 1000))
    state = "" if view.current else f"; lease ran out {_ago(view.now_ms - view.expires_ms)} ago"
    return f"leader: {view.leader} on {view.host} (epoch {view.epoch}, renewed {ago}s ago{state})"


def _ago(ms: int) -> str:
    return f"{max(0, round(ms / 1000))}s"

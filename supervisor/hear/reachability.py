"""Host reachability: one cause, not N incidents.

A host that stops answering on its SSH port is one incident of its own; its endpoints go
`unreachable` and nothing acts on them until it answers again. `local: true` hosts are never
checked. Confirmation mirrors the endpoints': `failures_to_down` failed checks and a re-check.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import timedelta

import structlog

from supervisor.config.supervised import Host
from supervisor.core.clock import Clock
from supervisor.core.durations import format_duration
from supervisor.core.events import HostReachability
from supervisor.judge.machine import HostState, Trigger
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.state import Transition


async def tcp_check(address: str, port: int, within: timedelta) -> str:
    """'' when something accepts a TCP connection, else the plain reason."""
    try:
        async with asyncio.timeout(within.total_seconds()):
            _, writer = await asyncio.open_connection(address, port)
    except TimeoutError:
        return f"no answer on {address}:{port} within {format_duration(within)}"
    except OSError as exc:
        if exc.errno == errno.ECONNREFUSED:
            return f"connection refused on {address}:{port}"
        return f"cannot connect to {address}:{port}: {exc.strerror or exc}"
    writer.close()
    with suppress(OSError):
        await writer.wait_closed()
    return ""


Checker = Callable[[Host], Awaitable[str]]
Broadcast = Callable[[HostReachability], None]


class HostWatcher:
    def __init__(
        self,
        host: Host,
        *,
        store: Store,
        clock: Clock,
        broadcast: Broadcast,
        failures_to_down: int,
        timeout: timedelta,
        restored: Snapshot | None,
        checker: Checker | None = None,
    ) -> None:
        self.host = host
        self._store = store
        self._clock = clock
        self._broadcast = broadcast
        self._threshold = failures_to_down
        self._timeout = timeout
        self._checker = checker or self._tcp
        self._lock = asyncio.Lock()
        self.state = HostState(restored.state) if restored else HostState.UNKNOWN
        self.since = restored.since if restored else clock.now()
        self.incident_id = restored.incident_id if restored else None
        self.failures = restored.fail_streak if restored else 0
        self.last_reason = restored.last_reason if restored else ""
        self._log = structlog.get_logger("supervisor.host").bind(host=host.name)

    async def _tcp(self, host: Host) -> str:
        assert host.address is not None  # config guarantees it for non-local hosts
        return await tcp_check(host.address, host.port, self._timeout)

    async def probe_once(self) -> str:
        """One check, changing nothing: '' when the host answers."""
        return await self._checker(self.host)

    async def check(self) -> None:
        """Check once; at the threshold, re-check at once before calling it unreachable."""
        async with self._lock:
            reason = await self._checker(self.host)
            if reason:
                self.failures += 1
                self._log.info("host check failed", reason=reason, failures=self.failures)
                if self.failures >= self._threshold and self.state != HostState.UNREACHABLE:
                    reason = await self._checker(self.host)
                    if reason:
                        self.last_reason = reason
                        await self._change(HostState.UNREACHABLE, reason)
                        return
                else:
                    self.last_reason = reason
                    await self._store.save_snapshot(self._snapshot())
                    return
            self.failures = 0
            self.last_reason = ""
            if self.state != HostState.REACHABLE:
                await self._change(HostState.REACHABLE, "answers again")
            else:
                await self._store.save_snapshot(self._snapshot())

    async def _change(self, state: HostState, reason: str) -> None:
        source, self.state, self.since = self.state, state, self._clock.now()
        lost = state == HostState.UNREACHABLE
        record = Transition(
            source=source,
            dest=state,
            trigger=Trigger.HOST_LOST if lost else Trigger.HOST_BACK,
            note=reason,
            of_host=True,
            failures=self.failures,
        )
        entry = TimelineEntry(at=self.since, subject=self.host.name, record=record)
        closing = source == HostState.UNREACHABLE and not lost
        self.incident_id = await self._store.transition(
            snapshot=self._snapshot(),
            entry=entry,
            open_cause=f"host {self.host.name} does not answer: {reason}" if lost else None,
            close_resolution="host answers again" if closing else None,
        )
        if not lost:
            self.incident_id = None
        await self._store.save_snapshot(self._snapshot())
        self._log.warning("host transition", source=source, dest=state, reason=reason)
        if lost or source == HostState.UNREACHABLE:
            self._broadcast(
                HostReachability(
                    host=self.host.name,
                    reachable=not lost,
                    reason=reason,
                    at=self.since,
                    incident_id=self.incident_id,
                )
            )

    def _snapshot(self) -> Snapshot:
        return Snapshot(
            kind=SubjectKind.HOST,
            name=self.host.name,
            state=self.state,
            since=self.since,
            incident_id=self.incident_id,
            fail_streak=self.failures,
            last_reason=self.last_reason,
            updated_at=self._clock.now(),
        )

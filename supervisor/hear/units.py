"""The daemon's ear: what systemd says about the configured units on every host
(`supervisor.hear.streams`: one journal stream per host), routed to the endpoints' workers at once.

- **Route.** An event about `(host, unit)` goes to every endpoint whose `units` hold that pair,
  as a `UnitSignal` (the worker judges it: a death plus one failed probe is down). A death is a
  unit that failed, exited on its own or crash-loops; a `stopped` (a stop job: someone ran
  `systemctl stop`, a deploy) is evidence only: the probes find a unit left stopped, and a
  relaunch that fails is a death of its own.
- **Resume.** Each host's journal cursor is kept in the store (`supervisor.record.store.cursors`,
  written under the leader's fence every few seconds when it moved, at once after an event was
  delivered, and at stop: before the lease is released on a clean stop), and read by
  `load` when a leader starts: a restarted daemon, or the next leader on a shared store,
  resumes each stream where the last leader stopped, so nothing is missed across a restart or
  a takeover. A `journal-cursors.json` that an older release left beside the SQLite file is
  taken over once by `load`: its cursors go into the store (a host the store already knows
  keeps the store's), and the file is deleted.
- **Status.** Each host's stream status (`streaming`, `reconnecting (...)`, `polling: WHY`) is
  kept in the same rows, for `status` (which reads the store, not the daemon) and `/status`.
- **Warm.** `transports` are connections a follower kept open (`supervisor.hear.streams.warm`):
  the streams run on them, and leave them open for the next follow phase.
- **Lean.** `supervisor.hear.streams` (and asyncssh with it) is imported only when some systemd
  host runs configured units.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from supervisor.config.models import FleetConfig
from supervisor.core.clock import utcnow
from supervisor.core.events import UnitSignal
from supervisor.core.streamstatus import StreamStatus
from supervisor.record.store.cursors import read_streams, save_streams
from supervisor.record.store.errors import StoreError
from supervisor.record.store.store import Store

if TYPE_CHECKING:
    from supervisor.hear.streams.events import UnitEvent
    from supervisor.hear.streams.hub import HostEvents
    from supervisor.hear.streams.protocol import Transport
    from supervisor.hear.streams.stream import StreamSettings
    from supervisor.hear.streams.warm import WarmTransports

log = structlog.get_logger("supervisor.unitevents")

CURSORS_FILE = "journal-cursors.json"
SAVE_EVERY_S = 5.0
#: the kinds that are a death (see the module's doc)
DEATHS = frozenset({"failed", "exited", "crash_loop"})

Submit = Callable[[str, UnitSignal], None]
"""Hands a signal to the named endpoint's worker."""


def state_path(config: FleetConfig) -> Path:
    """Where an older release kept the cursors and the stream status: beside the SQLite file."""
    return config.store.path.with_name(CURSORS_FILE)


def read_state(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(cursors, status) per host; empty when there is no file or it cannot be read."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, {}
    except (OSError, ValueError) as exc:
        log.warning(
            "journal cursors unreadable: streams start from the newest entry", error=str(exc)
        )
        return {}, {}
    if not isinstance(data, dict):
        return {}, {}

    def strings(key: str) -> dict[str, str]:
        found = data.get(key)
        if not isinstance(found, dict):
            return {}
        return {str(k): v for k, v in found.items() if isinstance(v, str)}

    return strings("cursors"), strings("status")


def _systemd_units(config: FleetConfig) -> set[tuple[str, str]]:
    return {
        (ref.host, ref.unit)
        for endpoint in config.endpoints.values()
        for ref in endpoint.units
        if ref.host in config.hosts and config.hosts[ref.host].service_manager == "systemd"
    }


def warm_transports(config: FleetConfig) -> WarmTransports | None:
    """A follower's warm connections to the remote hosts whose units are streamed (None when
    there are none: asyncssh is not even imported)."""
    if not _systemd_units(config):
        return None
    from supervisor.hear.streams.warm import WarmTransports

    warm = WarmTransports(config)
    return warm if warm.transports else None


def signal_of(endpoint: str, event: UnitEvent) -> UnitSignal:
    return UnitSignal(
        endpoint=endpoint,
        host=event.host,
        unit=event.unit,
        kind=event.kind.value,
        down=event.kind.value in DEATHS,
        line=event.summary(),
        message=event.message,
        at=event.at,
        lines=event.lines,
        result=event.result,
        exit_status=event.exit_status,
        n_restarts=event.n_restarts,
        source=event.source,
        cursor=event.cursor,
        model=event.model,
    )


class UnitEvents:
    """`load`, `start`, `status`, `stop`; `reconfigure` after a reload. Without a `store`
    nothing is kept (tests). `transports` replace the streams' own (a follower's warm
    connections, or a test's scripted host); `settings` the streams' defaults (tests)."""

    def __init__(
        self,
        config: FleetConfig,
        submit: Submit,
        *,
        store: Store | None = None,
        settings: StreamSettings | None = None,
        transports: Mapping[str, Transport] | None = None,
    ) -> None:
        self.config = config
        self._submit = submit
        self._store = store
        self._settings = settings
        self._transports = dict(transports or {})
        self.cursors: dict[str, str] = {}  #: where the streams start (the stored cursors)
        self.hub: HostEvents | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._saved: tuple[dict[str, str], dict[str, StreamStatus]] | None = None
        self._delivered = asyncio.Event()  #: an event went out: save its cursor at once

    async def load(self) -> None:
        """Read the stored cursors (the last leader's), taking over an older release's
        `journal-cursors.json` first. Before `start`."""
        if self._store is None:
            return
        try:
            self.cursors = (await read_streams(self._store)).cursors
        except StoreError as exc:
            log.warning(
                "journal cursors unreadable: streams start from the newest entry", error=str(exc)
            )
            return
        path = state_path(self.config)
        if not path.exists():
            return
        old_cursors, old_status = read_state(path)
        taken = {h: c for h, c in old_cursors.items() if h not in self.cursors}
        try:
            if taken:
                kept = {h: StreamStatus.loads(s) for h, s in old_status.items() if h in taken}
                await save_streams(self._store, taken, kept, at=utcnow())
        except StoreError as exc:  # the file stays for the next start
            log.warning("journal-cursors.json not taken over", error=str(exc))
            return
        path.unlink(missing_ok=True)
        self.cursors |= taken
        log.info("journal cursors taken over into the store", file=str(path), hosts=sorted(taken))

    def start(self) -> None:
        if not _systemd_units(self.config):
            return
        from supervisor.hear.streams.hub import HostEvents  # asyncssh only when needed

        self.hub = HostEvents(
            self.config,
            self._route,
            cursors=self.cursors,
            settings=self._settings,
            transports=self._transports,
        )
        self._tasks = [
            asyncio.create_task(self.hub.run(), name="hostevents"),
            asyncio.create_task(self._keep(), name="hostevents:cursors"),
        ]
        log.info("listening to systemd", hosts=sorted(self.hub.streams))

    def status(self) -> dict[str, StreamStatus]:
        """Each host's stream: streaming, reconnecting, polling (why)."""
        return self.hub.status() if self.hub is not None else {}

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        await self._save()
        if self.hub is not None:
            self.cursors |= self.hub.cursors()  # a reload starts again from here
        self.hub = None

    async def reconfigure(self, config: FleetConfig) -> None:
        """A reload: the streams start again when the units to follow changed (from the cursors
        they reached)."""
        changed = _systemd_units(config) != _systemd_units(self.config) or any(
            config.hosts.get(h) != self.config.hosts.get(h) for h, _ in _systemd_units(config)
        )
        old, self.config = self.config, config
        if changed:
            # a handed-over connection serves its host only while the host is unchanged
            self._transports = {
                h: t for h, t in self._transports.items() if old.hosts.get(h) == config.hosts.get(h)
            }
            await self.stop()
            self.start()

    def _route(self, event: UnitEvent) -> None:
        pair = (event.host, event.unit)
        for name, endpoint in self.config.endpoints.items():
            if any((ref.host, ref.unit) == pair for ref in endpoint.units):
                self._submit(name, signal_of(name, event))
        self._delivered.set()

    async def _keep(self) -> None:
        """Save every `SAVE_EVERY_S`, and as soon as an event was delivered (the next leader
        should not hear it again)."""
        while True:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._delivered.wait(), SAVE_EVERY_S)
            self._delivered.clear()
            await self._save()

    async def _save(self) -> None:
        """Write the cursors and status when they changed (fenced: a deposed leader's write is
        refused, and the new leader's cursors stay)."""
        if self.hub is None or self._store is None:
            return
        document = (self.hub.cursors(), self.hub.status())
        if document == self._saved:
            return
        try:
            await save_streams(self._store, *document, at=utcnow())
        except StoreError as exc:
            log.warning("journal cursors not saved", error=str(exc))
            return
        self._saved = document

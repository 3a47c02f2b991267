"""The daemon's ear: what systemd says about the configured units on every host
(`supervisor.hostevents`: one journal stream per host), routed to the endpoints' workers at once.

- **Route.** An event about `(host, unit)` goes to every endpoint whose `units` hold that pair,
  as a `UnitSignal` (the worker judges it: a death plus one failed probe is down). A death is a
  unit that failed, exited on its own or crash-loops; a `stopped` (a stop job: someone ran
  `systemctl stop`, a deploy) is evidence only: the probes find a unit left stopped, and a
  relaunch that fails is a death of its own.
- **Resume.** Each host's journal cursor is kept in `journal-cursors.json` beside the store
  (written every few seconds when it moved, and at stop), so a restarted daemon resumes each
  stream where the last one stopped: nothing is missed across a restart either.
- **Status.** Each host's stream status (`streaming`, `reconnecting (...)`, `polling: WHY`) is
  kept in the same file, for `status` (which reads the store, not the daemon) and `/status`.
- **Lean.** `supervisor.hostevents` (and asyncssh with it) is imported only when some systemd
  host runs configured units.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from supervisor.config import FleetConfig
from supervisor.events import UnitSignal

if TYPE_CHECKING:
    from supervisor.hostevents import HostEvents, StreamSettings, Transport, UnitEvent

log = structlog.get_logger("supervisor.unitevents")

CURSORS_FILE = "journal-cursors.json"
SAVE_EVERY_S = 5.0
#: the kinds that are a death (see the module's doc)
DEATHS = frozenset({"failed", "exited", "crash_loop"})

Submit = Callable[[str, UnitSignal], None]
"""Hands a signal to the named endpoint's worker."""


def state_path(config: FleetConfig) -> Path:
    """Where the cursors and the stream status are kept: beside the store."""
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
    )


class UnitEvents:
    """`start`, `status`, `stop`; `reconfigure` after a reload. `settings` and `transports`
    replace the streams' defaults (tests)."""

    def __init__(
        self,
        config: FleetConfig,
        submit: Submit,
        *,
        settings: StreamSettings | None = None,
        transports: Mapping[str, Transport] | None = None,
    ) -> None:
        self.config = config
        self._submit = submit
        self._settings = settings
        self._transports = transports
        self._path = state_path(config)
        self.hub: HostEvents | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._saved: dict[str, Any] = {}

    def start(self) -> None:
        if not _systemd_units(self.config):
            return
        from supervisor.hostevents import HostEvents  # asyncssh only when needed

        cursors, _ = read_state(self._path)
        self.hub = HostEvents(
            self.config,
            self._route,
            cursors=cursors,
            settings=self._settings,
            transports=self._transports,
        )
        self._tasks = [
            asyncio.create_task(self.hub.run(), name="hostevents"),
            asyncio.create_task(self._keep(), name="hostevents:cursors"),
        ]
        log.info("listening to systemd", hosts=sorted(self.hub.streams))

    def status(self) -> dict[str, str]:
        """Each host's stream: `streaming`, `reconnecting (...)`, `polling: WHY`."""
        return self.hub.status() if self.hub is not None else {}

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        self._save()
        self.hub = None

    async def reconfigure(self, config: FleetConfig) -> None:
        """A reload: the streams start again when the units to follow changed (from the cursors
        they reached)."""
        changed = _systemd_units(config) != _systemd_units(self.config) or any(
            config.hosts.get(h) != self.config.hosts.get(h) for h, _ in _systemd_units(config)
        )
        self.config = config
        if changed:
            await self.stop()
            self.start()

    def _route(self, event: UnitEvent) -> None:
        pair = (event.host, event.unit)
        for name, endpoint in self.config.endpoints.items():
            if any((ref.host, ref.unit) == pair for ref in endpoint.units):
                self._submit(name, signal_of(name, event))

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(SAVE_EVERY_S)
            self._save()

    def _save(self) -> None:
        if self.hub is None:
            return
        document = {"cursors": self.hub.cursors(), "status": self.hub.status()}
        if document == self._saved:
            return
        tmp = self._path.with_name(f".{self._path.name}.tmp")
        try:
            tmp.write_text(json.dumps(document, indent=1, sort_keys=True))
            os.replace(tmp, self._path)
        except OSError as exc:
            log.warning("journal cursors not saved", error=str(exc))
            return
        self._saved = document

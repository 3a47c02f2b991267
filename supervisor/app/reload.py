"""Config reload on SIGHUP: read and validate the file, then hand it to `reconcile`.

The new file is validated first; a bad one is refused, its errors logged, and the running config
stays. A good one goes to the running supervisor's `reconcile` (`supervisor.runtime.Reconciler`),
which applies it without losing state, one reload at a time.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from supervisor.config.errors import ConfigError
from supervisor.config.keys import with_keys
from supervisor.config.loader import load_config
from supervisor.config.models import FleetConfig

log = structlog.get_logger("supervisor.ops.reload")


class Reconcilable(Protocol):
    """What a reload needs of the running supervisor."""

    @property
    def config(self) -> FleetConfig:
        """The config in force (its `source` is the file a reload reads)."""
        ...

    async def reconcile(self, new: FleetConfig) -> list[str]:
        """Apply `new`; returns what changed, one line each."""
        ...


@dataclass(frozen=True, kw_only=True)
class ReloadResult:
    errors: tuple[str, ...] = ()  #: why the new file was refused (nothing applied)
    changes: tuple[str, ...] = ()  #: what was applied, and what waits for a restart


async def reload_from_file(target: Reconcilable, path: Path | None = None) -> ReloadResult:
    """Re-read the config file (default: the one in force) and apply it."""
    source = path or target.config.source
    try:
        new = with_keys(load_config(source), os.environ)
    except ConfigError as exc:
        errors = tuple(str(issue) for issue in exc.issues)
        for error in errors:
            log.error("config reload refused", error=error)
        log.error("config reload refused: the running config stays", file=str(source))
        return ReloadResult(errors=errors)
    changes = await target.reconcile(new)
    return ReloadResult(changes=tuple(changes))


class ConfigReloader:
    """Runs `reload_from_file` in the background on request (SIGHUP), one at a time."""

    def __init__(self, target: Reconcilable) -> None:
        self._target = target
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[ReloadResult]] = set()
        self.last: ReloadResult | None = None

    def request(self) -> None:
        task = asyncio.create_task(self._run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self) -> ReloadResult:
        async with self._lock:
            try:
                self.last = await reload_from_file(self._target)
            except Exception:  # a failed reload must not end the daemon
                log.exception("config reload failed")
                self.last = ReloadResult(errors=("the reload failed: see the log",))
            return self.last

"""Config reload on SIGHUP, without losing state.

The new file is validated first; a bad one is refused, its errors logged, and the running config
stays. A good one is applied, one reload at a time: endpoints added get a worker, removed ones
are stopped, changed ones drain their queue and are replaced by a worker started from the old
one's snapshot (state, incident, streaks carry over) with the new settings; then new probe jobs
replace the old ones. A worker being replaced stays listed until its successor takes its place,
and never starts a repair while it drains (the successor does). An
endpoint in the middle of a repair keeps its old settings until a later reload. `store`, `http`
and `playbook.path` take effect only when the daemon restarts.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

import structlog

from supervisor.config import ConfigError, Endpoint, FleetConfig, load_config
from supervisor.daemon import _current
from supervisor.events import Stop
from supervisor.executor.fleet import FleetExecutor
from supervisor.hosts import HostWatcher
from supervisor.machine import State
from supervisor.schedule import ProbeSchedule
from supervisor.store import Snapshot, Store, SubjectKind
from supervisor.worker import EndpointWorker

if TYPE_CHECKING:
    from supervisor.daemon import Daemon

log = structlog.get_logger("supervisor.ops.reload")

_DRAIN_SECONDS = 10.0
_HOST_TIMEOUT = timedelta(seconds=5)  # as the daemon's
_RESTART_ONLY = ("store", "http", "playbook")
_BUSY = (State.REMEDIATING, State.VERIFYING)
_LOCKS: WeakKeyDictionary[Daemon, asyncio.Lock] = WeakKeyDictionary()


@dataclass(frozen=True, kw_only=True)
class ReloadResult:
    errors: tuple[str, ...] = ()  #: why the new file was refused (nothing applied)
    changes: tuple[str, ...] = ()  #: what was applied, and what waits for a restart

    @property
    def applied(self) -> bool:
        return not self.errors


async def reload_from_file(daemon: Daemon, path: Path | None = None) -> ReloadResult:
    """Re-read the config file (default: the one the daemon runs) and apply it."""
    source = path or daemon.config.source
    try:
        new = load_config(source)
    except ConfigError as exc:
        errors = tuple(str(issue) for issue in exc.issues)
        for error in errors:
            log.error("config reload refused", error=error)
        log.error("config reload refused: the running config stays", file=str(source))
        return ReloadResult(errors=errors)
    changes = await reload_config(daemon, new)
    return ReloadResult(changes=tuple(changes))


async def reload_config(daemon: Daemon, new: FleetConfig) -> list[str]:
    """Apply a validated config to the running daemon; returns what changed, one line each.

    One reload at a time per daemon: two at once would each see the other's half-replaced
    endpoint as new and start a second worker for it."""
    lock = _LOCKS.setdefault(daemon, asyncio.Lock())
    async with lock:
        return await _apply(daemon, new)


async def _apply(daemon: Daemon, new: FleetConfig) -> list[str]:
    store = daemon.store
    if store is None:
        raise RuntimeError("the daemon is not running")
    old = daemon.config
    notes = [
        f"{key} changed: it takes effect when the daemon restarts"
        for key in _RESTART_ONLY
        if getattr(old, key) != getattr(new, key)
    ]
    effective = new.model_copy(update={key: getattr(old, key) for key in _RESTART_ONLY})
    removed: list[EndpointWorker] = []
    try:
        notes += await _reload_hosts(daemon, store, effective)
        notes += await _reload_endpoints(daemon, store, effective, removed)
        daemon.config = effective
        if daemon.remediator is not None:
            daemon.remediator.config = effective
        if isinstance(daemon.executor, FleetExecutor):
            daemon.executor.hosts = effective.hosts
    finally:
        # the old jobs tick on (other endpoints keep being probed while one drains) until the
        # new ones replace them; only then do removed endpoints leave the daemon
        if daemon._schedule is not None:
            await daemon._schedule.stop()
        for worker in removed:
            last = worker.snapshot()
            del daemon.workers[worker.name]
            await daemon.drop_client(worker.name)
            daemon.machine.remove(worker.name)
            await store.save_snapshot(last)
        daemon._schedule = ProbeSchedule(
            daemon.config, daemon.workers, daemon.hosts, store, daemon.clock, daemon.playbook
        )
        daemon._schedule.start()
    for note in notes:
        log.info("config reloaded", change=note)
    if not notes:
        log.info("config reloaded", change="nothing changed")
    return notes


async def _reload_hosts(daemon: Daemon, store: Store, new: FleetConfig) -> list[str]:
    notes = []
    for name in [n for n in daemon.hosts if n not in new.hosts or new.hosts[n].local]:
        del daemon.hosts[name]
        notes.append(f"host {name} is no longer watched")
    for name, host in new.hosts.items():
        current = daemon.hosts.get(name)
        if host.local or (current is not None and current.host == host):
            continue
        daemon.hosts[name] = HostWatcher(
            host,
            store=store,
            clock=daemon.clock,
            broadcast=daemon.broadcast,
            failures_to_down=new.defaults.probe.failures_to_down,
            timeout=min(new.defaults.probe.timeout, _HOST_TIMEOUT),
            restored=await _current(store, SubjectKind.HOST, name),
        )
        notes.append(f"host {name} {'added' if current is None else 'changed'}")
    return notes


async def _reload_endpoints(
    daemon: Daemon, store: Store, new: FleetConfig, removed: list[EndpointWorker]
) -> list[str]:
    """Add, replace and stop workers; stopped ones of removed endpoints go to `removed`."""
    notes = []
    for name in [n for n in daemon.workers if n not in new.endpoints]:
        if _busy(daemon, name):
            notes.append(f"endpoint {name} is being repaired: it is removed at a later reload")
            continue
        worker, _ = await _stop_worker(daemon, name)
        removed.append(worker)
        notes.append(f"endpoint {name} removed")
    for name, endpoint in new.endpoints.items():
        current = daemon.workers.get(name)
        if current is not None and _same(current, endpoint, new):
            continue
        if current is None:
            stored = await _current(store, SubjectKind.ENDPOINT, name)
            _start_worker(daemon, store, endpoint, new, stored)
            notes.append(f"endpoint {name} added")
            continue
        if _busy(daemon, name):
            notes.append(f"endpoint {name} is being repaired: its new settings wait")
            continue
        old, problem = await _stop_worker(daemon, name)
        snapshot = old.snapshot()  # taken, the model removed and the new one added in one step
        daemon.machine.remove(name)
        worker = _start_worker(daemon, store, endpoint, new, snapshot)
        worker.last_problem = old.last_problem
        await store.save_snapshot(snapshot)
        if problem and daemon.remediator is not None:
            daemon.remediator.schedule(worker)  # the problem the old worker saw while draining
        notes.append(f"endpoint {name} changed")
    return notes


def _same(worker: EndpointWorker, endpoint: Endpoint, new: FleetConfig) -> bool:
    return worker.endpoint == endpoint and worker.reopen_within == new.defaults.reopen_within


def _busy(daemon: Daemon, name: str) -> bool:
    """A repair task runs for the endpoint, or it is remediating/verifying."""
    repair = daemon.remediator._tasks.get(name) if daemon.remediator is not None else None
    return daemon.workers[name].state in _BUSY or (repair is not None and not repair.done())


async def _stop_worker(daemon: Daemon, name: str) -> tuple[EndpointWorker, bool]:
    """Let the worker finish what it has queued, then end its task. It stays in
    `daemon.workers` (and its model in the machine) for the caller to replace or remove.

    While it drains it must not start a repair: the repair would hold this worker, not the
    one that replaces it. Returns the worker and whether it ran into a problem meanwhile."""
    worker = daemon.workers[name]
    problems: list[EndpointWorker] = []
    worker.on_problem = problems.append
    worker.submit(Stop(endpoint=name, at=daemon.clock.now()))
    for task in [t for t in daemon._tasks if t.get_name() == f"endpoint:{name}"]:
        with suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=_DRAIN_SECONDS)
        daemon._tasks.remove(task)
    return worker, bool(problems)


def _start_worker(
    daemon: Daemon,
    store: Store,
    endpoint: Endpoint,
    new: FleetConfig,
    snapshot: Snapshot | None,
) -> EndpointWorker:
    return daemon.start_worker(endpoint, snapshot, reopen_within=new.defaults.reopen_within)


class ConfigReloader:
    """Runs `reload_from_file` in the background on request (SIGHUP), one at a time."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon
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
                self.last = await reload_from_file(self._daemon)
            except Exception:  # a failed reload must not end the daemon
                log.exception("config reload failed")
                self.last = ReloadResult(errors=("the reload failed: see the log",))
            return self.last

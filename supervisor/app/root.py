"""The composition root: the one place that builds the supervisor from its config and wires the
parts together. It opens the store, loads the live playbook, makes the repair runner, builds the
running system (`supervisor.runtime.Daemon`: host watchers, endpoint workers, the probe schedule),
and around it the adapters: the ops side (HTTP, sd_notify, watchdog, config reload) and the
notifier (Telegram, imported only when configured). The parts know each other only through what
is handed to them here; the root closes what it opened, the daemon stops what runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING

import structlog

from supervisor.app.reload import ConfigReloader
from supervisor.app.service import OpsRuntime
from supervisor.config.models import FleetConfig
from supervisor.control import ControlApi
from supervisor.control.wiring import start_control
from supervisor.core.aio import stop_in_order
from supervisor.core.clock import Clock, SystemClock
from supervisor.core.httpclient import HttpClient
from supervisor.core.peers import PeerDoor
from supervisor.core.tenure import Tenure
from supervisor.core.tls import CertifiContext
from supervisor.execute.base import Executor
from supervisor.execute.fenced import FencedExecutor
from supervisor.execute.fleet import FleetExecutor
from supervisor.hear.reachability import HostWatcher
from supervisor.judge.machine import FleetMachine
from supervisor.judge.progress.read import ProgressReads
from supervisor.playbook.actions.registry import ACTIONS
from supervisor.playbook.live import LivePlaybook
from supervisor.probe import run_probe
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.spill import spill_place
from supervisor.record.store.store import Store
from supervisor.record.store.target import store_target
from supervisor.repair import Remediator
from supervisor.runtime import Daemon
from supervisor.tell.telegram.start import make_notifier
from supervisor.tell.telegram.timing import Timing
from supervisor.worker import EndpointWorker, Prober

if TYPE_CHECKING:
    from supervisor.hear.streams.protocol import Transport
    from supervisor.tell.telegram.notifier import Notifier

log = structlog.get_logger("supervisor.app")


class Supervisor:
    """Everything the `run` command runs. `start`, then `stop`."""

    def __init__(
        self,
        config: FleetConfig,
        *,
        clock: Clock | None = None,
        prober: Prober | None = None,
        executor: Executor | None = None,
        dry_run: bool = False,
    ) -> None:
        self._config = config
        self.clock = clock or SystemClock()
        self.executor: Executor = executor or FleetExecutor(config)
        self.dry_run = dry_run or config.remediation.dry_run
        self._prober = prober
        self.store: Store | None = None
        self.playbook: LivePlaybook | None = None
        self.remediator: Remediator | None = None
        self.daemon: Daemon | None = None  #: the running system, once started
        self.ops = OpsRuntime()
        self.control: ControlApi | None = None  #: silences, pauses, acks, restarts
        self.notifier: Notifier | None = None
        self.notify_timing: Timing | None = None  #: the notifier's timings (tests shorten them)
        self._http: HttpClient | None = None  #: the probes', the repair runner's, progress reads'
        self._reloader = ConfigReloader(self)
        # [leadership] set by `supervisor.app.leader.gate` before `start`: the epoch (holder,
        # host) every write, command and message is fenced by, and who to tell when refused
        self.fence: tuple[int, str, str] | None = None
        self.on_deposed: Callable[[StaleEpochError], None] | None = None
        #: [leadership] whether we still lead, by the lease's deadline on our monotonic clock:
        #: checked by every part that reaches the outside (unfenced: always)
        self.tenure = Tenure()
        #: [leadership] the peers' question as this instance answers it (`store.peers`)
        self.peer_door: PeerDoor | None = None
        #: [leadership] why the last leader's unfinished repairs were cut (a takeover: deposed)
        self.interrupted_why = "the daemon stopped"
        #: [leadership] the hosts' event-stream connections a follower kept open (the gate's)
        self.transports: Mapping[str, Transport] | None = None
        #: [leadership] awaited before each batch of queued writes the store replays: the
        #: lease's renewal under way goes first (the gate's `Elector.quiet`)
        self.renewal_first: Callable[[], Awaitable[None]] | None = None

    @property
    def config(self) -> FleetConfig:
        """The config in force (a reload replaces it)."""
        return self.daemon.config if self.daemon is not None else self._config

    @property
    def workers(self) -> Mapping[str, EndpointWorker]:
        return self._running().workers

    @property
    def hosts(self) -> Mapping[str, HostWatcher]:
        return self._running().hosts

    @property
    def machine(self) -> FleetMachine:
        return self._running().machine

    def _running(self) -> Daemon:
        if self.daemon is None:
            raise RuntimeError("the supervisor is not started")
        return self.daemon

    async def start(self) -> None:
        config = self._config
        spill = spill_place(
            config.store.spill_dir, config.store.spill_max, config_dir=config.source.parent
        )
        self.store = store = await ResilientStore.open(store_target(config.store), spill=spill)
        executor = self._fenced(store)  # [leadership]
        await store.recover()  # what a process that died in an outage kept, before anything new
        # One client for all the daemon's HTTP: every endpoint's probes, the repair runner's
        # and progress reads. Its session keeps connections per origin, so endpoints never share
        # one; a session per endpoint cost the same CPU and more memory (bench/RESULTS.md, "One
        # HTTP client": 0.8-1.0 ms a probe either way, 1.4 MB more at 200 endpoints).
        self._http = http = HttpClient(CertifiContext())
        prober = self._prober or partial(run_probe, client=http, clock=self.clock)
        self.playbook = LivePlaybook(config.playbook.path)
        self.remediator = remediator = Remediator(
            config=config,
            store=store,
            executor=executor,
            http=self._http,
            clock=self.clock,
            playbook=self.playbook,
            actions=ACTIONS,
            prober=prober,
            dry_run=self.dry_run,
        )
        self.daemon = daemon = Daemon(
            config,
            store=store,
            playbook=self.playbook,
            remediator=remediator,
            clock=self.clock,
            prober=prober,
            reconfigured=self._reconfigured,
            progress=ProgressReads(self._http, self.clock),
            transports=self.transports,
        )
        daemon.interrupted_why = self.interrupted_why
        await daemon.restore()  # workers from their snapshots; nothing probed yet
        # stored pauses and silences are in force before the first probe
        self.control = control = await start_control(
            store=store,
            workers=daemon.workers,
            config=lambda: self.config,
            remediator=remediator,
            clock=self.clock,
        )
        # the outbox's cursor is found before the first probe: on a new store, an endpoint
        # already down is told, not taken for history
        self.notifier = self._make_notifier(daemon, remediator, control)
        if self.notifier is not None:
            remediator.approver = self.notifier.approve  # confirm-mode rules ask in chat
            await self.notifier.start()
        daemon.start_probing()
        await self.ops.start(  # HTTP (+ control), READY=1, watchdog
            daemon, control=control, tenure=self.tenure, peer=self.peer_door
        )
        log.info("started", endpoints=len(daemon.workers), hosts=len(daemon.hosts))

    def _fenced(self, store: ResilientStore) -> Executor:
        """[leadership] Under an epoch, the store refuses stale writes and every command asks
        the fence first (`supervisor.record.store.lease`)."""
        if self.fence is None:
            return self.executor
        store.fence_epoch, store.fence_holder, store.fence_host = self.fence
        store.before_batch = self.renewal_first
        if self.on_deposed is not None:
            store.on_deposed.append(self.on_deposed)
        return FencedExecutor(self.executor, store)

    def _make_notifier(
        self, daemon: Daemon, remediator: Remediator, control: ControlApi
    ) -> Notifier | None:
        """Alerts, commands and the confirm-mode approver; None without Telegram (whose
        client `make_notifier` imports only when it is configured)."""
        return make_notifier(
            daemon.config,
            store=daemon.store,
            workers=daemon.workers,
            hosts=daemon.hosts,
            remediator=remediator,
            clock=self.clock,
            control=control,
            timing=self.notify_timing,
            tenure=self.tenure,
        )

    def _reconfigured(self, config: FleetConfig) -> None:
        """A reload applied `config`: the runner and the executor follow it."""
        if self.remediator is not None:
            self.remediator.config = config
        if isinstance(self.executor, FleetExecutor):
            self.executor.hosts = config.hosts

    async def reconcile(self, new: FleetConfig) -> list[str]:
        """Apply a validated config to the running daemon (see `Daemon.reconcile`); stored
        silences then cover the endpoints it added."""
        notes = await self._running().reconcile(new)
        if self.control is not None:
            await self.control.restore_silences()
        return notes

    def reload_playbook(self) -> list[str]:
        """Load the playbook again (a broken rule is disabled, the others stay in force)."""
        return self.playbook.reload() if self.playbook is not None else []

    def request_reload(self) -> None:
        """SIGHUP: the playbook now, the config file in the background (a bad file is
        refused and the running config stays)."""
        self.reload_playbook()
        self._reloader.request()

    async def step_down(self) -> None:
        """[leadership] Before a clean stop releases the lease: the unit events stop and save
        their cursors, so the next leader resumes exactly where they were."""
        if self.daemon is not None:
            await self.daemon.unit_events.stop()

    async def stop(self) -> None:
        """Stop every part, in order; the `stopped` line names each part that took a second or
        more (`slow_s`), so a slow stop says where it waited."""
        parts: list[tuple[str, Callable[[], Awaitable[None]] | None]] = [
            ("ops", self.ops.stop),  # STOPPING=1, watchdog and HTTP server off
            ("daemon", self.daemon.stop if self.daemon is not None else None),
            ("notifier", self.notifier.stop if self.notifier is not None else None),
            ("http", self._http.aclose if self._http is not None else None),
            ("executor", self.executor.close),
            ("store", self.store.close if self.store is not None else None),
        ]
        slow = await stop_in_order(parts)
        log.info("stopped", **({"slow_s": slow} if slow else {}))

"""The Telegram component the daemon starts and stops: composer, sender, commands and the
confirm-mode Approver, all inside the daemon's own event loop (initialize, start polling,
start; stop in reverse). A Bot API that is down at start-up is retried in the background: the
composer keeps queueing meanwhile, and the sender delivers once the bot is up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from datetime import timedelta
from typing import Any

import structlog
from telegram.error import TelegramError
from telegram.ext import ApplicationBuilder

from supervisor.config.models import FleetConfig
from supervisor.config.sections import TelegramConfig
from supervisor.control import ControlApi
from supervisor.core.clock import Clock
from supervisor.core.tenure import Tenure
from supervisor.hear.reachability import HostWatcher
from supervisor.playbook.model import Rule
from supervisor.record.store.errors import unwritable_cause
from supervisor.record.store.outbox import OutboxDraft, OutboxStore
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.store import Store
from supervisor.repair import Remediator
from supervisor.tell.telegram.auth import quiet_http_logs
from supervisor.tell.telegram.bot import App, Commands
from supervisor.tell.telegram.composer import Composer
from supervisor.tell.telegram.memory import Settings
from supervisor.tell.telegram.request import TenuredRequest, polling_failed
from supervisor.tell.telegram.sender import Sender
from supervisor.tell.telegram.texts import h
from supervisor.tell.telegram.timing import Timing
from supervisor.worker import EndpointWorker

log = structlog.get_logger("supervisor.notify")

POLLER_STOP_S = 2.0
"""How long a stop waits for the bot's poller (it ends at once unless it sleeps after a failure)."""


class Notifier:
    def __init__(
        self,
        *,
        config: FleetConfig,
        telegram: TelegramConfig,
        token: str,
        store: Store,
        workers: Mapping[str, EndpointWorker],
        hosts: Mapping[str, HostWatcher],
        remediator: Remediator | None,
        clock: Clock,
        control: ControlApi | None = None,
        timing: Timing | None = None,
        diagnose: Callable[[str], Awaitable[list[str]]] | None = None,
        tenure: Tenure | None = None,
    ) -> None:
        self.timing = timing or Timing()
        self._telegram = telegram
        self.tenure = tenure = tenure or Tenure()
        quiet_http_logs(token)
        builder = (
            ApplicationBuilder()
            .token(token)
            .concurrent_updates(True)
            # every Bot API call first asks whether we still lead (no store round trip)
            .request(TenuredRequest(tenure, part="the bot", connection_pool_size=256))
            # two connections: at shutdown python-telegram-bot cancels the long poll without
            # awaiting it and at once asks for updates once more; on a busy machine the one
            # connection was still held then (its pool timed out, and the call failed)
            .get_updates_request(
                TenuredRequest(tenure, part="the bot's poller", connection_pool_size=2)
            )
        )
        if telegram.base_url:
            builder = builder.base_url(telegram.base_url)
        self.app: App = builder.build()
        self.outbox = OutboxStore(store)
        self._store = store
        host_endpoints = {
            name: tuple(e for e, w in workers.items() if name in w.endpoint.hosts())
            for name in hosts
        }
        routes_behind = {
            name: tuple(r for r, w in workers.items() if name in w.endpoint.depends_on())
            for name in workers
        }
        settings = Settings(
            remind_every=config.notify.remind_every,
            flap_every=self.timing.flap_every,
            settle=self.timing.settle or config.defaults.reopen_within,
            host_endpoints=host_endpoints,
            routes_behind={name: routes for name, routes in routes_behind.items() if routes},
            busy_after=config.notify.busy_after,
        )
        self.sender = Sender(
            self.app.bot, self.outbox, store, clock, self.timing.pacing, tenure=tenure
        )
        self.composer = Composer(
            self.outbox,
            clock,
            settings,
            telegram.chat_ids,
            every=self.timing.compose_every,
            on_queued=self.sender.kick,
        )
        self.commands = Commands(
            config=config,
            telegram=telegram,
            store=store,
            outbox=self.outbox,
            workers=workers,
            hosts=hosts,
            remediator=remediator,
            control=control,
            clock=clock,
            memory_lock=self.composer.lock,
            replies=self.sender.replies,
            diagnose=diagnose,
        )
        self.commands.install(self.app)
        self._control = control
        self._clock = clock
        self.ready = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        """Before the first probe (`Supervisor.start`): the composer's cursor is found first."""
        await self.composer.begin()
        self._store.on_timeline.append(self.composer.wake)
        if isinstance(self._store, ResilientStore):
            self._store.on_outage.append(self._store_outage)
        if self._control is not None:
            self._control.on_ack.append(self.commands.remember_ack)
        self._tasks.append(asyncio.create_task(self.composer.run(), name="notify:composer"))
        self._tasks.append(asyncio.create_task(self._bring_up(), name="notify:bot"))

    async def _bring_up(self) -> None:
        while True:
            try:
                await self.app.initialize()
                break
            except TelegramError as exc:
                log.warning("telegram: Bot API not reachable; retrying", error=str(exc))
                await asyncio.sleep(self.timing.startup_retry)
        self._tasks.append(asyncio.create_task(self.sender.run(), name="notify:sender"))
        updater = self.app.updater
        assert updater is not None
        while True:
            try:
                await self.commands.register(self.app)
                await updater.start_polling(
                    timeout=timedelta(seconds=self.timing.poll_timeout),
                    error_callback=polling_failed,
                )
                break
            except TelegramError as exc:
                log.warning("telegram: cannot start polling; retrying", error=str(exc))
                await asyncio.sleep(self.timing.startup_retry)
        await self.app.start()
        self.ready.set()
        log.info("telegram: bot up", chats=len(self._telegram.chat_ids))

    def _store_outage(self, error: str) -> None:
        """The store stopped (or started again) taking writes: say so in the chats, from
        memory (`supervisor.record.store.held_outbox`)."""
        store = self._store
        if error:
            cause = store.outage_cause if isinstance(store, ResilientStore) else ""
            text = (
                f"⚠️ <b>the store cannot be written</b>: {h(cause or unwritable_cause(error))} "
                f"({h(error)}). Alerts go on from memory; records are kept in memory and written "
                "when it returns; repairs wait for it."
            )
        else:
            saved = store.saved if isinstance(store, ResilientStore) else 0
            text = f"✅ <b>the store takes writes again</b>: {saved} records kept in memory written"
        task = asyncio.create_task(
            self._say(OutboxDraft(kind="store", text=text)), name="notify:store"
        )
        self._tasks.append(task)

    async def _say(self, draft: OutboxDraft) -> None:
        await self.outbox.commit(
            drafts=[draft], chat_ids=self._telegram.chat_ids, states={}, at=self._clock.now()
        )
        self.sender.kick()

    async def approve(self, endpoint: str, rule: Rule, plan: list[str]) -> bool | None:
        """The Remediator's Approver: Apply/Skip buttons; None when the bot is not up or
        nobody answered within `notify.confirm_timeout`."""
        if not self.ready.is_set():
            log.warning("telegram: not up; cannot ask", endpoint=endpoint, rule=rule.id)
            return None
        return await self.commands.approve(self.app, endpoint, rule, plan)

    async def stop(self) -> None:
        if self.composer.wake in self._store.on_timeline:
            self._store.on_timeline.remove(self.composer.wake)
        if isinstance(self._store, ResilientStore) and self._store_outage in self._store.on_outage:
            self._store.on_outage.remove(self._store_outage)
        if self._control is not None and self.commands.remember_ack in self._control.on_ack:
            self._control.on_ack.remove(self.commands.remember_ack)
        await self.sender.finish()  # the message in hand first (a deposed leader's: refused)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.commands.stop()
        if self.ready.is_set():
            updater = self.app.updater
            if updater is not None and updater.running:
                # after a failed getUpdates (Telegram unreachable or flooded, or a deposed
                # leader's refused) python-telegram-bot's poller sleeps, up to 30 s, before it
                # looks at its stop: the stop cuts that sleep short
                with suppress(TelegramError, TimeoutError):  # a deposed leader's last getUpdates
                    async with asyncio.timeout(POLLER_STOP_S):
                        await updater.stop()
            if self.app.running:
                await self.app.stop()
        with suppress(TelegramError, RuntimeError):
            await self.app.shutdown()

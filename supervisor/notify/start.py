"""The daemon's way to the Telegram component: the client (python-telegram-bot) is imported only
when Telegram is configured and has a token, so that a daemon without it does not load it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

from supervisor.clock import Clock
from supervisor.config import FleetConfig
from supervisor.hosts import HostWatcher
from supervisor.notify.auth import NotifyError, load_token
from supervisor.notify.timing import Timing
from supervisor.remediation.runner import Remediator
from supervisor.store import Store
from supervisor.worker import EndpointWorker

if TYPE_CHECKING:
    from supervisor.notify.notifier import Notifier

log = structlog.get_logger("supervisor.notify")


def make_notifier(
    config: FleetConfig,
    *,
    store: Store,
    workers: Mapping[str, EndpointWorker],
    hosts: Mapping[str, HostWatcher],
    remediator: Remediator | None,
    clock: Clock,
    timing: Timing | None = None,
) -> Notifier | None:
    """The daemon's notifier, or None (logged) when Telegram is not configured or has no
    token: the daemon keeps supervising without it."""
    telegram = config.notify.telegram
    if telegram is None:
        return None
    try:
        token = load_token(telegram, os.environ)
    except NotifyError as exc:
        log.error("telegram disabled", reason=str(exc))
        return None

    from supervisor.notify.notifier import Notifier  # the Telegram client: only when configured

    async def diagnose(name: str) -> list[str]:
        from supervisor.cli.diagnose import report

        worker = workers.get(name)
        last_ok_at = worker.last_ok_at if worker is not None else None
        return await report(config, config.endpoints[name], dry_run=True, last_ok_at=last_ok_at)

    return Notifier(
        config=config,
        telegram=telegram,
        token=token,
        store=store,
        workers=workers,
        hosts=hosts,
        remediator=remediator,
        clock=clock,
        timing=timing,
        diagnose=diagnose,
    )

"""The daemon's way to the Telegram component: the client (python-telegram-bot) is imported only
when Telegram is configured and has a token, so that a daemon without it does not load it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

from supervisor.config.models import FleetConfig
from supervisor.control import ControlApi
from supervisor.core.clock import Clock
from supervisor.core.tenure import Tenure
from supervisor.hear.reachability import HostWatcher
from supervisor.record.store.store import Store
from supervisor.repair import Remediator
from supervisor.repair.report import report
from supervisor.tell.telegram.auth import NotifyError, load_token
from supervisor.tell.telegram.timing import Timing
from supervisor.worker import EndpointWorker

if TYPE_CHECKING:
    from supervisor.tell.telegram.notifier import Notifier

log = structlog.get_logger("supervisor.notify")


def make_notifier(
    config: FleetConfig,
    *,
    store: Store,
    workers: Mapping[str, EndpointWorker],
    hosts: Mapping[str, HostWatcher],
    remediator: Remediator | None,
    clock: Clock,
    control: ControlApi | None = None,
    timing: Timing | None = None,
    tenure: Tenure | None = None,
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

    from supervisor.tell.telegram.notifier import (
        Notifier,  # the Telegram client: only when configured
    )

    async def diagnose(name: str) -> list[str]:
        """The chat's /diagnose: the daemon's own diagnosis service (its live playbook)."""
        worker = workers.get(name)
        if remediator is None or worker is None:
            return [f"no endpoint {name!r}"]
        lines, _ = await report(
            remediator.diagnosis, worker.endpoint, dry_run=True, last_ok_at=worker.record.last_ok_at
        )
        return lines

    return Notifier(
        config=config,
        telegram=telegram,
        token=token,
        store=store,
        workers=workers,
        hosts=hosts,
        remediator=remediator,
        clock=clock,
        control=control,
        timing=timing,
        diagnose=diagnose,
        tenure=tenure,
    )

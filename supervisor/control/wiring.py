"""How the daemon starts its control API (one call, for the composition root)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from supervisor.config.models import FleetConfig
from supervisor.control._api import ControlApi
from supervisor.core.clock import Clock
from supervisor.record.store.store import Store
from supervisor.repair import Remediator
from supervisor.worker import EndpointWorker


async def start_control(
    *,
    store: Store,
    workers: Mapping[str, EndpointWorker],
    config: Callable[[], FleetConfig],
    remediator: Remediator | None,
    clock: Clock,
) -> ControlApi:
    """The control API over the daemon's live workers, its stored pauses and silences back in
    force, and the repair runner asking it whether automatic action is paused."""
    api = ControlApi(
        store=store, workers=workers, config=config, remediator=remediator, clock=clock
    )
    await api.start()
    if remediator is not None:
        remediator.paused = api.paused
    return api

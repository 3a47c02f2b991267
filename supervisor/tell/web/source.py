"""What the ops side reads the fleet from: the running daemon (`supervisor.runtime.Daemon`,
while this instance leads) or the store's last word (`supervisor.tell.web.stored.StoredFleet`, while
it follows). The views (`ops.view`), the board and the fleet page need only this much of either."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.control.model import JournalRow, PauseRow, SilenceRow
from supervisor.core.clock import Clock
from supervisor.core.streamstatus import StreamStatus
from supervisor.playbook.loader import Playbook
from supervisor.record.store.records import Snapshot
from supervisor.record.store.store import Store


class EndpointSource(Protocol):
    """An endpoint as the page shows it: its config and its current snapshot."""

    @property
    def endpoint(self) -> Endpoint: ...

    def snapshot(self) -> Snapshot: ...


class HostSource(Protocol):
    """A watched host: its reachability state, since when, its incident, why."""

    @property
    def state(self) -> str: ...

    @property
    def since(self) -> datetime | None: ...

    @property
    def incident_id(self) -> int | None: ...

    @property
    def last_reason(self) -> str: ...


class StreamsSource(Protocol):
    def status(self) -> Mapping[str, StreamStatus]:
        """Each host's unit-event stream: streaming, polling (why), ..."""
        ...


class FleetSource(Protocol):
    @property
    def config(self) -> FleetConfig: ...

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def workers(self) -> Mapping[str, EndpointSource]: ...

    @property
    def hosts(self) -> Mapping[str, HostSource]: ...

    @property
    def unit_events(self) -> StreamsSource: ...

    @property
    def playbook(self) -> Callable[[], Playbook]: ...


class ControlReads(Protocol):
    """What the page reads of the control API: the leader's `ControlApi`, or a follower's
    `supervisor.tell.web.follower_control.StoredControl`."""

    async def journal(
        self, subject: str | None = None, *, latest: int | None = None
    ) -> list[JournalRow]: ...

    async def silences(self) -> list[SilenceRow]: ...

    def pauses(self) -> list[PauseRow]: ...

    def paused(self, endpoint: str) -> str: ...

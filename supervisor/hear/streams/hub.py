"""Every host's event stream for a fleet config: one `HostStream` per host that runs units.

`HostEvents(config, deliver).run()` streams them all until cancelled; `status()` and
`cursors()` say how each host's stream is doing and where it is in the host's journal (the
daemon persists the cursors and passes them back as `cursors=` after a restart).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from supervisor.config.models import FleetConfig
from supervisor.core.streamstatus import StreamStatus
from supervisor.hear.streams.protocol import Transport
from supervisor.hear.streams.stream import Deliver, HostStream, StreamSettings
from supervisor.hear.streams.transport import transport_for


def units_by_host(config: FleetConfig) -> dict[str, tuple[str, ...]]:
    """The configured units of each host (systemd hosts only), in config order, no repeats."""
    found: dict[str, list[str]] = {}
    for endpoint in config.endpoints.values():
        for ref in endpoint.units:
            host = config.hosts.get(ref.host)
            if host is None or host.service_manager != "systemd":
                continue
            units = found.setdefault(ref.host, [])
            if ref.unit not in units:
                units.append(ref.unit)
    return {host: tuple(units) for host, units in found.items()}


class HostEvents:
    """The host-event streams of a fleet. `transports` replaces the default transport of a host
    (a follower's warm connections, tests); `settings` applies to every stream."""

    def __init__(
        self,
        config: FleetConfig,
        deliver: Deliver,
        *,
        cursors: Mapping[str, str] | None = None,
        settings: StreamSettings | None = None,
        known_hosts_default: Path | None = None,
        transports: Mapping[str, Transport] | None = None,
    ) -> None:
        self.streams: dict[str, HostStream] = {}
        self._own: list[Transport] = []  #: the transports made here (closed by `run`)
        for name, units in units_by_host(config).items():
            transport = (transports or {}).get(name)
            if transport is None:
                transport = transport_for(config.hosts[name], known_hosts_default)
                self._own.append(transport)
            self.streams[name] = HostStream(
                name,
                units,
                transport,
                deliver,
                cursor=(cursors or {}).get(name),
                settings=settings,
            )

    def status(self) -> dict[str, StreamStatus]:
        """Each host's stream: streaming, reconnecting (attempt N, next in Xs), polling (why)."""
        return {name: stream.status for name, stream in self.streams.items()}

    def cursors(self) -> dict[str, str]:
        """Each host's journal cursor (only hosts that have one)."""
        return {name: s.cursor for name, s in self.streams.items() if s.cursor is not None}

    async def run(self) -> None:
        """Run every host's stream until cancelled; the transports made here are closed on the
        way out (those handed in stay open: their owner, a follower's warm set, keeps them)."""
        try:
            async with asyncio.TaskGroup() as group:
                for name, stream in self.streams.items():
                    group.create_task(stream.run(), name=f"hostevents:{name}")
        finally:
            for transport in self._own:
                with suppress(Exception):
                    await transport.close()

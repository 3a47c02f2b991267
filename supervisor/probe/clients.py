"""The daemon's probe clients: one HTTP client per endpoint (`supervisor.probe.wire`, sharing
one TLS context), made on its first probe and closed when the endpoint leaves the config or the
daemon stops."""

from __future__ import annotations

import ssl

from supervisor.config.supervised import Endpoint
from supervisor.core.clock import Clock
from supervisor.core.events import ProbeResult, Tier
from supervisor.probe import make_client, run_probe
from supervisor.probe.wire import ProbeHttp


class ProbeClients:
    """`probe` is the daemon's prober (see `supervisor.worker.Prober`)."""

    def __init__(self, tls: ssl.SSLContext, clock: Clock) -> None:
        self._tls = tls
        self._clock = clock
        self._clients: dict[str, ProbeHttp] = {}

    async def probe(self, endpoint: Endpoint, tier: Tier) -> ProbeResult:
        client = self._clients.get(endpoint.name)
        if client is None:
            client = self._clients[endpoint.name] = make_client(self._tls)
        return await run_probe(endpoint, tier, client, clock=self._clock)

    async def drop(self, endpoint: str) -> None:
        """Close the client of an endpoint that left the config."""
        client = self._clients.pop(endpoint, None)
        if client is not None:
            await client.aclose()

    async def close(self) -> None:
        for name in list(self._clients):
            await self.drop(name)

"""`probe NAME`: run the endpoint's liveness check and its real check now, print what they found."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from supervisor.cli.common import CliError, load
from supervisor.cli.render import dump
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.probe import run_probe
from supervisor.record.summaries import probe_data, probe_line


def main(args: argparse.Namespace) -> int:
    config = load(args, keys=True)
    if args.name not in config.endpoints:
        known = ", ".join(config.endpoints) or "none"
        raise CliError(f"no endpoint {args.name!r} in {config.source} (endpoints: {known})")
    endpoint = config.endpoints[args.name]
    results = asyncio.run(probe_now(endpoint))
    ok = all(r.ok for r in results)
    if args.json:
        document: dict[str, Any] = {
            "endpoint": endpoint.name,
            "ok": ok,
            "results": [probe_data(r) for r in results],
        }
        print(dump(document))
    else:
        print(f"{endpoint.name} ({endpoint.kind}, {endpoint.url})")
        for result in results:
            print(f"  {probe_line(result)}")
    return 0 if ok else 1


async def probe_now(endpoint: Endpoint) -> list[ProbeResult]:
    """Liveness, then the real check; for `health` kinds the URL is the one check."""
    tiers = [Tier.DEEP] if endpoint.kind == "health" else [Tier.LIVENESS, Tier.DEEP]
    async with HttpClient() as client:
        return [await run_probe(endpoint, t, client, clock=SystemClock()) for t in tiers]

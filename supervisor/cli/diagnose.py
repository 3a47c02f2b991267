"""`diagnose NAME [--dry-run] [--state STATE]`: gather evidence now, say which rule matched and
why, and the plan. Nothing is changed: with `--dry-run` the plan's commands are computed by
running the rule's steps against a recording executor (reads run for real, writes are listed)."""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime

from supervisor.cli.common import CliError, load, open_store
from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.core import logs
from supervisor.core.clock import SystemClock
from supervisor.core.events import ProbeResult, Tier
from supervisor.core.httpclient import HttpClient
from supervisor.execute.fleet import FleetExecutor
from supervisor.playbook.actions.registry import ACTIONS
from supervisor.playbook.loader import load_playbook
from supervisor.probe import run_probe
from supervisor.record.store.errors import StoreError
from supervisor.record.store.records import SubjectKind
from supervisor.repair.diagnosis import DiagnosisService
from supervisor.repair.report import report

STATES = ("down", "degraded", "unreachable")


def main(args: argparse.Namespace) -> int:
    config = load(args)
    if args.name not in config.endpoints:
        known = ", ".join(config.endpoints) or "none"
        raise CliError(f"no endpoint {args.name!r} in {config.source} (endpoints: {known})")
    logs.silence()
    lines, matched = asyncio.run(_run(config, config.endpoints[args.name], args))
    print("\n".join(lines))
    return 0 if matched else 1


async def _run(
    config: FleetConfig, endpoint: Endpoint, args: argparse.Namespace
) -> tuple[list[str], bool]:
    last_ok_at = await stored_last_ok(config, endpoint.name)
    playbook = load_playbook(config.playbook.path)
    executor = FleetExecutor(config)
    clock = SystemClock()
    async with HttpClient() as http:

        async def prober(target: Endpoint, tier: Tier) -> ProbeResult:
            return await run_probe(target, tier, http, clock=clock)

        service = DiagnosisService(
            config=config,
            playbook=lambda: playbook,
            executor=executor,
            http=http,
            clock=clock,
            actions=ACTIONS,
            prober=prober,
        )
        try:
            return await report(
                service, endpoint, state=args.state, dry_run=args.dry_run, last_ok_at=last_ok_at
            )
        finally:
            await executor.close()


async def stored_last_ok(config: FleetConfig, name: str) -> datetime | None:
    """When the store last saw `name` pass a check (the journal is read from then), if known."""
    if not config.store.path.exists():
        return None
    try:
        store = await open_store(config)
    except StoreError:
        return None
    try:
        snapshot = await store.snapshot(SubjectKind.ENDPOINT, name)
    except StoreError:
        return None
    finally:
        await store.close()
    return snapshot.last_ok_at if snapshot is not None else None

"""`report [--since 7d] [--json]`: what an observe-only period saw and would have done (see
`supervisor.trust.report`)."""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta
from typing import Any

from supervisor.cli.common import load, open_store
from supervisor.cli.render import dump
from supervisor.config.models import FleetConfig
from supervisor.core.clock import utcnow
from supervisor.core.durations import DurationError, format_duration, parse_duration
from supervisor.trust.report import Report, build_report, render_report

NAME = "report"
DEFAULT_SINCE = timedelta(days=7)


def _age(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        NAME,
        help="what an observe-only period (run --dry-run) saw, would have done and could not",
    )
    p.add_argument("--since", type=_age, default=DEFAULT_SINCE, metavar="AGE", help="default: 7d")
    p.add_argument("--json", action="store_true")


def main(args: argparse.Namespace) -> int:
    config = load(args)
    report = asyncio.run(_report(config, args.since))
    window = format_duration(args.since)
    print(dump(report.document()) if args.json else render_report(report, window=window))
    return 0


async def _report(config: FleetConfig, since: timedelta) -> Report:
    from supervisor.trust.load import in_force  # (loads asyncssh: not for `run`)
    from supervisor.trust.sudoers import sudo_user

    needs = in_force(config).needs
    roots = frozenset(name for name, host in config.hosts.items() if sudo_user(host) == "root")
    store = await open_store(config)
    try:
        now = utcnow()
        return await build_report(store, since=now - since, until=now, needs=needs, roots=roots)
    finally:
        await store.close()

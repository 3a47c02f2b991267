"""`run`: the daemon in the foreground until SIGTERM, SIGINT or Ctrl-C; SIGHUP reloads."""

from __future__ import annotations

import argparse
import asyncio
import signal

from supervisor.app.leader.gate import LeaderGate
from supervisor.app.root import Supervisor
from supervisor.cli.common import load
from supervisor.core import logs


def main(args: argparse.Namespace) -> int:
    config = load(args)
    fmt = args.log_format
    logs.configure(json=None if fmt == "auto" else fmt == "json")
    gate = LeaderGate(config, lambda: Supervisor(config, dry_run=args.dry_run))
    asyncio.run(_run(gate))
    return 0


async def _run(gate: LeaderGate) -> None:
    """Follow until this instance leads, then run the supervisor (see `supervisor.app.leader`)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, gate.request_reload)
    await gate.run(stop)

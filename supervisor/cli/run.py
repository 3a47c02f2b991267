"""`run`: the daemon in the foreground until SIGTERM, SIGINT or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import signal

from supervisor import logs
from supervisor.cli.common import load
from supervisor.daemon import Daemon
from supervisor.ops.reload import ConfigReloader


def main(args: argparse.Namespace) -> int:
    config = load(args)
    fmt = args.log_format
    logs.configure(json=None if fmt == "auto" else fmt == "json")
    asyncio.run(_run(Daemon(config, dry_run=args.dry_run)))
    return 0


async def _run(daemon: Daemon) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reloader = ConfigReloader(daemon)  # ops hook (issue 6): the config file too

    def reload() -> None:
        daemon.reload()  # the playbook
        reloader.request()  # the config (a bad one is refused, the running one stays)

    loop.add_signal_handler(signal.SIGHUP, reload)
    await daemon.run_until(stop)

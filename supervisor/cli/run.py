"""`run`: the daemon in the foreground until SIGTERM, SIGINT or Ctrl-C; SIGHUP reloads."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time

import structlog

from supervisor.app.leader.gate import LeaderGate
from supervisor.app.root import Supervisor
from supervisor.cli.common import load
from supervisor.core import logs
from supervisor.core.aio import waits_at

log = structlog.get_logger("supervisor")

LEFTOVERS_WITHIN_S = 5.0
"""How long tasks still running once the daemon has stopped (there should be none) may take to
end after they are cancelled, before the process exits without them."""

STOP_SLOW_S = 10.0
"""A stop still under way this long after its signal says where each task waits, one warning
per task: a stop that hangs names what holds it long before systemd's stop timeout kills it."""


def main(args: argparse.Namespace) -> int:
    config = load(args, keys=True)
    fmt = args.log_format
    logs.configure(json=None if fmt == "auto" else fmt == "json")
    gate = LeaderGate(config, lambda: Supervisor(config, dry_run=args.dry_run))
    asyncio.run(_run(gate))
    return 0


async def _run(gate: LeaderGate) -> None:
    """Follow until this instance leads, then run the supervisor (see `supervisor.app.leader`)."""
    stop = asyncio.Event()
    asked: list[float] = []  #: when the first stop signal came

    loop = asyncio.get_running_loop()

    def stopping() -> None:
        if not asked:
            asked.append(time.monotonic())
            loop.call_later(STOP_SLOW_S, _say_where_stop_waits)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping)
    loop.add_signal_handler(signal.SIGHUP, gate.request_reload)
    await gate.run(stop)
    if asked:
        log.info("exiting", stop_s=round(time.monotonic() - asked[0], 2))
    await _end_leftovers()


def _say_where_stop_waits() -> None:
    for task in asyncio.all_tasks():
        if not task.done():
            where = waits_at(task)
            log.warning("stop slow: a task still waits", task=task.get_name(), where=where)


async def _end_leftovers() -> None:
    """The daemon has stopped: a task still running (none should) is cancelled and given
    `LEFTOVERS_WITHIN_S`; one that does not end is named with where it waits, in one warning,
    and the process exits without it (asyncio.run would wait for it for ever: a stop that never
    ends, seen once in a loaded test run, until systemd's stop timeout kills the service)."""
    me = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not me and not task.done()]
    for task in left:
        task.cancel()
    if not left:
        return
    _, stuck = await asyncio.wait(left, timeout=LEFTOVERS_WITHIN_S)
    if not stuck:
        return
    for task in stuck:
        log.warning("a task did not end at stop", task=task.get_name(), where=waits_at(task))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

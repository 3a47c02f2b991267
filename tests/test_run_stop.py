"""A stop that cannot end is not a stop that never ends: once the daemon has stopped, a task still
running is cancelled, given `LEFTOVERS_WITHIN_S`, then named (with where it waits) in one warning
and left behind as the process exits (`supervisor.cli.run`). A real process, as `run` ends."""

from __future__ import annotations

import json
import subprocess
import sys

#: a task that swallows its cancellation and waits on; then what `run` does once stopped
STUCK = """
import asyncio
from supervisor.cli import run
from supervisor.core import logs

async def stubborn() -> None:
    while True:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass  # ignores the stop

async def polite() -> None:
    await asyncio.Event().wait()

async def main() -> None:
    kept = [  # held: the loop keeps only weak references, and a collected task is no leftover
        asyncio.create_task(stubborn(), name="stubborn"),
        asyncio.create_task(polite(), name="polite"),
    ]
    await asyncio.sleep(0)
    await run._end_leftovers()
    print("not reached")

logs.configure(json=True)
run.LEFTOVERS_WITHIN_S = 0.2
asyncio.run(main())
"""

#: nothing left over: `_end_leftovers` returns and the process ends as usual
CLEAN = STUCK.replace('asyncio.create_task(stubborn(), name="stubborn"),', "")


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_task_that_does_not_end_at_stop_is_named_and_the_process_exits() -> None:
    done = _run(STUCK)
    assert (done.returncode, done.stdout) == (0, "")
    said = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["event"], e["level"], e["task"]) for e in said] == [
        ("a task did not end at stop", "warning", "stubborn")
    ]
    assert " stubborn" in said[0]["where"].split(" < ")[0]


def test_a_stop_with_nothing_left_over_ends_as_usual() -> None:
    done = _run(CLEAN)
    assert (done.returncode, done.stdout, done.stderr) == (0, "not reached\n", "")

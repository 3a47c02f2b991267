"""A stop that cannot end is not a stop that never ends: once the daemon has stopped, a task still
running is cancelled, given `LEFTOVERS_WITHIN_S`, then named (with where it waits) in one warning
and left behind as the process exits (`supervisor.cli.run`). And a stop that takes long says,
`STOP_SLOW_S` after its signal, where each task waits. A real process, as `run` ends."""

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
    assert said[0]["where"].split(" < ")[-1].endswith(" stubborn")  # the task's own coroutine
    assert said[0]["where"].split(" < ")[0].endswith(" wait")  # where it waits: the Event's


#: a daemon whose stop waits on what never answers (the store, say) until the slow stop is said
SLOW = """
import asyncio, os, signal
from supervisor.cli import run
from supervisor.core import logs

said = asyncio.Event()
told = run._say_where_stop_waits

def telling() -> None:
    told()
    said.set()

async def held_by_the_store() -> None:
    await said.wait()

class Gate:
    async def run(self, stop: asyncio.Event) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        await stop.wait()
        await held_by_the_store()

    def request_reload(self) -> None:
        pass

logs.configure(json=True)
run.STOP_SLOW_S = 0.01
run._say_where_stop_waits = telling
asyncio.run(run._run(Gate()))
"""


def test_a_stop_with_nothing_left_over_ends_as_usual() -> None:
    done = _run(CLEAN)
    assert (done.returncode, done.stdout, done.stderr) == (0, "not reached\n", "")


def test_a_stop_that_takes_long_says_where_each_task_waits() -> None:
    done = _run(SLOW)
    assert (done.returncode, done.stdout) == (0, "")
    said = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["event"], e["level"]) for e in said] == [
        ("stop slow: a task still waits", "warning"),
        ("exiting", "info"),
    ]
    where = said[0]["where"].split(" < ")
    assert [w.rsplit(" ", 1)[1] for w in where[:2]] == ["wait", "held_by_the_store"]
    assert [w.rsplit(" ", 1)[1] for w in where[-3:]] == ["held_by_the_store", "run", "_run"]

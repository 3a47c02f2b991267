"""One repair task per endpoint: started, awaited, stopped; a failure is recorded and never
fatal. The tasks are the `Remediator`'s; what they run is its automatic repairs' (`_automatic`)
or a person's restart (`_remediator`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from supervisor.record.store.lease import StaleEpochError
from supervisor.record.timeline.control import Note
from supervisor.worker import EndpointWorker, WorkerStopped

log = structlog.get_logger("supervisor.remediation")


class RepairTasks:
    """The endpoints' repair tasks; `on_failure` records a task that failed."""

    def __init__(self, *, on_failure: Callable[[EndpointWorker, Note], Awaitable[None]]) -> None:
        self._on_failure = on_failure
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.stopped = False

    def start(self, worker: EndpointWorker, job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run `job` as `worker`'s repair task (the caller checked none runs)."""
        task = asyncio.create_task(self._guarded(worker, job))
        self._tasks[worker.name] = task
        return task

    def running(self, endpoint: str) -> bool:
        """Whether a repair task (a person's restart included) runs for `endpoint` now."""
        task = self._tasks.get(endpoint)
        return task is not None and not task.done()

    def started(self, endpoint: str) -> bool:
        """Whether a repair task was ever started for `endpoint` (tests wait on it)."""
        return endpoint in self._tasks

    async def wait(self) -> None:
        """Until every repair task has finished (tests, shutdown)."""
        while pending := [t for t in self._tasks.values() if not t.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    async def stop(self) -> None:
        self.stopped = True
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _guarded(self, worker: EndpointWorker, job: Coroutine[Any, Any, None]) -> None:
        try:
            await job
        except asyncio.CancelledError:
            raise
        except WorkerStopped:
            log.info("repair ended: the endpoint's worker stopped", endpoint=worker.name)
        except StaleEpochError as err:  # deposed: the new leader decides afresh
            log.warning("deposed", stops=f"the repair of {worker.name}", refused=str(err))
        except Exception as exc:  # a broken repair is recorded, never fatal
            log.exception("repair runner failed", endpoint=worker.name)
            await self._on_failure(worker, Note(text=f"repair runner failed: {exc!r}"))

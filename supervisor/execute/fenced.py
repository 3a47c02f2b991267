"""An executor that asks the leadership fence before every command: a deposed leader (its
epoch no longer the lease's) runs nothing; the refusal is recorded by the store and the command
comes back refused, like any other command that could not run."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from supervisor.config.supervised import Host
from supervisor.execute.base import CommandResult, Executor, Failure, command_line
from supervisor.record.store.errors import StoreError
from supervisor.record.store.lease import StaleEpochError
from supervisor.record.store.resilient import ResilientStore
from supervisor.record.store.store import Store


class FencedExecutor:
    def __init__(self, inner: Executor, store: Store) -> None:
        self.inner = inner
        self.store = store

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        timeout: timedelta,
        sudo: bool = False,
        mutating: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        line = command_line(argv, sudo=sudo)
        store = self.store
        if mutating and isinstance(store, ResilientStore) and store.outage:
            # repairs wait for the store: what they do could not be recorded
            return _not_run(host, line, f"repairs wait for the store: {store.problem()}")
        try:
            await store.check_fence(f"command {line} on {host.name}")
        except StaleEpochError as err:
            return _not_run(host, line, str(err))
        except StoreError as err:  # no fence, no repair
            return _not_run(host, line, f"the lease cannot be checked: {err}")
        return await self.inner.run(
            host, argv, timeout=timeout, sudo=sudo, mutating=mutating, stdin=stdin
        )

    async def close(self) -> None:
        await self.inner.close()


def _not_run(host: Host, line: str, why: str) -> CommandResult:
    return CommandResult(
        host=host.name,
        command=line,
        exit_status=None,
        stdout="",
        stderr="",
        duration_s=0.0,
        error=f"not run: {why}",
        failure=Failure.NOT_RUN,
    )

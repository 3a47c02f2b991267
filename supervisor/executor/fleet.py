"""One executor for the whole fleet: `local: true` hosts run commands here, the others over SSH."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

from supervisor.config import FleetConfig, Host
from supervisor.executor.base import CommandResult, Executor
from supervisor.executor.local import LocalExecutor
from supervisor.executor.ssh import SshExecutor


class UnknownHostError(KeyError):
    """`FleetExecutor.host` was asked for a name the fleet does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


class FleetExecutor:
    """Routes each command by `host.local`: to `local` (default `LocalExecutor()`) or to `ssh`
    (default `SshExecutor()`). `config` gives the fleet's hosts, for `host(name)`."""

    def __init__(
        self,
        config: FleetConfig | Mapping[str, Host],
        ssh: Executor | None = None,
        local: Executor | None = None,
    ) -> None:
        self.hosts: Mapping[str, Host] = (
            config.hosts if isinstance(config, FleetConfig) else dict(config)
        )
        self.ssh: Executor = ssh if ssh is not None else SshExecutor()
        self.local: Executor = local if local is not None else LocalExecutor()

    def host(self, name: str) -> Host:
        """The fleet's host called `name`; `UnknownHostError` naming the known hosts otherwise."""
        try:
            return self.hosts[name]
        except KeyError:
            known = ", ".join(sorted(self.hosts)) or "none"
            raise UnknownHostError(f"unknown host {name!r} (hosts: {known})") from None

    def for_host(self, host: Host) -> Executor:
        return self.local if host.local else self.ssh

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
        return await self.for_host(host).run(
            host, argv, timeout=timeout, sudo=sudo, mutating=mutating, stdin=stdin
        )

    async def close(self) -> None:
        await self.ssh.close()
        await self.local.close()

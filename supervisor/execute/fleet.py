"""One executor for the whole fleet: `local: true` hosts run commands here, the others over SSH."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Host
from supervisor.execute.base import CommandResult, Executor
from supervisor.execute.local import LocalExecutor


class UnknownHostError(KeyError):
    """`FleetExecutor.host` was asked for a name the fleet does not have."""

    def __str__(self) -> str:
        return str(self.args[0])


class FleetExecutor:
    """Routes each command by `host.local`: to `local` (default `LocalExecutor()`) or to `ssh`
    (default `SshExecutor()`, made on first use: a fleet of local hosts never loads asyncssh).
    `config` gives the fleet's hosts, for `host(name)`."""

    def __init__(
        self,
        config: FleetConfig | Mapping[str, Host],
        ssh: Executor | None = None,
        local: Executor | None = None,
    ) -> None:
        self.hosts: Mapping[str, Host] = (
            config.hosts if isinstance(config, FleetConfig) else dict(config)
        )
        self._ssh: Executor | None = ssh
        self.local: Executor = local if local is not None else LocalExecutor()

    def host(self, name: str) -> Host:
        """The fleet's host called `name`; `UnknownHostError` naming the known hosts otherwise."""
        try:
            return self.hosts[name]
        except KeyError:
            known = ", ".join(sorted(self.hosts)) or "none"
            raise UnknownHostError(f"unknown host {name!r} (hosts: {known})") from None

    @property
    def ssh(self) -> Executor:
        if self._ssh is None:
            from supervisor.execute.ssh import SshExecutor

            self._ssh = SshExecutor()
        return self._ssh

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
        if self._ssh is not None:
            await self._ssh.close()
        await self.local.close()

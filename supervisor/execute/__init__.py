"""Running commands on the fleet's hosts: over SSH, or locally for `local: true` hosts.
`SshExecutor` (asyncssh) is loaded on first use only."""

from typing import TYPE_CHECKING

from supervisor.execute.base import CommandResult, Executor, command_line
from supervisor.execute.dryrun import DryRunExecutor
from supervisor.execute.fleet import FleetExecutor, UnknownHostError
from supervisor.execute.local import LocalExecutor

if TYPE_CHECKING:
    from supervisor.execute.ssh import SshExecutor

__all__ = [
    "CommandResult",
    "DryRunExecutor",
    "Executor",
    "FleetExecutor",
    "LocalExecutor",
    "SshExecutor",
    "UnknownHostError",
    "command_line",
]


def __getattr__(name: str) -> object:
    if name == "SshExecutor":
        from supervisor.execute.ssh import SshExecutor

        return SshExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

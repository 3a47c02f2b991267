"""Running commands on the fleet's hosts: over SSH, or locally for `local: true` hosts."""

from supervisor.executor.base import CommandResult, Executor, command_line
from supervisor.executor.dryrun import DryRunExecutor
from supervisor.executor.fleet import FleetExecutor, UnknownHostError
from supervisor.executor.local import LocalExecutor
from supervisor.executor.ssh import SshExecutor

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

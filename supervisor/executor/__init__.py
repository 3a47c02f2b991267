"""Running commands on the fleet's hosts: over SSH, or locally for `local: true` hosts."""

from supervisor.executor.base import CommandResult, Executor, command_line

__all__ = ["CommandResult", "Executor", "command_line"]

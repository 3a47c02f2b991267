"""What every doctor check reads: the config, what the rules need as root, an executor over
the fleet (one SSH connection per host, reused), an HTTP client, and each host's login, learnt
once before the checks run (a host that cannot be reached is reported once, by `ssh`)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint, Host
from supervisor.core.clock import Clock
from supervisor.core.httpclient import HttpClient
from supervisor.execute.base import CommandResult, Executor
from supervisor.playbook.model import Rule
from supervisor.trust.needs import Needs

COMMAND_TIMEOUT = timedelta(seconds=5)


@dataclass(frozen=True, kw_only=True)
class Login:
    """How logging in to a host went: `error` is the executor's own text when it failed."""

    host: Host
    error: str = ""
    system: str = ""  #: `uname -sr`

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def root(self) -> bool:
        """Commands there run as root without sudo (a root login)."""
        return self.host.user == "root"


@dataclass(kw_only=True)
class DoctorContext:
    config: FleetConfig
    needs: Needs
    rules: tuple[Rule, ...]
    executor: Executor
    http: HttpClient
    clock: Clock
    logins: Mapping[str, Login] = field(default_factory=dict)
    #: why an endpoint's API key could not be read (by endpoint name)
    key_problems: Mapping[str, str] = field(default_factory=dict)
    #: `sudo -n -l -- COMMAND` per host, asked once for all its commands: example -> allowed
    permitted: dict[str, dict[tuple[str, ...], bool]] = field(default_factory=dict)

    async def run(self, host: Host, argv: Sequence[str], *, sudo: bool = False) -> CommandResult:
        """A read-only command on `host` (never `mutating`)."""
        return await self.executor.run(host, argv, timeout=COMMAND_TIMEOUT, sudo=sudo)

    def host(self, name: str) -> Host | None:
        return self.config.hosts.get(name)

    def reached(self, name: str) -> Login | None:
        """The host's login when it succeeded (None: unknown host or no login)."""
        login = self.logins.get(name)
        return login if login is not None and login.ok else None

    def endpoints(self) -> Mapping[str, Endpoint]:
        return self.config.endpoints


def sudo_list_script(commands: Sequence[Sequence[str]]) -> str:
    """One shell script asking sudo about each command without running it: a line `0` (may
    run it) or `1` per command, in order."""
    lines = [
        f"if sudo -n -l -- {shlex.join(argv)} >/dev/null 2>&1; then echo 0; else echo 1; fi"
        for argv in commands
    ]
    return "\n".join(lines) or "true"

"""Kill the processes a rule names, and only those (e.g. old `VLLM::Worker` listeners on 29501).

Processes are listed with `ps -ww -eo pid=,user=,args=` (the `processes` collector's own
listing and parser) and filtered here in Python: the rule's pattern never reaches a shell. A
process is identified by its pid *and* command line, so a pid reused by something else while
we wait is never signalled.
"""

from __future__ import annotations

import asyncio
import os
import re
from datetime import timedelta
from typing import Literal

from pydantic import Field, field_validator

from supervisor.config.fields import Duration, Port
from supervisor.config.supervised import Host, UnitRef
from supervisor.core.durations import format_duration
from supervisor.execute.base import CommandResult
from supervisor.execute.helpers import signal_argv, signal_shape
from supervisor.execute.shape import fixed
from supervisor.playbook.actions.base import (
    ActionContext,
    ActionOutcome,
    ActionParams,
    ActionScope,
    Privileged,
    Target,
)
from supervisor.playbook.actions.declare import action
from supervisor.playbook.actions.steps import Steps, host_of, shorten
from supervisor.playbook.evidence.processes import PS_ARGV, Process, parse_ps, same_user

PS = PS_ARGV  #: the same listing the `processes` collector reads
POLL_S = 0.2  #: how often survivors are looked for while waiting
SS_OWNER = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),')


def label(proc: Process) -> str:
    return f"{proc.pid} ({shorten(proc.args)})"


def parse_ss_owners(text: str) -> tuple[list[tuple[int, str]], bool]:
    """`ss -Hltnp` lines -> ([(pid, process name)], every listener had an owner)."""
    owners: list[tuple[int, str]] = []
    named = True
    for line in text.splitlines():
        if not line.strip():
            continue
        pairs = SS_OWNER.findall(line)
        named = named and bool(pairs)
        for name, pid in pairs:
            if (int(pid), name) not in owners:
                owners.append((int(pid), name))
    return owners, named


class KillParams(ActionParams):
    pattern: str = Field(
        min_length=1, description="Python regex matched against each process's command line"
    )
    signal: Literal["KILL", "TERM"] = Field(default="KILL", description="KILL, or TERM then KILL")
    user: str | None = Field(default=None, min_length=1, description="only this user's processes")
    grace: Duration = Field(
        default=timedelta(seconds=30), description="after TERM, how long before KILL"
    )
    only_listening_on: Port | None = Field(
        default=None, description="only the processes listening on this TCP port"
    )

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            regex = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        if regex.search(""):
            raise ValueError(f"{value!r} matches any command line: name the processes")
        return value


class _Kill:
    """One run of kill_processes on one host."""

    def __init__(self, ctx: ActionContext, params: KillParams, host: Host) -> None:
        self.steps = Steps(ctx)
        self.params = params
        self.host = host
        self.regex = re.compile(params.pattern)
        self.protected = {1} | ({os.getpid()} if host.local else set())

    def ours(self, proc: Process) -> bool:
        user = self.params.user
        return bool(self.regex.search(proc.args)) and (user is None or same_user(proc.user, user))

    async def look(self) -> tuple[CommandResult, list[Process]]:
        """Every process on the host (the listing is not kept yet; a failure stops the action)."""
        result = await self.steps.run(self.host, PS, keep=False)
        if not result.ok:
            self.steps.results.append(result)
            raise self.steps.failed(self.host, PS, result)
        return result, parse_ps(result.stdout)

    async def processes(self) -> list[Process]:
        result, procs = await self.look()
        self.steps.results.append(result)
        return procs

    async def targets(self) -> list[Process]:
        procs = await self.processes()
        chosen = [p for p in procs if self.ours(p) and p.pid not in self.protected]
        port = self.params.only_listening_on
        if port is None:
            return chosen
        argv = ["ss", "-Hltnp", "sport", "=", f":{port}"]
        owners, named = parse_ss_owners((await self.steps.must(self.host, argv, sudo=True)).stdout)
        if not named:
            raise self.steps.refuse(
                f"port {port} on {self.host.name} has a listener ss cannot name the owner of: "
                "not killing anything"
            )
        by_pid = {p.pid: p for p in procs}
        for pid, name in owners:
            proc = by_pid.get(pid)
            held = f"port {port} is held by pid {pid} ({shorten(proc.args if proc else name)})"
            if pid in self.protected:
                raise self.steps.refuse(f"{held}, which is never killed: not killing it")
            if proc is None or not self.regex.search(proc.args):
                raise self.steps.refuse(
                    f"{held} which does not match {self.params.pattern}: not killing it"
                )
            if self.params.user is not None and not same_user(proc.user, self.params.user):
                raise self.steps.refuse(
                    f"{held} of user {proc.user}, not {self.params.user}: not killing it"
                )
        listening = {pid for pid, _ in owners}
        return [p for p in chosen if p.pid in listening]

    async def signal(self, signal: str, procs: list[Process]) -> None:
        """Through the root-owned helper, which checks each pid is one of this host's units'
        (their cgroup, their container) or a vLLM engine/worker of their user; a login that is
        root already (or this box's daemon running as root) signals with `kill` itself."""
        units = host_units(self.steps.ctx, self.host)
        for proc in procs:
            if runs_as_root(self.host):
                argv = ["kill", "-s", signal, "--", str(proc.pid)]
            else:
                argv = signal_argv(signal, proc.pid, units)
            result = await self.steps.run(self.host, argv, sudo=True, mutating=True)
            if not result.ok and proc in await self.processes():  # not just gone meanwhile
                raise self.steps.failed(self.host, argv, result)

    async def survivors(self, procs: list[Process], within: float) -> list[Process]:
        """Those of `procs` (same pid, same command line) still running after up to `within`
        seconds. Of the polls, only the last (the one that decided) is kept in the outcome."""
        clock = self.steps.ctx.clock
        deadline = clock.monotonic() + within
        while True:
            last = clock.monotonic() >= deadline
            result, running = await self.look()
            alive = [p for p in procs if p in set(running)]
            if not alive or last:
                self.steps.results.append(result)
                return alive
            await asyncio.sleep(min(POLL_S, max(0.0, deadline - clock.monotonic())))


def runs_as_root(host: Host) -> bool:
    """Whether commands on `host` run as root without sudo: a root login, or this box when the
    daemon itself runs as root. The helper guards a service account; root needs no guard."""
    return host.user == "root" or (host.local and os.geteuid() == 0)


def host_units(scope: ActionContext | ActionScope, host: Host) -> tuple[UnitRef, ...]:
    """The endpoint's units on `host`, in restart order (the helper's scope there)."""
    return tuple(unit for unit_host, unit in scope.units if unit_host.name == host.name)


def _kill_privileged(scope: ActionScope, params: KillParams) -> tuple[Privileged, ...]:
    host = host_of(scope)
    units = host_units(scope, host)
    found: list[Privileged] = [(host, signal_shape(units))] if units else []
    if params.only_listening_on is not None:
        port = f":{params.only_listening_on}"
        found.append((host, fixed("ss", "-Hltnp", "sport", "=", port)))
    return tuple(found)


@action(
    "kill_processes",
    params=KillParams,
    target=Target.HOST,
    targets=frozenset({Target.HOST, Target.HOSTS}),
    doc="kill the processes whose command line matches the pattern (never pid 1 or ours), "
    "through the root-owned signal helper (only this host's units' processes or vLLM's)",
    privileged=_kill_privileged,
)
async def kill_processes(ctx: ActionContext, params: KillParams) -> ActionOutcome:
    run = _Kill(ctx, params, host_of(ctx))
    steps, host = run.steps, run.host
    targets = await run.targets()
    if not targets:
        if params.only_listening_on is not None:
            port = params.only_listening_on
            return steps.done(f"nothing listens on port {port} on {host.name}: nothing to kill")
        return steps.done(f"no process on {host.name} matches {params.pattern}: nothing to kill")
    listed = ", ".join(label(p) for p in targets)
    await run.signal(params.signal, targets)
    grace = format_duration(params.grace)
    if ctx.dry_run:
        then = f", then KILL those still running after {grace}" if params.signal == "TERM" else ""
        return steps.done(f"would send {params.signal} on {host.name} to {listed}{then}")
    note = ""
    if params.signal == "TERM":
        stubborn = await run.survivors(targets, params.grace.total_seconds())
        if stubborn:
            await run.signal("KILL", stubborn)
            note = f"; {len(stubborn)} still ran after {grace} and got KILL"
    left = await run.survivors(targets, ctx.timeout.total_seconds())
    if left:
        names = ", ".join(label(p) for p in left)
        raise steps.stop(f"still running on {host.name} after KILL: {names}")
    return steps.done(f"sent {params.signal} on {host.name} to {listed}{note}")

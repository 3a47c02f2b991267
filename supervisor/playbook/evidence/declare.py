"""How a collector is declared (`@collector`) and the few helpers every collector shares.

A collector module writes::

    @collector("meminfo", params=MeminfoParams, doc="...", facts={"mem_free_gib": "..."})
    async def meminfo(ctx: CollectContext, params: MeminfoParams) -> Evidence:
        result = await run_read(ctx, ["cat", params.path])
        if not result.ok:
            return failed(failure("cat", result), result)
        return found(parse_meminfo(result.stdout), result)

The decorator turns the function into a `Collector` (so the module-level name *is* the
collector), answers "no unit / no host in this scope" before the function runs, and stamps the
collector's name on what it returns. `supervisor.playbook.evidence.registry` gathers the collectors
of its modules into `COLLECTORS`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from supervisor.config.supervised import Host, UnitRef
from supervisor.execute.base import CommandResult
from supervisor.execute.containers import CONTAINER_SUDO, ContainerNameError, in_container
from supervisor.execute.shape import Shape, Word
from supervisor.playbook.evidence.base import (
    CollectContext,
    CollectedEvidence,
    Collector,
    CollectorParams,
    FactValue,
    P,
    Scope,
)

NO_UNIT = "no unit in this scope"
NO_HOST = "no host in this scope"
NO_CONTAINER = "no container in this scope"

_NAME = re.compile(r"[a-z][a-z0-9_]*")

RunFunction = Callable[[CollectContext, P], Awaitable[CollectedEvidence]]
NeedsFunction = Callable[[Scope, P], tuple[Shape, ...]]


class ScopeError(Exception):
    """The scope lacks what the collector needs (a unit, a host, a container): its message is
    the evidence's error. Raised by the helpers below, caught by `@collector`."""


def collector(
    name: str,
    *,
    params: type[P],
    doc: str,
    facts: Mapping[str, str],
    needs_host: bool = True,
    needs_unit: bool = False,
    service_manager: str | None = None,
    privileged: NeedsFunction[P] | None = None,
) -> Callable[[RunFunction[P]], Collector[P]]:
    """Declare a collector. `needs_unit` (for `systemctl`/`journalctl` collectors) answers
    `no unit in this scope` without running anything; `needs_host` likewise for the host;
    `service_manager` (`systemd`, `launchd`) likewise for a host managed otherwise (its commands
    are another OS's: no `journalctl` on a Mac, no `launchctl` on a Spark); params with
    `in_container: true` likewise for a unit without a container. The collector's `applies`
    answers the same before anything runs (a diagnosis then neither runs nor records it).
    `privileged` lists the commands it runs as root in one scope (none when not given)."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"collector name must match {_NAME.pattern}, got {name!r}")
    if not doc.strip() or "\n" in doc:
        raise ValueError(f"collector {name}: doc must be one non-empty line")
    if not facts:
        raise ValueError(f"collector {name}: declares no facts")

    def applies(scope: Scope, params: CollectorParams) -> str:
        if needs_unit and scope.unit is None:
            return NO_UNIT
        if needs_host and scope.host is None:
            return NO_HOST
        host = scope.host
        if service_manager and host is not None and host.service_manager != service_manager:
            return f"{host.name} is not a {service_manager} host ({host.service_manager})"
        if getattr(params, "in_container", False) is True and (
            scope.unit is None or scope.unit.container is None
        ):
            return NO_CONTAINER
        return ""

    def declare(function: RunFunction[P]) -> Collector[P]:
        async def run(ctx: CollectContext, parsed: P) -> CollectedEvidence:
            why = applies(ctx.scope, parsed)
            if why:
                return CollectedEvidence(collector=name, error=why)
            try:
                evidence = await function(ctx, parsed)
            except ScopeError as exc:
                return CollectedEvidence(collector=name, error=str(exc))
            return replace(evidence, collector=name)

        def needs(scope: Scope, parsed: P) -> tuple[Shape, ...]:
            host = scope.host
            if privileged is None or host is None or (needs_unit and scope.unit is None):
                return ()
            if service_manager and host.service_manager != service_manager:
                return ()
            try:
                return privileged(scope, parsed)
            except ScopeError:
                return ()

        return Collector(
            name=name,
            params=params,
            run=run,
            doc=doc,
            facts=MappingProxyType(dict(facts)),
            needs_host=needs_host,
            applies=applies,
            privileged=needs,
        )

    return declare


def found(facts: Mapping[str, FactValue], *commands: CommandResult) -> CollectedEvidence:
    """Evidence with facts (`@collector` fills in the collector's name)."""
    return CollectedEvidence(collector="", facts=MappingProxyType(dict(facts)), commands=commands)


def failed(error: str, *commands: CommandResult) -> CollectedEvidence:
    """Evidence without facts, and why."""
    return CollectedEvidence(collector="", error=error, commands=commands)


def first_line(text: str) -> str:
    """The first non-blank line, stripped ('' for blank text)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def failure(what: str, result: CommandResult) -> str:
    """`systemctl show failed: exit 1: Failed to connect to bus`, `ss failed: timed out after
    10s`: what could not run, the executor's error or the exit status, the first stderr line."""
    if result.error:
        return f"{what} failed: {result.error}"
    reason = f"exit {result.exit_status}"
    detail = first_line(result.stderr)
    return f"{what} failed: {reason}: {detail}" if detail else f"{what} failed: {reason}"


def scope_host(ctx: CollectContext) -> Host:
    if ctx.scope.host is None:
        raise ScopeError(NO_HOST)
    return ctx.scope.host


def scope_unit(ctx: CollectContext) -> UnitRef:
    if ctx.scope.unit is None:
        raise ScopeError(NO_UNIT)
    return ctx.scope.unit


def read_shape(scope: Scope, *argv: Word, inside: bool = False) -> tuple[Shape, ...]:
    """The shape of a `run_read(ctx, argv, sudo=True, inside=inside)` in `scope`."""
    if not inside:
        return (Shape(argv=argv),)
    unit = scope.unit
    if unit is None or unit.container is None:
        raise ScopeError(NO_CONTAINER)
    return (Shape(argv=("docker", "exec", unit.container, *argv)),)


async def run_read(
    ctx: CollectContext,
    argv: Sequence[str],
    *,
    sudo: bool = False,
    inside: bool = False,
) -> CommandResult:
    """Run a read-only command on the scope's host (inside the unit's container when `inside`;
    container commands need root, see `CONTAINER_SUDO`)."""
    host = scope_host(ctx)
    if inside:
        unit = ctx.scope.unit
        if unit is None or unit.container is None:
            raise ScopeError(NO_CONTAINER)
        try:
            argv = in_container(unit.container, argv)
        except ContainerNameError as exc:
            raise ScopeError(str(exc)) from None
        sudo = sudo or CONTAINER_SUDO
    return await ctx.executor.run(host, argv, timeout=ctx.timeout, sudo=sudo, mutating=False)

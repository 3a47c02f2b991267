"""What every action shares: running its commands, keeping their results, plain failure lines,
and finding what it acts on in the context."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import timedelta

from supervisor.config.supervised import Host, UnitRef
from supervisor.execute.base import CommandResult, Failure
from supervisor.execute.containers import ContainerNameError, in_container
from supervisor.playbook.actions.base import ActionContext, ActionOutcome, ActionScope
from supervisor.playbook.actions.declare import StopSteps
from supervisor.playbook.evidence.declare import first_line

#: What the helpers below read: a running call's context, or a planned call's scope.
Where = ActionContext | ActionScope

#: A params default meaning "the unit's container" (what the engine's templating would give).
UNIT_CONTAINER = "{unit.container}"


def last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def why(result: CommandResult, *, last: bool = False) -> str:
    """`exit 1: Job for x.service failed ...`, `exit 3`, or the executor's error. `last` takes
    the last line of the output instead of the first (Python tracebacks end with the point)."""
    if result.error:
        return result.error
    pick = last_line if last else first_line
    said = pick(result.stderr) or pick(result.stdout)
    return f"exit {result.exit_status}: {said}" if said else f"exit {result.exit_status}"


def timed_out(result: CommandResult) -> bool:
    """The command was cut off by its deadline (it had connected and was running)."""
    return result.failure is Failure.TIMED_OUT


def shorten(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Steps:
    """Runs one action's commands through `ctx.executor` and keeps every result, in order."""

    def __init__(self, ctx: ActionContext) -> None:
        self.ctx = ctx
        self.results: list[CommandResult] = []
        #: what the action had to do beyond its plan (a unit killed after its stop ran out)
        self.notes: list[str] = []

    async def run(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        sudo: bool = False,
        mutating: bool = False,
        stdin: str | None = None,
        keep: bool = True,
        timeout: timedelta | None = None,
    ) -> CommandResult:
        """Run one command; `keep=False` leaves it out of the outcome (repeated polls);
        `timeout` replaces the per-command deadline (`ctx.timeout`)."""
        deadline = self.ctx.timeout if timeout is None else timeout
        result = await self.ctx.executor.run(
            host, argv, timeout=deadline, sudo=sudo, mutating=mutating, stdin=stdin
        )
        if keep:
            self.results.append(result)
        return result

    async def must(
        self,
        host: Host,
        argv: Sequence[str],
        *,
        sudo: bool = False,
        mutating: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        """Run one command; stop the action when it fails, naming the command and host."""
        result = await self.run(host, argv, sudo=sudo, mutating=mutating, stdin=stdin)
        if not result.ok:
            raise self.failed(host, argv, result)
        return result

    def failed(self, host: Host, argv: Sequence[str], result: CommandResult) -> StopSteps:
        """`systemctl start x.service on spark1 failed: exit 1: Job for x.service failed ...`"""
        return self.stop(f"{shlex.join(argv)} on {host.name} failed: {why(result)}")

    def stop(self, summary: str, *, needs_person: str = "") -> StopSteps:
        return StopSteps(summary, commands=tuple(self.results), needs_person=needs_person)

    def refuse(self, reason: str) -> StopSteps:
        """A guard said no: a person must look (`needs_person` is the reason)."""
        return self.stop(reason, needs_person=reason)

    def done(self, summary: str) -> ActionOutcome:
        """Success: `summary`, then the notes (`restarted x on h; x on h did not stop ...`)."""
        said = "; ".join([summary, *self.notes])
        return ActionOutcome(ok=True, summary=said, commands=tuple(self.results))

    def said(self, done: str, planned: str) -> str:
        """`done` normally, `planned` in a dry run ("restarted" / "would restart")."""
        return planned if self.ctx.dry_run else done


def host_of(ctx: Where) -> Host:
    if ctx.host is None:
        raise StopSteps(f"no host to act on for endpoint {ctx.endpoint.name}")
    return ctx.host


def unit_of(ctx: Where) -> tuple[Host, UnitRef]:
    if ctx.unit is None or ctx.host is None:
        raise StopSteps(f"no unit to act on for endpoint {ctx.endpoint.name}")
    return ctx.host, ctx.unit


def units_of(ctx: Where) -> tuple[tuple[Host, UnitRef], ...]:
    """The scope's unit when the step runs per unit (`on: unit`), else every unit of the
    endpoint in restart order (`on: units`: the runner leaves `ctx.unit` unset)."""
    if ctx.unit is not None and ctx.host is not None:
        return ((ctx.host, ctx.unit),)
    if not ctx.units:
        raise StopSteps(f"endpoint {ctx.endpoint.name} has no units to act on")
    return ctx.units


def container_of(ctx: Where, given: str = UNIT_CONTAINER) -> str:
    """The container a step names, `{unit.container}` (still unresolved) meaning the unit's."""
    if given != UNIT_CONTAINER:
        return given
    if ctx.unit is None:
        raise StopSteps(f"no unit, so no container, to act on for endpoint {ctx.endpoint.name}")
    if not ctx.unit.container:
        raise StopSteps(f"{ctx.unit.unit} has no container: set units[].container")
    return ctx.unit.container


def inside(container: str, argv: Sequence[str]) -> list[str]:
    """`in_container`, with a bad container name ending the action instead of raising."""
    try:
        return in_container(container, argv)
    except ContainerNameError as exc:
        raise StopSteps(str(exc)) from None


def absolute(path: str, what: str) -> str:
    """Paths from rules must be absolute (so none can be read as an option of a command)."""
    if not path.startswith("/"):
        raise StopSteps(f"{what} must be an absolute path, got {path!r}")
    return path

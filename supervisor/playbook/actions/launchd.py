"""launchd jobs: the unit verbs for `service_manager: launchd` hosts, and a graceful stop.

launchctl(1): `kickstart -k DOMAIN/LABEL` kills the running instance and starts the job again
(a job launchd does not hold is bootstrapped from its plist first);
`bootout DOMAIN/LABEL` unloads it (stopping it); `bootstrap DOMAIN PLIST` loads it (RunAtLoad
starts it); `kill SIGNAL DOMAIN/LABEL` signals the running job. The man page does not say which
signal `kickstart -k` sends, and a Metal process killed with SIGKILL can leave its wired memory
behind until a reboot: `stop_job_gracefully` sends TERM to the job's pid and KILL only when it
still runs after `grace`.

`kickstart -k` and `bootout` wait for the job to end, which launchd forces only after the job's
ExitTimeOut: each is given `stop_within`, and a job still running then gets `launchctl kill
SIGKILL` (then `kickstart` starts it again, or `bootout` is asked once more).

Least privilege: only the `system` domain (LaunchDaemons) needs root to change ("root privileges
are required to make modifications"); a LaunchAgent in `gui/<uid>` or `user/<uid>` is changed by
that user without sudo, so the SSH user of a Mac host should be the user the agent runs as.
Reading (`launchctl print`) never needs root.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import Field

from supervisor.config.fields import Duration
from supervisor.config.supervised import Host, UnitRef
from supervisor.core.durations import format_duration
from supervisor.execute.base import CommandResult
from supervisor.execute.shape import PID, Pattern, Shape, fixed
from supervisor.playbook.actions.base import (
    ActionContext,
    ActionOutcome,
    ActionParams,
    ActionScope,
    Privileged,
    Target,
)
from supervisor.playbook.actions.declare import StopSteps, action
from supervisor.playbook.actions.managers import UnitManager, Units
from supervisor.playbook.actions.steps import Steps, timed_out, units_of, why
from supervisor.playbook.evidence.launchctl import (
    NotLaunchdError,
    is_not_found,
    job_target,
    parse_print,
    print_argv,
)
from supervisor.playbook.evidence.unitstate import UnitState, launchd_state

POLL_S = 0.5  #: how often a stopping process is looked for
#: `bootout` of a job that is not loaded: 3 "No such process", 113 "Could not find service"
NOT_LOADED_STATUSES = frozenset({3, 113})


def target(unit: UnitRef) -> str:
    try:
        return job_target(unit)
    except NotLaunchdError as exc:
        raise StopSteps(str(exc)) from None


def needs_root(unit: UnitRef) -> bool:
    """Only the system domain needs root to change a job."""
    return unit.domain == "system"


def launchd_privileged(host: Host, unit: UnitRef, verbs: tuple[str, ...]) -> list[Privileged]:
    """What `verbs` (`kickstart`, `bootout`, `bootstrap`, `kill`) run as root for one job:
    nothing in a user's own domain (`gui/<uid>`, `user/<uid>`), `launchctl VERB system/LABEL` in
    `system`."""
    if not needs_root(unit):
        return []
    label = f"system/{unit.unit}"
    shapes = {
        "kickstart": fixed("launchctl", "kickstart", "-k", label),
        "bootout": fixed("launchctl", "bootout", label),
        "kill": fixed("launchctl", "kill", "SIGKILL", label),
        "bootstrap": Shape(
            argv=("launchctl", "bootstrap", "system", unit.plist or "/Library/LaunchDaemons/x")
        ),
    }
    found = [(host, shapes[verb]) for verb in verbs]
    if "bootstrap" in verbs:
        found.append((host, fixed("launchctl", "kickstart", label)))
    return found


async def launchctl(steps: Steps, host: Host, unit: UnitRef, *argv: str) -> CommandResult:
    """A changing launchctl subcommand (with sudo only in the system domain)."""
    command = ["launchctl", *argv]
    return await steps.must(host, command, sudo=needs_root(unit), mutating=True)


async def print_job(steps: Steps, host: Host, unit: UnitRef) -> tuple[CommandResult, bool]:
    """`launchctl print` (kept in the outcome): (the result, whether launchd holds the job)."""
    target(unit)  # a unit that is not a launchd job stops here
    argv = print_argv(unit)
    result = await steps.run(host, argv)
    if result.ok:
        return result, True
    if not result.error and is_not_found(result.exit_status, result.stderr):
        return result, False
    raise steps.failed(host, argv, result)


async def plist_path(steps: Steps, host: Host, unit: UnitRef) -> str:
    """The unit's plist on the Mac; `~/` is the SSH user's home there (`printenv HOME`)."""
    plist = unit.plist or ""
    if not plist.startswith(("/", "~/")):
        raise StopSteps(f"{unit.unit} has no plist to bootstrap: set units[].plist")
    if plist.startswith("/"):
        return plist
    home = await steps.must(host, ["printenv", "HOME"])
    folder = home.stdout.strip()
    if not folder.startswith("/"):
        raise steps.stop(f"no home folder on {host.name} to find {plist} in")
    return f"{folder.rstrip('/')}/{plist[2:]}"


async def _bounded(
    steps: Steps, host: Host, unit: UnitRef, argv: list[str], within: timedelta
) -> CommandResult | None:
    """`argv` (a stopping launchctl subcommand) for at most `within`: its result, or None
    when it ran out and the job's processes got SIGKILL (`launchctl kill SIGKILL`)."""
    result = await steps.run(host, argv, sudo=needs_root(unit), mutating=True, timeout=within)
    if not timed_out(result):
        return result
    await launchctl(steps, host, unit, "kill", "SIGKILL", target(unit))
    steps.notes.append(
        f"{unit.unit} on {host.name} did not stop within {format_duration(within)}: "
        "it was killed (SIGKILL)"
    )
    return None


async def _restart(steps: Steps, units: Units, reset_failed: bool, within: timedelta) -> None:
    """`kickstart -k`, bounded; a job launchd does not hold (booted out, never bootstrapped)
    answers only `Could not find service "LABEL" in domain for system`, exit 113: it is loaded
    from its plist and started, as `start_units` does."""
    for host, unit in units:
        argv = ["launchctl", "kickstart", "-k", target(unit)]
        result = await _bounded(steps, host, unit, argv, within)
        if result is None:
            await launchctl(steps, host, unit, "kickstart", target(unit))
        elif result.ok:
            continue
        elif result.error or not is_not_found(result.exit_status, result.stderr):
            raise steps.failed(host, argv, result)
        else:
            await _load_and_start(steps, host, unit)


async def _load_and_start(steps: Steps, host: Host, unit: UnitRef) -> None:
    plist = await plist_path(steps, host, unit)
    await launchctl(steps, host, unit, "bootstrap", unit.domain or "", plist)
    await launchctl(steps, host, unit, "kickstart", target(unit))


async def _stop(steps: Steps, units: Units, within: timedelta) -> None:
    for host, unit in units:
        argv = ["launchctl", "bootout", target(unit)]
        result = await _bounded(steps, host, unit, argv, within)
        if result is None:  # killed: unload what is left
            result = await steps.run(host, argv, sudo=needs_root(unit), mutating=True)
        gone = not result.error and result.exit_status in NOT_LOADED_STATUSES
        if not result.ok and not gone:
            raise steps.failed(host, argv, result)


async def _read(steps: Steps, host: Host, unit: UnitRef) -> UnitState:
    """`launchctl print` (no root), not kept in the outcome."""
    name = unit.unit
    try:
        argv = print_argv(unit)
    except NotLaunchdError as exc:
        return UnitState(host=host.name, unit=name, state="", alive=False, error=str(exc))
    result = await steps.run(host, argv, keep=False)
    return launchd_state(host.name, name, result, unreadable=why(result))


async def _start(steps: Steps, units: Units, reset_failed: bool) -> None:
    for host, unit in units:
        _, loaded = await print_job(steps, host, unit)
        if loaded:
            await launchctl(steps, host, unit, "kickstart", target(unit))
        else:
            await _load_and_start(steps, host, unit)


LAUNCHD = UnitManager(restart=_restart, stop=_stop, start=_start, read=_read)


class GracefulParams(ActionParams):
    grace: Duration = Field(
        default=timedelta(seconds=60), description="after TERM, how long before KILL"
    )


async def _alive(steps: Steps, host: Host, pid: int) -> bool:
    """`ps -o stat= -p PID` (BSD and procps alike): exit 1 once it is gone; a zombie (`Z`,
    ended but not yet reaped by launchd) counts as gone."""
    argv = ["ps", "-o", "stat=", "-p", str(pid)]
    result = await steps.run(host, argv, keep=False)
    if result.error or result.exit_status not in (0, 1):
        steps.results.append(result)
        raise steps.failed(host, argv, result)
    return result.exit_status == 0 and not result.stdout.strip().startswith("Z")


async def _gone_within(steps: Steps, host: Host, pid: int, seconds: float) -> bool:
    clock = steps.ctx.clock
    deadline = clock.monotonic() + seconds
    while await _alive(steps, host, pid):
        left = deadline - clock.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(POLL_S, left))
    return True


async def _stop_one(steps: Steps, host: Host, unit: UnitRef, grace: timedelta) -> str:
    """TERM, wait up to `grace`, KILL if needed: what was done, in words. `kill -s SIG PID`
    without `--` (the pid is a number we wrote, never an option), the form BSD kill, zsh's and
    bash's builtins all take."""
    printed, loaded = await print_job(steps, host, unit)
    pid = parse_print(printed.stdout).pid if loaded else 0
    name = f"{unit.unit} on {host.name}"
    if pid <= 0:
        return f"{name} runs no process"
    kill = ["kill", "-s", "TERM", str(pid)]
    await steps.must(host, kill, sudo=needs_root(unit), mutating=True)
    waited = format_duration(grace)
    if steps.ctx.dry_run:
        return f"would send TERM to {name} (pid {pid}), then KILL if it still runs after {waited}"
    if await _gone_within(steps, host, pid, grace.total_seconds()):
        return f"sent TERM to {name} (pid {pid}); it ended"
    await steps.must(host, ["kill", "-s", "KILL", str(pid)], sudo=needs_root(unit))
    if not await _gone_within(steps, host, pid, steps.ctx.timeout.total_seconds()):
        raise steps.stop(f"pid {pid} of {name} still runs after KILL")
    return f"sent TERM to {name} (pid {pid}); it still ran after {waited} and got KILL"


def _graceful_privileged(scope: ActionScope, params: GracefulParams) -> tuple[Privileged, ...]:
    """A LaunchDaemon's pid is signalled as root (`kill -s TERM|KILL PID`): the one signal
    to a pid the daemon picks; a LaunchAgent's needs no root."""
    signal = Pattern(regex="(TERM|KILL)", example="TERM")
    return tuple(
        (host, Shape(argv=("kill", "-s", signal, PID)))
        for host, unit in units_of(scope)
        if host.service_manager == "launchd" and needs_root(unit)
    )


@action(
    "stop_job_gracefully",
    params=GracefulParams,
    target=Target.UNITS,
    targets=frozenset({Target.UNITS, Target.UNIT}),
    doc="launchd jobs: TERM the job's process, KILL it only if it still runs after `grace` "
    "(a KeepAlive job is started again by launchd; `start_units` starts any other)",
    privileged=_graceful_privileged,
)
async def stop_job_gracefully(ctx: ActionContext, params: GracefulParams) -> ActionOutcome:
    steps = Steps(ctx)
    units = tuple(reversed(units_of(ctx)))
    for host, _ in units:
        if host.service_manager != "launchd":
            raise steps.stop(f"{host.name} is not a launchd host: use stop_units")
    said = [await _stop_one(steps, host, unit, params.grace) for host, unit in units]
    return steps.done("; ".join(said))

"""Units: stop, start and restart them in the endpoint's order, through their host's service
manager (`MANAGERS`: systemd here, launchd in `supervisor.playbook.actions.launchd`); repoint a
systemd unit's ExecStart.

A stop ends in bounded time. A hung vLLM does not obey SIGTERM quickly (its API server waits for
requests its frozen engine never finishes) and systemd kills it only after the unit's
`TimeoutStopSec` (90 s by default): `systemctl stop` is given `stop_within`, and a unit still
stopping then has every process of it killed (`systemctl kill --signal=SIGKILL`, all of its
control group), which ends systemd's stop job at once. systemd's own TimeoutStopSec still kills
sooner when it is shorter.
"""

from __future__ import annotations

import asyncio
import shlex
from datetime import timedelta

from pydantic import Field, field_validator

from supervisor.config.fields import Flag, PositiveDuration
from supervisor.config.supervised import Host, UnitRef
from supervisor.core.durations import format_duration
from supervisor.execute.base import CommandResult
from supervisor.execute.helpers import dropin_argv, dropin_shape
from supervisor.execute.shape import fixed
from supervisor.playbook.actions.base import (
    ActionContext,
    ActionOutcome,
    ActionParams,
    ActionScope,
    Privileged,
    Target,
)
from supervisor.playbook.actions.declare import StopSteps, action
from supervisor.playbook.actions.launchd import LAUNCHD, launchd_privileged
from supervisor.playbook.actions.managers import UnitManager, Units, manager_of
from supervisor.playbook.actions.processes import runs_as_root
from supervisor.playbook.actions.steps import Steps, timed_out, unit_of, units_of, why
from supervisor.playbook.evidence.unitstate import UnitState, systemd_state

#: `on: units` (the default: every unit of the endpoint, in order) or `on: unit` (one unit).
UNIT_TARGETS = frozenset({Target.UNITS, Target.UNIT})

DROPIN_NAME = "50-fleet-supervisor-execstart.conf"


#: ActiveState of a unit that runs or is on its way to
#: ActiveState of a unit whose stop has not finished (its processes still run)
STOPPING_STATES = frozenset({"active", "deactivating"})
POLL_S = 0.25  #: how often a killed unit is read until systemd has seen it end
STOP_WITHIN = timedelta(seconds=30)
_STOP_WITHIN_DOC = (
    "how long each unit may take to stop gracefully (its service manager's SIGTERM) before "
    "every process of it is killed with SIGKILL"
)


class StartParams(ActionParams):
    reset_failed: Flag = Field(
        default=True,
        description="`systemctl reset-failed` each unit before starting it (systemd only)",
    )


class StopParams(ActionParams):
    stop_within: PositiveDuration = Field(default=STOP_WITHIN, description=_STOP_WITHIN_DOC)


class RestartParams(StartParams):
    stop_within: PositiveDuration = Field(default=STOP_WITHIN, description=_STOP_WITHIN_DOC)


class DropInParams(ActionParams):
    command: str = Field(description="the known-good command, e.g. `{unit.known_good}`")
    dropin_name: str = Field(default=DROPIN_NAME, description="the drop-in's file name")
    systemd_dir: str = Field(default="/etc/systemd/system", description="where units live")

    @field_validator("dropin_name")
    @classmethod
    def _file_name(cls, value: str) -> str:
        if "/" in value or value.startswith(".") or not value.endswith(".conf"):
            raise ValueError(f"must be a file name ending in .conf, got {value!r}")
        return value

    @field_validator("systemd_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value


def _listing(units: Units) -> str:
    return ", then ".join(f"{unit.unit} on {host.name}" for host, unit in units)


async def _systemctl(steps: Steps, verb: str, units: Units) -> None:
    for host, unit in units:
        await steps.must(host, ["systemctl", verb, unit_name(unit)], sudo=True, mutating=True)


async def _systemd_restart(
    steps: Steps, units: Units, reset_failed: bool, within: timedelta
) -> None:
    await _systemd_stop(steps, tuple(reversed(units)), within)
    await _systemd_start(steps, units, reset_failed)


async def _systemd_stop(steps: Steps, units: Units, within: timedelta) -> None:
    for host, unit in units:
        await _systemd_stop_one(steps, host, unit, within)


async def _systemd_stop_one(steps: Steps, host: Host, unit: UnitRef, within: timedelta) -> None:
    """`systemctl stop` for at most `within`; then SIGKILL to the unit's every process, and
    wait (the per-command deadline) until systemd has seen them end."""
    name = unit_name(unit)
    argv = ["systemctl", "stop", name]
    result = await steps.run(host, argv, sudo=True, mutating=True, timeout=within)
    if result.ok:
        return
    if not timed_out(result):
        raise steps.failed(host, argv, result)
    kill = ["systemctl", "kill", "--signal=SIGKILL", name]
    await steps.must(host, kill, sudo=True, mutating=True)
    state = await _systemd_ended(steps, host, unit)
    if state.error or state.state.split("/")[0] in STOPPING_STATES:
        left = state.error or f"still {state.state}"
        raise steps.stop(f"{name} on {host.name} did not stop, even after SIGKILL: {left}")
    steps.notes.append(
        f"{name} on {host.name} did not stop within {format_duration(within)}: its processes "
        f"were killed (SIGKILL), it is {state.state}"
    )


async def _systemd_ended(steps: Steps, host: Host, unit: UnitRef) -> UnitState:
    """The unit read every `POLL_S` until it is no longer stopping (or the per-command deadline
    ran out); the last read is kept in the outcome."""
    clock = steps.ctx.clock
    deadline = clock.monotonic() + steps.ctx.timeout.total_seconds()
    while True:
        state, result = await _systemd_show(steps, host, unit)
        ended = not state.error and state.state.split("/")[0] not in STOPPING_STATES
        left = deadline - clock.monotonic()
        if ended or left <= 0:
            steps.results.append(result)
            return state
        await asyncio.sleep(min(POLL_S, left))


async def _systemd_show(steps: Steps, host: Host, unit: UnitRef) -> tuple[UnitState, CommandResult]:
    """`systemctl show -p ActiveState,SubState,MainPID` (no root), not kept in the outcome."""
    name = unit_name(unit)
    argv = ["systemctl", "show", name, "-p", "ActiveState,SubState,MainPID", "--no-pager"]
    result = await steps.run(host, argv, keep=False)
    return systemd_state(host.name, name, result, unreadable=why(result)), result


async def _systemd_read(steps: Steps, host: Host, unit: UnitRef) -> UnitState:
    state, _ = await _systemd_show(steps, host, unit)
    return state


async def _systemd_start(steps: Steps, units: Units, reset_failed: bool) -> None:
    if reset_failed:
        await _systemctl(steps, "reset-failed", units)
    await _systemctl(steps, "start", units)


SYSTEMD = UnitManager(
    restart=_systemd_restart, stop=_systemd_stop, start=_systemd_start, read=_systemd_read
)
#: service manager (a host's `service_manager`) -> its unit verbs
MANAGERS: dict[str, UnitManager] = {"systemd": SYSTEMD, "launchd": LAUNCHD}


#: the kill a stop falls back to past `stop_within` (`_systemd_stop_one`)
_KILL = "kill --signal=SIGKILL"


def _verbs_privileged(
    scope: ActionScope, systemd: tuple[str, ...], launchd: tuple[str, ...]
) -> tuple[Privileged, ...]:
    """`systemctl VERB UNIT` for each systemd unit of the call, the launchd verbs for a job."""
    found: list[Privileged] = []
    for host, unit in units_of(scope):
        if host.service_manager == "launchd":
            found.extend(launchd_privileged(host, unit, launchd))
        else:
            found.extend((host, fixed("systemctl", *verb.split(), unit.unit)) for verb in systemd)
    return tuple(found)


def _restart_privileged(scope: ActionScope, params: RestartParams) -> tuple[Privileged, ...]:
    verbs = (
        ("stop", _KILL, "reset-failed", "start")
        if params.reset_failed
        else ("stop", _KILL, "start")
    )
    return _verbs_privileged(scope, verbs, ("kickstart", "kill"))


def _stop_privileged(scope: ActionScope, params: StopParams) -> tuple[Privileged, ...]:
    return _verbs_privileged(scope, ("stop", _KILL), ("bootout", "kill"))


def _start_privileged(scope: ActionScope, params: StartParams) -> tuple[Privileged, ...]:
    verbs = ("reset-failed", "start") if params.reset_failed else ("start",)
    return _verbs_privileged(scope, verbs, ("bootstrap", "kickstart"))


def dropin_path(params: DropInParams, unit: str) -> str:
    return f"{params.systemd_dir.rstrip('/')}/{unit}.d/{params.dropin_name}"


def split_command(command: str) -> list[str]:
    """The command's words as systemd will read them (its quoting is the shell's)."""
    try:
        return shlex.split(command)
    except ValueError:
        raise StopSteps(f"the known-good command is not well quoted: {command!r}") from None


def _dropin_privileged(scope: ActionScope, params: DropInParams) -> tuple[Privileged, ...]:
    """The helper with this unit's drop-in and known-good command pinned (a service account
    never writes a unit file's text itself)."""
    host, unit = unit_of(scope)
    words = split_command(params.command.strip())
    return (
        (host, dropin_shape(dropin_path(params, unit.unit), words)),
        (host, fixed("systemctl", "daemon-reload")),
    )


def unit_name(unit: UnitRef, *, file: bool = False) -> str:
    """The unit's name, refused when it could be read as an option (or, for a `file` name, as
    a path)."""
    if unit.unit.startswith("-") or (file and ("/" in unit.unit or unit.unit.startswith("."))):
        raise StopSteps(f"not a unit name: {unit.unit!r}")
    return unit.unit


@action(
    "restart_units",
    params=RestartParams,
    target=Target.UNITS,
    targets=UNIT_TARGETS,
    doc="stop the units in reverse restart order (one not stopped within `stop_within` has its "
    "processes killed: `systemctl kill --signal=SIGKILL`), reset-failed each, start them in "
    "order (launchd: `launchctl kickstart -k` each, in order, `launchctl kill SIGKILL` then "
    "`kickstart` past `stop_within`)",
    privileged=_restart_privileged,
)
async def restart_units(ctx: ActionContext, params: RestartParams) -> ActionOutcome:
    steps = Steps(ctx)
    units = units_of(ctx)
    manager = manager_of(MANAGERS, units)
    await manager.restart(steps, units, params.reset_failed, params.stop_within)
    return steps.done(f"{steps.said('restarted', 'would restart')} {_listing(units)}")


@action(
    "stop_units",
    params=StopParams,
    target=Target.UNITS,
    targets=UNIT_TARGETS,
    doc="stop the units in reverse restart order (launchd: `launchctl bootout`); one not "
    "stopped within `stop_within` has its processes killed with SIGKILL",
    privileged=_stop_privileged,
)
async def stop_units(ctx: ActionContext, params: StopParams) -> ActionOutcome:
    steps = Steps(ctx)
    units = tuple(reversed(units_of(ctx)))
    await manager_of(MANAGERS, units).stop(steps, units, params.stop_within)
    return steps.done(f"{steps.said('stopped', 'would stop')} {_listing(units)}")


@action(
    "start_units",
    params=StartParams,
    target=Target.UNITS,
    targets=UNIT_TARGETS,
    doc="reset-failed and start the units in restart order (launchd: `launchctl bootstrap` "
    "the plist if not loaded, then `launchctl kickstart`)",
    privileged=_start_privileged,
)
async def start_units(ctx: ActionContext, params: StartParams) -> ActionOutcome:
    steps = Steps(ctx)
    units = units_of(ctx)
    await manager_of(MANAGERS, units).start(steps, units, params.reset_failed)
    return steps.done(f"{steps.said('started', 'would start')} {_listing(units)}")


@action(
    "write_execstart_dropin",
    params=DropInParams,
    target=Target.UNIT,
    doc="write a drop-in that clears ExecStart and sets the known-good command, daemon-reload",
    privileged=_dropin_privileged,
)
async def write_execstart_dropin(ctx: ActionContext, params: DropInParams) -> ActionOutcome:
    steps = Steps(ctx)
    host, unit = unit_of(ctx)
    name = unit_name(unit, file=True)
    command = params.command.strip()
    if not command:
        raise steps.refuse(f"no known-good command for {name}: set units[].known_good")
    if "\n" in command or "\r" in command:
        raise steps.refuse(f"the command for {name} holds a line break: not writing it")
    path = dropin_path(params, name)
    if runs_as_root(host):
        text = f"[Service]\nExecStart=\nExecStart={command}\n"
        install = ["install", "-D", "-m", "0644", "/dev/stdin", path]
        await steps.must(host, install, sudo=True, mutating=True, stdin=text)
    else:  # a service account: the root-owned helper writes what its (pinned) arguments say
        await steps.must(host, dropin_argv(path, split_command(command)), sudo=True, mutating=True)
    await steps.must(host, ["systemctl", "daemon-reload"], sudo=True, mutating=True)
    wrote = steps.said("wrote", "would write")
    return steps.done(f"{wrote} {path} on {host.name} (ExecStart={command}), then daemon-reload")

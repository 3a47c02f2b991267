"""Docker containers of units: restart one, or run a command inside it."""

from __future__ import annotations

import shlex

from pydantic import Field

from supervisor.config.fields import Flag
from supervisor.execute.containers import CONTAINER_NAME, CONTAINER_SUDO
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
from supervisor.playbook.actions.steps import UNIT_CONTAINER, Steps, container_of, host_of, inside


class RestartContainerParams(ActionParams):
    container: str = Field(
        default=UNIT_CONTAINER, description="the container (default: the unit's)"
    )


class ExecParams(ActionParams):
    argv: tuple[str, ...] = Field(min_length=1, description="the command, one item per argument")
    container: str = Field(
        default=UNIT_CONTAINER, description="the container (default: the unit's)"
    )
    mutating: Flag = Field(default=True, description="the command changes something")


def _restart_privileged(
    scope: ActionScope, params: RestartContainerParams
) -> tuple[Privileged, ...]:
    return ((host_of(scope), fixed("docker", "restart", container_of(scope, params.container))),)


def _exec_privileged(scope: ActionScope, params: ExecParams) -> tuple[Privileged, ...]:
    argv = inside(container_of(scope, params.container), params.argv)
    return ((host_of(scope), fixed(*argv)),)


@action(
    "docker_restart",
    params=RestartContainerParams,
    target=Target.UNIT,
    targets=frozenset({Target.UNIT, Target.HOST}),
    doc="docker restart the unit's container",
    privileged=_restart_privileged,
)
async def docker_restart(ctx: ActionContext, params: RestartContainerParams) -> ActionOutcome:
    steps = Steps(ctx)
    host = host_of(ctx)
    container = container_of(ctx, params.container)
    if not CONTAINER_NAME.fullmatch(container):
        raise StopSteps(f"not a container name: {container!r}")
    argv = ["docker", "restart", container]
    await steps.must(host, argv, sudo=CONTAINER_SUDO, mutating=True)
    return steps.done(f"{steps.said('restarted', 'would restart')} {container} on {host.name}")


@action(
    "docker_exec",
    params=ExecParams,
    target=Target.UNIT,
    targets=frozenset({Target.UNIT, Target.HOST}),
    doc="run a command inside the unit's container (arguments quoted, never a shell line)",
    privileged=_exec_privileged,
)
async def docker_exec(ctx: ActionContext, params: ExecParams) -> ActionOutcome:
    steps = Steps(ctx)
    host = host_of(ctx)
    container = container_of(ctx, params.container)
    argv = inside(container, params.argv)
    await steps.must(host, argv, sudo=CONTAINER_SUDO, mutating=params.mutating)
    ran = steps.said("ran", "would run")
    return steps.done(f"{ran} {shlex.join(params.argv)} in {container} on {host.name}")

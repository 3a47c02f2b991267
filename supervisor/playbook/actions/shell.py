"""The escape hatch: one command, given as a list of arguments, each quoted on the way."""

from __future__ import annotations

import shlex

from pydantic import Field

from supervisor.config.fields import Flag
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
from supervisor.playbook.actions.steps import Steps, host_of


class ShellParams(ActionParams):
    argv: tuple[str, ...] = Field(min_length=1, description="the command, one item per argument")
    sudo: Flag = Field(default=False, description="run it with `sudo -n`")
    mutating: Flag = Field(default=True, description="it changes something (a dry run skips it)")


def _shell_privileged(scope: ActionScope, params: ShellParams) -> tuple[Privileged, ...]:
    return ((host_of(scope), fixed(*params.argv)),) if params.sudo else ()


@action(
    "shell",
    params=ShellParams,
    target=Target.UNIT,
    targets=frozenset({Target.UNIT, Target.HOST, Target.HOSTS, Target.ENDPOINT}),
    doc="run one command on the host (a list of arguments, never a shell line)",
    privileged=_shell_privileged,
)
async def shell(ctx: ActionContext, params: ShellParams) -> ActionOutcome:
    steps = Steps(ctx)
    host = host_of(ctx)
    await steps.must(host, params.argv, sudo=params.sudo, mutating=params.mutating)
    ran = steps.said("ran", "would run") if params.mutating else "ran"
    return steps.done(f"{ran} {shlex.join(params.argv)} on {host.name}")

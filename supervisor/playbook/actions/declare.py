"""The `action` decorator: turns `async def name(ctx, params) -> ActionOutcome` into an `Action`.

It lives apart from `registry.py` so the topic modules can import it while the registry imports
them. The wrapped function may raise `Stop` (a failed command, a guard that refused): the
decorator turns it into an `ActionOutcome(ok=False, ...)`, so an action never raises for those.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps

from supervisor.execute.base import CommandResult
from supervisor.playbook.actions.base import (
    Action,
    ActionContext,
    ActionOutcome,
    ActionScope,
    P,
    Privileged,
    Target,
)

RunFn = Callable[[ActionContext, P], Awaitable[ActionOutcome]]
NeedsFn = Callable[[ActionScope, P], tuple[Privileged, ...]]


class StopSteps(Exception):  # noqa: N818 - it is a control-flow signal, not an error type
    """Ends an action early with ok=False: `summary` says why, `needs_person` when a person
    must decide (a guard refused), `commands` what ran until then."""

    def __init__(
        self,
        summary: str,
        *,
        commands: tuple[CommandResult, ...] = (),
        needs_person: str = "",
    ) -> None:
        super().__init__(summary)
        self.summary = summary
        self.commands = commands
        self.needs_person = needs_person


def action(
    name: str,
    *,
    params: type[P],
    target: Target,
    doc: str,
    targets: frozenset[Target] | None = None,
    privileged: NeedsFn[P] | None = None,
) -> Callable[[RunFn[P]], Action[P]]:
    """Declare an action. `targets` (the `on:` values a rule may use) defaults to `{target}`;
    `privileged` lists the commands one call would run as root (none when not given)."""
    accepted = frozenset({target}) if targets is None else targets
    if target not in accepted:
        raise ValueError(f"action {name}: default target {target} is not among its targets")

    def wrap(fn: RunFn[P]) -> Action[P]:
        @wraps(fn)
        async def run(ctx: ActionContext, given: P) -> ActionOutcome:
            try:
                return await fn(ctx, given)
            except StopSteps as stop:
                return ActionOutcome(
                    ok=False,
                    summary=stop.summary,
                    commands=stop.commands,
                    needs_person=stop.needs_person,
                )

        if privileged is None:
            return Action(
                name=name, params=params, run=run, target=target, doc=doc, targets=accepted
            )
        return Action(
            name=name,
            params=params,
            run=run,
            target=target,
            doc=doc,
            targets=accepted,
            privileged=privileged,
        )

    return wrap

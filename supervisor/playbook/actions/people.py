"""Hand the incident to a person: the step fails on purpose, so the runner escalates."""

from __future__ import annotations

from pydantic import Field

from supervisor.playbook.actions.base import ActionContext, ActionOutcome, ActionParams, Target
from supervisor.playbook.actions.declare import action


class AskParams(ActionParams):
    message: str = Field(min_length=1, description="what the person should look at or do")


@action(
    "ask_person",
    params=AskParams,
    target=Target.ENDPOINT,
    targets=frozenset(Target),
    doc="stop here and ask a person (the message says what to look at)",
)
async def ask_person(ctx: ActionContext, params: AskParams) -> ActionOutcome:
    message = params.message.strip() or f"{ctx.endpoint.name} needs a person"
    return ActionOutcome(ok=False, summary=f"asked a person: {message}", needs_person=message)

"""A restart asked for by a person (`/restart NAME`, `fleet-supervisor restart NAME`, HTTP): what
refuses it, and the rule it runs as. It runs through the one attempt runner like every repair
(`supervisor.repair.attempt`, route RESTART): refused inside the startup grace, in
maintenance, while a repair runs, without units or when the endpoint's repair budget is spent;
otherwise the units restart in order under the hosts' locks, every step is recorded, the endpoint
starts a new startup grace and a real completion verifies it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from supervisor.config.models import FleetConfig
from supervisor.core.durations import format_duration
from supervisor.judge.machine import State
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import All, Mode, Rule, Severity, Step
from supervisor.playbook.scopes import scopes_of
from supervisor.record.store.store import Store
from supervisor.repair.attempt import RESTART, Attempt
from supervisor.repair.guards import check_budget
from supervisor.worker import EndpointWorker

MANUAL_RESTART = "manual-restart"

RULE = Rule(
    id=MANUAL_RESTART,
    title="restart asked for by a person",
    severity=Severity.INFO,
    when=All(all=()),
    actions=(Step(action="restart_units"),),
    mode=Mode.AUTO,
)

_REFUSED_IN = {
    State.STARTING: "it is inside its startup grace: let it load",
    State.MAINTENANCE: "it is in maintenance: /unsilence it first",
    State.REMEDIATING: "a repair is running",
    State.VERIFYING: "a repair is being verified",
}


@dataclass(frozen=True, kw_only=True)
class RestartAnswer:
    """What a restart request came to, in one line for the person who asked."""

    ok: bool
    text: str


VERIFY_AT_LEAST = timedelta(seconds=30)
"""A restart's verification lasts its startup grace, and at least this long."""


async def restart_refusal(
    worker: EndpointWorker,
    *,
    config: FleetConfig,
    store: Store,
    now: datetime,
    repairing: bool,
) -> str:
    """Why the restart may not run now, or ''."""
    why = _REFUSED_IN.get(worker.state, "")
    if not why and repairing:
        why = "a repair is running"
    if not why and not worker.endpoint.units:
        why = "it has no units to restart"
    if why:
        return why
    settings = config.remediation
    spend = await check_budget(
        store,
        endpoint=worker.name,
        rule_id=MANUAL_RESTART,
        rule_attempts=settings.max_attempts,
        rule_window=settings.window,
        max_attempts=settings.max_attempts,
        window=settings.window,
        now=now,
    )
    return "" if spend.allowed else spend.note


def attempt(worker: EndpointWorker, config: FleetConfig, *, who: str) -> Attempt:
    scopes: list[tuple[Any, Facts]] = [(s, Facts()) for s in scopes_of(worker.endpoint, config)]
    return Attempt(
        route=RESTART,
        rule=RULE,
        matched=[],
        scopes=scopes,
        begin="",
        proven=f"restarted by {who}",
        within=max(worker.endpoint.startup_grace, VERIFY_AT_LEAST),
        actor=who,
    )


def answer(worker: EndpointWorker) -> str:
    grace = format_duration(worker.endpoint.startup_grace)
    return f"restarted {worker.name}: startup grace {grace}"

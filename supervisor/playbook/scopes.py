"""Scopes of an endpoint (one per unit, in restart order) and the built-in facts of each.

Built-in facts are always there when they have a value: `endpoint.*`, `probe.*` (the failure
that started the diagnosis), `unit.*` (absent for an endpoint without units, except
`unit.count`), `host.*` (absent when there is no host). A value that is not set (a unit without
`container` or `known_good`, a local host without `address`) is missing, not empty text, so
`{fact: unit.known_good, op: exists, value: false}` says "no known-good command".
"""

from __future__ import annotations

from collections.abc import Mapping

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint
from supervisor.core.events import ProbeResult, UnitSignal
from supervisor.playbook.evidence.base import FactValue, Scope

BUILTIN_FACTS: Mapping[str, str] = {
    "endpoint.name": "the endpoint's name in the fleet config",
    "endpoint.kind": "`openai`, `ollama`, `health`, `embedding` or `rerank`",
    "endpoint.state": "its state when the diagnosis started (`down`, `degraded`, ...)",
    "endpoint.url": "its base URL",
    "probe.reason": "the failure that started the diagnosis, in plain words",
    "probe.check": "what that probe called: `health`, `models`, `completion`, ...",
    "probe.outcome": "`fail` or `degraded`",
    "event.kind": "what systemd said about this scope's unit just before (`failed`, `exited`, "
    "`crash_loop`, `stopped`); missing when it said nothing",
    "event.result": "systemd's result for it: `exit-code`, `signal`, `start-limit-hit`, ...",
    "event.exit_status": "the main process's exit status (203 = EXEC) or signal number",
    "event.n_restarts": "systemd's restart counter for the unit",
    "event.text": "the unit's own last journal lines and systemd's, oldest first",
    "event.source": "`journal` (the stream), or `poll` (the host fell back to polling)",
    "unit.name": "the unit file name, e.g. `vllm-ds4-head.service`",
    "unit.host": "the host the unit runs on",
    "unit.container": "the unit's docker container (missing when it has none)",
    "unit.known_good": "the unit's known-good launch script or command (missing when none)",
    "unit.index": "the unit's position in the restart order, from 0",
    "unit.count": "how many units the endpoint has (0 without units)",
    "host.name": "the scope's host (the unit's, else the endpoint's `host`)",
    "host.address": "its SSH address (missing for a local host without one)",
    "host.local": "true for the box the supervisor runs on",
}


def scopes_of(endpoint: Endpoint, config: FleetConfig) -> list[Scope]:
    """One scope per unit in restart order, or one for an endpoint without units."""
    if not endpoint.units:
        host = config.hosts.get(endpoint.host) if endpoint.host is not None else None
        return [Scope(endpoint=endpoint, host=host, unit=None)]
    return [
        Scope(endpoint=endpoint, host=config.hosts.get(unit.host), unit=unit, index=index)
        for index, unit in enumerate(endpoint.units)
    ]


def builtin_facts(
    scope: Scope, *, state: str, trigger: ProbeResult | None, event: UnitSignal | None = None
) -> dict[str, FactValue]:
    """The built-in facts of one scope (only those with a value); `event.*` only in the scope of
    the unit the event is about."""
    endpoint = scope.endpoint
    found: dict[str, FactValue | None] = {
        "endpoint.name": endpoint.name,
        "endpoint.kind": endpoint.kind,
        "endpoint.state": str(state),
        "endpoint.url": endpoint.url,
        "unit.count": len(endpoint.units),
    }
    if trigger is not None:
        found["probe.reason"] = trigger.reason
        found["probe.check"] = trigger.check
        found["probe.outcome"] = str(trigger.outcome)
    unit = scope.unit
    if (
        event is not None
        and unit is not None
        and (unit.host, unit.unit) == (event.host, event.unit)
    ):
        found["event.kind"] = event.kind
        found["event.result"] = event.result or None
        found["event.exit_status"] = event.exit_status
        found["event.n_restarts"] = event.n_restarts
        found["event.text"] = "\n".join(event.lines)
        found["event.source"] = event.source
    if scope.unit is not None:
        found["unit.name"] = scope.unit.unit
        found["unit.host"] = scope.unit.host
        found["unit.container"] = scope.unit.container
        found["unit.known_good"] = scope.unit.known_good
        found["unit.index"] = scope.index
    if scope.host is not None:
        found["host.name"] = scope.host.name
        found["host.address"] = scope.host.address
        found["host.local"] = scope.host.local
    return {name: value for name, value in found.items() if value is not None}

"""The action seam: a small async function with a typed params model.

The runner calls an action once per target (see `Target`); the action runs its commands
through `ctx.executor` (quoted argument lists, `sudo=True` for privileged ones, `mutating=True`
for anything that changes the host) and returns what happened. In a dry run the executor only
records mutating commands, so the same code prints the plan.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.clock import Clock
from supervisor.core.events import ProbeResult
from supervisor.execute.base import CommandResult, Executor
from supervisor.execute.shape import Shape
from supervisor.playbook.evidence.base import FactValue


class Target(StrEnum):
    """Whom one rule step acts on."""

    UNIT = "unit"  #: once per matched unit (ctx.unit and ctx.host set)
    UNITS = "units"  #: once, over every unit of the endpoint in restart order (ctx.units)
    HOST = "host"  #: once per distinct host of the matched units
    HOSTS = "hosts"  #: once per distinct host of the endpoint
    ENDPOINT = "endpoint"  #: once (ctx.host is None unless the endpoint has one host)


@dataclass(frozen=True, kw_only=True)
class ActionContext:
    endpoint: Endpoint
    host: Host | None
    unit: UnitRef | None
    units: tuple[tuple[Host, UnitRef], ...]  #: the endpoint's units in restart order
    executor: Executor
    timeout: timedelta  #: per command
    facts: Mapping[str, FactValue]  #: this scope's facts, "EVIDENCE_ID.FACT" -> value
    dry_run: bool
    clock: Clock
    probe: Callable[[], Awaitable[ProbeResult]]  #: the endpoint's real check, now


@dataclass(frozen=True, kw_only=True)
class ActionOutcome:
    ok: bool
    summary: str  #: one plain line: what was done, or why it stopped
    commands: tuple[CommandResult, ...] = ()
    needs_person: str = ""  #: set when a person must act (ask_person, a guard refused)


class ActionParams(BaseModel):
    """Base of every action's params model: frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class NoParams(ActionParams):
    pass


@dataclass(frozen=True, kw_only=True)
class ActionScope:
    """Whom one step would act on, without running anything: what `Action.privileged` reads
    (the same `host`/`unit`/`units` an `ActionContext` of that call would hold)."""

    endpoint: Endpoint
    host: Host | None
    unit: UnitRef | None
    units: tuple[tuple[Host, UnitRef], ...]


#: One command an action would run as root (`sudo -n`), on the host it names.
Privileged = tuple[Host, Shape]


P = TypeVar("P", bound=ActionParams)


@dataclass(frozen=True, kw_only=True)
class Action(Generic[P]):
    name: str
    params: type[P]
    run: Callable[[ActionContext, P], Awaitable[ActionOutcome]]
    target: Target  #: the default target; a rule step may name another
    doc: str  #: one line for playbooks/README.md's action table
    targets: frozenset[Target] = frozenset(Target)  #: targets this action accepts
    #: the commands it would run as root for one call (for sudoers and `doctor`); none by default
    privileged: Callable[[ActionScope, P], tuple[Privileged, ...]] = lambda scope, params: ()

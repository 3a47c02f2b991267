"""The evidence seam: a collector runs read-only commands (or an HTTP GET) for one scope and
returns named facts. Conditions in rules refer to them as `EVIDENCE_ID.FACT`.

A scope is one unit of an endpoint (its host, its container), or the endpoint itself when it has
no units. Collectors never raise: a collector that could not run returns `error` and no facts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from supervisor.config.supervised import Endpoint, Host, UnitRef
from supervisor.core.clock import Clock, SystemClock
from supervisor.core.httpclient import HttpClient
from supervisor.execute.base import CommandResult, Executor
from supervisor.execute.shape import Shape

#: A fact's value: scalars, or a tuple of scalars (pids, commands, drop-in paths ...).
Scalar = str | int | float | bool | None
FactValue = Scalar | tuple[str | int | float | bool, ...]


@dataclass(frozen=True, kw_only=True)
class Scope:
    """What one evaluation is about: a unit on its host, or an endpoint without units."""

    endpoint: Endpoint
    host: Host | None  #: the unit's host, else the endpoint's `host`, else None
    unit: UnitRef | None
    index: int = 0  #: the unit's position in the endpoint's restart order

    @property
    def label(self) -> str:
        """`vllm-ds4-head.service@spark1`, or the endpoint name."""
        if self.unit is not None:
            return f"{self.unit.unit}@{self.unit.host}"
        return self.endpoint.name


@dataclass(frozen=True, kw_only=True)
class CollectContext:
    scope: Scope
    executor: Executor
    timeout: timedelta  #: per command
    http: HttpClient  #: for HTTP collectors (the endpoint's /metrics)
    #: when the endpoint last passed a check (hub time); None when it never did as far as the
    #: daemon knows. The journal reads only what was logged since (see `journal`).
    last_ok_at: datetime | None = None
    clock: Clock = field(default_factory=SystemClock)  #: for collectors that sample over time
    pause: Callable[[float], Awaitable[None]] = asyncio.sleep  #: wait N seconds between samples


@dataclass(frozen=True, kw_only=True)
class CollectedEvidence:
    collector: str
    facts: Mapping[str, FactValue] = field(default_factory=dict)
    commands: tuple[CommandResult, ...] = ()  #: what was run, for the timeline
    error: str = ""  #: why it has no facts (cannot connect, command failed, ...)


class CollectorParams(BaseModel):
    """Base of every collector's params model: frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class NoEvidenceParams(CollectorParams):
    pass


P = TypeVar("P", bound=CollectorParams)


@dataclass(frozen=True, kw_only=True)
class Collector(Generic[P]):
    name: str
    params: type[P]
    run: Callable[[CollectContext, P], Awaitable[CollectedEvidence]]
    doc: str  #: one line for playbooks/README.md's collector table
    facts: Mapping[str, str]  #: fact name -> meaning; rules may only name these
    needs_host: bool = True  #: False for collectors that only talk HTTP to the endpoint
    #: why it does not apply to a scope with these params ('' when it does): a launchd collector
    #: on a systemd host, a container's file where there is no container
    applies: Callable[[Scope, CollectorParams], str] = field(default=lambda _s, _p: "")
    #: the commands it runs as root in one scope, on the scope's host (for sudoers and `doctor`)
    privileged: Callable[[Scope, P], tuple[Shape, ...]] = lambda scope, params: ()

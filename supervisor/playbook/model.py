"""A playbook rule as typed, frozen models: what the engine reads once a rule file is loaded.

The loader (`supervisor.playbook.loader`) builds these from YAML and checks everything that needs
the collector and action registries; the models themselves hold no registry knowledge. Evidence
and step `params` stay as written (placeholders unresolved): they are validated against the
collector's / action's params model at load time and resolved per scope at run time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from supervisor.config.fields import Count, Flag, PositiveDuration, Text
from supervisor.config.supervised import EndpointKind
from supervisor.judge.machine import State
from supervisor.playbook.actions.base import Target

RULE_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
EVIDENCE_ID = re.compile(r"[a-z][a-z0-9_]*")
BUILTIN_NAMESPACES = ("endpoint", "probe", "event", "unit", "host")
"""Fact namespaces every scope has; evidence ids may not take these names."""

#: A scalar or a list of scalars, as written in a rule (`value:`) or a fixture.
Scalar = str | int | float | bool | None
LeafValue = Scalar | tuple[str | int | float | bool, ...]
#: Params as written in YAML: checked against a params model by the loader.
RawParams = Mapping[str, object]


class Mode(StrEnum):
    """What happens once a rule has matched."""

    AUTO = "auto"  #: run the steps now
    CONFIRM = "confirm"  #: ask a person first (Telegram), then run them
    MANUAL = "manual"  #: only tell a person: diagnosis and plan, no action


class Severity(StrEnum):
    """How bad the diagnosed failure is (for notifications and listings)."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Leaf(_Frozen):
    """`{fact: status.exec_main_status, op: in, value: [127, 203]}`."""

    fact: str
    op: str
    value: LeafValue = None
    _pattern: re.Pattern[str] | None = PrivateAttr(default=None)

    def model_post_init(self, context: object, /) -> None:
        if isinstance(self.value, str) and self.op in REGEX_OPERATORS:
            self._pattern = re.compile(self.value)  # the loader has already checked it compiles

    @property
    def pattern(self) -> re.Pattern[str] | None:
        """The compiled `value` of a regex operator (compiled once, when the rule loads)."""
        return self._pattern


REGEX_OPERATORS = frozenset({"regex", "not_regex", "all_match", "any_match"})


class All(_Frozen):
    """Every condition holds (true when empty)."""

    all: tuple[Condition, ...]


class Any(_Frozen):
    """At least one condition holds (false when empty)."""

    any: tuple[Condition, ...]


class Not(_Frozen):
    """The condition does not hold."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    not_: Condition = Field(validation_alias="not", serialization_alias="not")


Condition = All | Any | Not | Leaf
All.model_rebuild()
Any.model_rebuild()
Not.model_rebuild()


class AppliesTo(_Frozen):
    kinds: tuple[EndpointKind, ...] | None = Field(
        default=None, description="endpoint kinds the rule applies to"
    )
    endpoints: tuple[Text, ...] | None = Field(
        default=None, description="endpoint names the rule applies to"
    )
    states: tuple[State, ...] = Field(
        default=(State.DOWN, State.DEGRADED),
        description="endpoint states that start a diagnosis with this rule",
    )


class EvidenceItem(_Frozen):
    id: str = Field(description="the name conditions use: `ID.FACT`")
    collect: str = Field(description="the collector that gathers it")
    params: RawParams = Field(
        default_factory=dict, description="the collector's params; text may hold placeholders"
    )


class Step(_Frozen):
    action: str = Field(description="the action to run")
    on: Target | None = Field(default=None, description="whom it acts on (default: the action's)")
    params: RawParams = Field(
        default_factory=dict, description="the action's params; text may hold placeholders"
    )


class Verify(_Frozen):
    within: PositiveDuration | None = Field(
        default=None,
        description="after the steps, a real completion must pass within this",
    )


class Budget(_Frozen):
    attempts: Count = Field(default=3, description="remediation attempts allowed per window")
    window: PositiveDuration = Field(
        default=timedelta(hours=1), description="the window the attempts are counted in"
    )


class Rule(_Frozen):
    id: str = Field(description="unique rule id: lowercase letters, digits and `-`")
    title: Text = Field(description="one line: the diagnosis in plain words")
    severity: Severity = Field(description="`critical`, `warning` or `info`")
    description: str = Field(default="", description="longer text for people")
    applies_to: AppliesTo = Field(default=AppliesTo(), description="which endpoints it covers")
    priority: Annotated[int, Field(strict=True)] = Field(
        default=0, description="higher is tried first; ties by id; the first match wins"
    )
    evidence: tuple[EvidenceItem, ...] = Field(
        default=(), description="what to gather, in order, for every unit of the endpoint"
    )
    when: Condition = Field(description="the condition tree over facts that proves the diagnosis")
    actions: tuple[Step, ...] = Field(default=(), description="the repair, step by step")
    verify: Verify = Field(default=Verify(), description="how the repair is proven")
    mode: Mode = Field(description="`auto`, `confirm` (ask a person first) or `manual`")
    runbook: Text | None = Field(
        default=None, description="a Markdown page for people, relative to the repository"
    )
    budget: Budget = Field(default=Budget(), description="remediation attempts per window")
    settle: Flag = Field(
        default=True,
        description="wait for a restart systemd or launchd is about to make before this rule "
        "is tried, and read the latest attempt (`false`: the evidence as it is now)",
    )
    source: str = Field(default="", description="the file the rule came from")

    def applies(self, *, endpoint: str, kind: str, state: str) -> str:
        """Why the rule does not apply to this endpoint now; empty when it does."""
        scope = self.applies_to
        if scope.kinds is not None and kind not in scope.kinds:
            return f"applies to kinds {', '.join(scope.kinds)}, not {kind}"
        if scope.endpoints is not None and endpoint not in scope.endpoints:
            return f"applies to endpoints {', '.join(scope.endpoints)}, not {endpoint}"
        if state not in scope.states:
            return f"applies in states {', '.join(scope.states)}, not {state}"
        return ""

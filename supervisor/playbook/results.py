"""What a diagnosis found: every rule tried, every collector run, and the rule that matched.

All of it goes into the incident timeline, so "why didn't rule X match?" is answered by a
query: each evaluated scope keeps its facts, its condition trace and its evidence errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from supervisor.config.supervised import Host, UnitRef
from supervisor.playbook.conditions import Trace, explain, first_failure
from supervisor.playbook.evidence.base import CollectedEvidence, Scope
from supervisor.playbook.evidence.restarts import Restart
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import Rule


@dataclass(frozen=True, kw_only=True)
class EvidenceRun:
    """One collector run (a cached result is not run, nor recorded, twice)."""

    evidence_id: str  #: the id of the first evidence item that asked for it
    collector: str
    scope: str  #: `vllm-ds4-head.service@spark1`, or the endpoint name
    host: str | None
    params: Mapping[str, object]  #: as the collector received them (placeholders filled)
    evidence: CollectedEvidence


@dataclass(frozen=True, kw_only=True)
class ScopeResult:
    """One rule evaluated in one scope."""

    scope: Scope
    matched: bool
    facts: Facts  #: built-in facts, then each evidence item's
    trace: Trace

    @property
    def failure(self) -> str:
        """The first condition that does not hold, in plain words (empty when it matched)."""
        return first_failure(self.trace)

    @property
    def evidence_errors(self) -> Mapping[str, str]:
        """Evidence id -> why it has no facts here."""
        return self.facts.errors


@dataclass(frozen=True, kw_only=True)
class RuleEvaluation:
    rule_id: str
    skipped: str = ""  #: why the rule does not apply (kind, endpoint, state); then no scopes
    scopes: tuple[ScopeResult, ...] = ()

    @property
    def matched(self) -> bool:
        return any(result.matched for result in self.scopes)

    def lines(self) -> list[str]:
        """`rule ghost-execstart: no` and, per scope, its trace."""
        if self.skipped:
            return [f"rule {self.rule_id}: skipped ({self.skipped})"]
        lines = [f"rule {self.rule_id}: {'matched' if self.matched else 'no match'}"]
        for result in self.scopes:
            lines.append(f"  {result.scope.label}: {'yes' if result.matched else 'no'}")
            lines.extend(explain(result.trace, "    "))
        return lines


@dataclass(frozen=True, kw_only=True)
class RuleMatch:
    rule: Rule
    scopes: tuple[ScopeResult, ...]  #: the scopes it matched in, in restart order

    @property
    def units(self) -> tuple[UnitRef, ...]:
        """The matched units (what `on: unit` steps act on)."""
        return tuple(result.scope.unit for result in self.scopes if result.scope.unit)

    @property
    def hosts(self) -> tuple[Host, ...]:
        """The distinct hosts of the matched scopes, in order (what `on: host` acts on)."""
        found = {r.scope.host.name: r.scope.host for r in self.scopes if r.scope.host}
        return tuple(found.values())


@dataclass(frozen=True, kw_only=True)
class DiagnosisResult:
    endpoint: str
    state: str
    matched: RuleMatch | None
    evaluations: tuple[RuleEvaluation, ...]  #: every rule considered, in the order tried
    evidence: tuple[EvidenceRun, ...]  #: every collector run, in order
    restarts: tuple[Restart, ...] = ()  #: the restarts it waited for before reading the units

    def lines(self) -> list[str]:
        """The whole diagnosis for people: the verdict, the restarts it waited for, then every
        rule tried and why."""
        if self.matched is None:
            head = f"{self.endpoint} ({self.state}): no rule matched"
        else:
            where = ", ".join(result.scope.label for result in self.matched.scopes)
            head = f"{self.endpoint} ({self.state}): {self.matched.rule.id} matched on {where}"
        lines = [head, *(restart.line() for restart in self.restarts)]
        for evaluation in self.evaluations:
            lines.extend(evaluation.lines())
        return lines

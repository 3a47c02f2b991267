"""The matcher shared by a live diagnosis and `rules test`: rules in order, scope by scope.

For each rule that applies (kind, endpoint, state), in priority order, and for each scope, the
rule's evidence items are gathered in order (each item's params filled from the facts so far),
then `when` is evaluated. The first rule that matches in at least one scope wins; nothing after
it is tried. Where the evidence comes from is the caller's `Gather`: collectors over SSH for a
diagnosis, a fixture's recorded facts for `rules test`.

Settling (a live diagnosis only): before the first rule that applies and does not say
`settle: false`, the caller's `Settle` waits for the restart systemd or launchd is about to make
(`supervisor.playbook.evidence.restarts`) and answers the probe failure and unit event to read
from then on (the latest); the rules tried before it read the evidence as it was.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from supervisor.core.events import ProbeResult, UnitSignal
from supervisor.playbook.conditions import evaluate
from supervisor.playbook.evidence.base import CollectedEvidence, Collector, CollectorParams, Scope
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import EvidenceItem, Rule
from supervisor.playbook.params import ParamsError, resolve_params
from supervisor.playbook.registries import Collectors
from supervisor.playbook.results import RuleEvaluation, RuleMatch, ScopeResult
from supervisor.playbook.scopes import builtin_facts

#: Gathers one evidence item in one scope with checked, filled-in params.
Gather = Callable[
    [EvidenceItem, Collector[Any], Scope, CollectorParams], Awaitable[CollectedEvidence]
]


@dataclass(frozen=True, kw_only=True)
class Latest:
    """What a diagnosis reads after it settled: the latest failed probe and unit death."""

    trigger: ProbeResult | None
    event: UnitSignal | None


#: Waits for the restarts about to happen; the latest trigger and event once they are known.
Settle = Callable[[], Awaitable[Latest]]


async def match_rules(
    rules: Sequence[Rule],
    scopes: Sequence[Scope],
    *,
    state: str,
    trigger: ProbeResult | None,
    collectors: Collectors,
    gather: Gather,
    event: UnitSignal | None = None,
    settle: Settle | None = None,
) -> tuple[RuleMatch | None, tuple[RuleEvaluation, ...]]:
    """(the first rule that matched, every rule considered up to it)."""
    evaluations: list[RuleEvaluation] = []
    endpoint = scopes[0].endpoint if scopes else None
    for rule in rules:
        applies = endpoint is None or not rule.applies(
            endpoint=endpoint.name, kind=endpoint.kind, state=state
        )
        if settle is not None and rule.settle and applies:
            latest = await settle()
            settle = None  # once per diagnosis
            trigger, event = latest.trigger, latest.event
        evaluation = await evaluate_rule(
            rule,
            scopes,
            state=state,
            trigger=trigger,
            collectors=collectors,
            gather=gather,
            event=event,
        )
        evaluations.append(evaluation)
        if evaluation.matched:
            matched = tuple(result for result in evaluation.scopes if result.matched)
            return RuleMatch(rule=rule, scopes=matched), tuple(evaluations)
    return None, tuple(evaluations)


async def evaluate_rule(
    rule: Rule,
    scopes: Sequence[Scope],
    *,
    state: str,
    trigger: ProbeResult | None,
    collectors: Collectors,
    gather: Gather,
    event: UnitSignal | None = None,
) -> RuleEvaluation:
    """One rule in every scope (or why it does not apply)."""
    endpoint = scopes[0].endpoint if scopes else None
    if endpoint is not None:
        skipped = rule.applies(endpoint=endpoint.name, kind=endpoint.kind, state=state)
        if skipped:
            return RuleEvaluation(rule_id=rule.id, skipped=skipped)
    results = []
    for scope in scopes:
        facts = Facts(values=builtin_facts(scope, state=state, trigger=trigger, event=event))
        for item in rule.evidence:
            facts = await _gather_item(item, scope, facts, collectors, gather)
        trace = evaluate(rule.when, facts)
        results.append(ScopeResult(scope=scope, matched=trace.passed, facts=facts, trace=trace))
    return RuleEvaluation(rule_id=rule.id, scopes=tuple(results))


async def _gather_item(
    item: EvidenceItem, scope: Scope, facts: Facts, collectors: Collectors, gather: Gather
) -> Facts:
    collector = collectors.get(item.collect)
    if collector is None:
        return facts.with_evidence(item.id, {}, f"unknown collector {item.collect!r}")
    try:
        params = resolve_params(collector.params, item.params, facts)
    except ParamsError as exc:
        return facts.with_evidence(item.id, {}, f"{collector.name}: {exc}")
    evidence = await gather(item, collector, scope, params)
    error = f"{collector.name}: {evidence.error}" if evidence.error else ""
    return facts.with_evidence(item.id, evidence.facts, error)

"""`rules test`: replay recorded facts against the real matcher, as `promtool test rules` does.

No collector runs: each case's facts stand in for the evidence, and an evidence id the case does
not give is missing. One line per case (`ok  NAME -> RULE`, or `FAIL  NAME: expected A, got B`
followed by why the expected rule did not match, scope by scope).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supervisor.config.models import FleetConfig
from supervisor.config.supervised import Endpoint, Host
from supervisor.core.events import ProbeResult, Tier
from supervisor.playbook.evidence.base import (
    CollectedEvidence,
    Collector,
    CollectorParams,
    FactValue,
    Scope,
)
from supervisor.playbook.fixturefile import Case, LoadedFixture, load_fixture
from supervisor.playbook.loader import Playbook, load_rule_files
from supervisor.playbook.matching import evaluate_rule, match_rules
from supervisor.playbook.model import EvidenceItem
from supervisor.playbook.problems import Problems
from supervisor.playbook.registries import (
    Actions,
    Collectors,
    actions_or_default,
    collectors_or_default,
)
from supervisor.playbook.scopes import scopes_of

NOT_GIVEN = "not given by the fixture"
_AT = datetime(2000, 1, 1, tzinfo=UTC)  # probe time: no fact depends on it

PerUnit = Sequence[Mapping[str, Mapping[str, FactValue]]]


@dataclass(frozen=True)
class CaseResult:
    file: str
    name: str
    expected: str | None
    got: str | None
    explanation: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.expected == self.got

    def lines(self) -> list[str]:
        if self.passed:
            return [f"ok  {self.name} -> {self.got or 'none'}"]
        head = f"FAIL  {self.name}: expected {self.expected or 'none'}, got {self.got or 'none'}"
        return [head, *(f"    {line}" for line in self.explanation)]


@dataclass(frozen=True)
class FixtureReport:
    results: tuple[CaseResult, ...] = ()
    problems: tuple[str, ...] = ()  #: broken fixture files (and rule files they name)

    @property
    def exit_code(self) -> int:
        """0 every case passed, 1 a case failed, 2 a fixture file is broken."""
        if self.problems:
            return 2
        return 0 if all(result.passed for result in self.results) else 1

    def lines(self) -> list[str]:
        lines = [line for result in self.results for line in result.lines()]
        lines.extend(self.problems)
        failed = sum(not result.passed for result in self.results)
        summary = f"{len(self.results) - failed} passed, {failed} failed"
        if self.problems:
            summary += f", {len(self.problems)} problems in fixture files"
        return [*lines, summary]


def run_fixtures(
    paths: Iterable[Path],
    playbook: Playbook,
    *,
    collectors: Collectors | None = None,
    actions: Actions | None = None,
) -> FixtureReport:
    """Run every case of every fixture file against `playbook` (or the fixture's own
    `rule_files`). Reads the files, then runs the matcher in an event loop of its own: call it
    from outside a running loop (inside one, use `prepare_fixture` and `run_case`)."""
    found_collectors = collectors_or_default(collectors)
    problems: list[str] = []
    ready: list[tuple[LoadedFixture, Playbook]] = []
    for path in paths:
        loaded, rules, found = prepare_fixture(
            path, playbook, collectors=found_collectors, actions=actions
        )
        problems.extend(found)
        if loaded.fixture is not None and not found:
            ready.append((loaded, rules))
    results = asyncio.run(_run_all(ready, found_collectors))
    return FixtureReport(results=results, problems=tuple(problems))


def prepare_fixture(
    path: Path, playbook: Playbook, *, collectors: Collectors, actions: Actions | None = None
) -> tuple[LoadedFixture, Playbook, list[str]]:
    """The fixture, the rules its cases run against, and what is broken (empty when none)."""
    loaded = load_fixture(path)
    if loaded.fixture is None:
        return loaded, playbook, [str(problem) for problem in loaded.problems]
    rules = playbook
    if loaded.fixture.rule_files is not None:
        files = [Path(os.path.normpath(path.parent / name)) for name in loaded.fixture.rule_files]
        rules = load_rule_files(files, collectors=collectors, actions=actions_or_default(actions))
        if rules.errors:
            return loaded, rules, [str(problem) for problem in rules.errors]
    return loaded, rules, unknown_facts(loaded, rules, collectors)


async def _run_all(
    ready: Sequence[tuple[LoadedFixture, Playbook]], collectors: Collectors
) -> tuple[CaseResult, ...]:
    results: list[CaseResult] = []
    for loaded, rules in ready:
        cases = loaded.fixture.cases if loaded.fixture is not None else ()
        for case, facts in zip(cases, loaded.facts, strict=True):
            results.append(await run_case(case, facts, rules, collectors, str(loaded.path)))
    return tuple(results)


async def run_case(
    case: Case, facts: PerUnit, playbook: Playbook, collectors: Collectors, file: str = ""
) -> CaseResult:
    """One case against the real matcher, with its facts standing in for the collectors."""
    scopes = scopes_of(*_fleet(case))
    trigger = _trigger(case)
    state = case.endpoint.state

    async def gather(
        item: EvidenceItem, collector: Collector[Any], scope: Scope, params: CollectorParams
    ) -> CollectedEvidence:
        given = facts[scope.index] if scope.index < len(facts) else {}
        if item.id not in given:
            return CollectedEvidence(collector=collector.name, error=NOT_GIVEN)
        return CollectedEvidence(collector=collector.name, facts=given[item.id])

    matched, _ = await match_rules(
        playbook.rules, scopes, state=state, trigger=trigger, collectors=collectors, gather=gather
    )
    got = matched.rule.id if matched is not None else None
    result = CaseResult(file=file, name=case.name, expected=case.expected, got=got)
    if result.passed:
        return result
    explanation: list[str] = []
    for rule_id in dict.fromkeys(r for r in (case.expected, got) if r is not None):
        rule = playbook.by_id.get(rule_id)
        if rule is None:
            explanation.extend(_not_loaded(rule_id, playbook))
            continue
        evaluation = await evaluate_rule(
            rule, scopes, state=state, trigger=trigger, collectors=collectors, gather=gather
        )
        explanation.extend(evaluation.lines())
    return CaseResult(file, case.name, case.expected, got, tuple(explanation))


def unknown_facts(loaded: LoadedFixture, playbook: Playbook, collectors: Collectors) -> list[str]:
    """Facts a fixture gives that no rule could gather (a typo would silently be missing)."""
    declared: dict[str, set[str]] = {}
    for rule in playbook.rules:
        for item in rule.evidence:
            collector = collectors.get(item.collect)
            declared.setdefault(item.id, set()).update(collector.facts if collector else ())
    problems = Problems(str(loaded.path), loaded.lines)
    for index, per_case in enumerate(loaded.facts):
        for unit, per_unit in enumerate(per_case):
            for evidence, facts in per_unit.items():
                at = ("cases", index, "facts", unit, evidence)
                if evidence not in declared:
                    known = ", ".join(sorted(declared)) or "none"
                    problems.at_key(
                        at, f"no rule gathers evidence {evidence!r} (evidence: {known})"
                    )
                    continue
                for name in facts:
                    if name not in declared[evidence]:
                        known = ", ".join(sorted(declared[evidence]))
                        problems.at_key(
                            (*at, name), f"unknown fact (the rules' {evidence} has: {known})"
                        )
    return [str(problem) for problem in problems.found]


def _fleet(case: Case) -> tuple[Endpoint, FleetConfig]:
    spec = case.endpoint
    endpoint = Endpoint(name=spec.name, kind=spec.kind, url=spec.url, units=case.units)
    hosts = {
        name: Host(name=name, address=given.address, local=given.local)
        for name, given in case.hosts.items()
    }
    for unit in case.units:
        hosts.setdefault(unit.host, Host(name=unit.host))
    config = FleetConfig(source=Path("fixture"), hosts=hosts, endpoints={spec.name: endpoint})
    return endpoint, config


def _trigger(case: Case) -> ProbeResult | None:
    if case.probe is None:
        return None
    probe = case.probe
    return ProbeResult(
        endpoint=case.endpoint.name,
        tier=Tier.DEEP,
        check=probe.check,
        outcome=probe.outcome,
        reason=probe.reason,
        at=_AT,
        latency_s=0.0,
    )


def _not_loaded(rule_id: str, playbook: Playbook) -> list[str]:
    problems = [str(p) for p in playbook.errors if p.rule_id == rule_id]
    if problems:
        return [f"rule {rule_id} is disabled:", *(f"  {line}" for line in problems)]
    known = ", ".join(rule.id for rule in playbook.rules) or "none"
    unplaced = [f"  {problem}" for problem in playbook.errors if problem.rule_id is None]
    return [f"no rule {rule_id!r} in the playbook (rules: {known})", *unplaced]

"""A `rules test` fixture file: recorded facts per case and the rule each case must match.

```yaml
rule_files: [../ghost-execstart.yaml]     # optional; default: the whole playbook folder
cases:
  - name: exit 127 from a missing launch script
    endpoint: {name: ds4, kind: openai, state: down}
    probe: {reason: connection refused}
    units:
      - {unit: vllm-ds4-head.service, host: spark1, container: vllm_ds4, known_good: /w/head.sh}
    facts:                                  # per unit, in order: evidence id -> facts
      - status: {exec_main_status: 127, result: exit-code}
        script: {exists: false}
    expect: ghost-execstart                 # a rule id, or none
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from supervisor.config.errors import ConfigError, Loc
from supervisor.config.fields import Flag, Text
from supervisor.config.messages import render_value
from supervisor.config.supervised import EndpointKind, UnitRef
from supervisor.config.yamlsource import LineMap, parse_yaml
from supervisor.core.events import ProbeOutcome
from supervisor.judge.machine import State
from supervisor.playbook.evidence.base import FactValue
from supervisor.playbook.problems import Problems, RuleProblem

MAX_BYTES = 10_000_000
_TOP = "a mapping with cases (and optionally rule_files)"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EndpointCase(_Frozen):
    name: Text = "fixture"
    kind: EndpointKind = "openai"
    state: State = State.DOWN
    url: Text = "http://127.0.0.1:8000"


class ProbeCase(_Frozen):
    reason: str = ""
    check: str = "completion"
    outcome: ProbeOutcome = ProbeOutcome.FAIL


class HostCase(_Frozen):
    address: Text | None = None
    local: Flag = False


class Case(_Frozen):
    name: Text
    endpoint: EndpointCase = EndpointCase()
    probe: ProbeCase | None = None
    units: tuple[UnitRef, ...] = ()
    hosts: Mapping[str, HostCase] = Field(default_factory=dict)
    facts: tuple[Mapping[str, Mapping[str, Any]], ...] = ()
    expect: Text | None

    @property
    def expected(self) -> str | None:
        """The rule id expected to match; None for `expect: none` (or null)."""
        return None if self.expect in (None, "none") else self.expect


class FixtureFile(_Frozen):
    rule_files: tuple[Text, ...] | None = None
    cases: tuple[Case, ...]


@dataclass(frozen=True)
class LoadedFixture:
    path: Path
    fixture: FixtureFile | None  #: None when the file is broken
    problems: tuple[RuleProblem, ...] = ()
    #: per case, per unit: evidence id -> fact -> value (lists as tuples)
    facts: tuple[tuple[Mapping[str, Mapping[str, FactValue]], ...], ...] = ()
    lines: LineMap = field(default_factory=LineMap)


def load_fixture(path: Path) -> LoadedFixture:
    """Read and check one fixture file; never raises."""
    file = str(path)

    def broken(line: int | None, message: str) -> LoadedFixture:
        return LoadedFixture(path, None, (RuleProblem(file, line, None, "", message),))

    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_BYTES + 1)
        text = raw.decode("utf-8-sig")
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return broken(None, f"cannot read: {reason}")
    if len(raw) > MAX_BYTES:
        return broken(None, f"larger than {MAX_BYTES // 1_000_000} MB, not a fixture file")
    try:
        document = parse_yaml(text, file)
    except ConfigError as exc:
        found = (RuleProblem(i.file, i.line, None, i.path, i.message) for i in exc.issues)
        return LoadedFixture(path, None, tuple(found))
    if document.data is None:
        return broken(None, f"the file is empty (expected {_TOP})")
    if not isinstance(document.data, dict):
        return broken(
            document.lines.line_of(()), f"expected {_TOP}, got {render_value(document.data)}"
        )
    problems = Problems(file, document.lines)
    for issue in document.issues:
        problems.found.append(RuleProblem(file, issue.line, None, issue.path, issue.message))
    try:
        fixture = FixtureFile.model_validate(document.data)
    except ValidationError as exc:
        problems.validation(exc, FixtureFile, ())
        return LoadedFixture(path, None, tuple(sorted(problems.found, key=_line)))
    if not fixture.cases:
        problems.at(("cases",), "expected at least one case")
    facts = tuple(_case_facts(i, case, problems) for i, case in enumerate(fixture.cases))
    if problems.found:
        return LoadedFixture(path, None, tuple(sorted(problems.found, key=_line)))
    return LoadedFixture(path, fixture, (), facts, document.lines)


def _case_facts(
    index: int, case: Case, problems: Problems
) -> tuple[Mapping[str, Mapping[str, FactValue]], ...]:
    at: Loc = ("cases", index)
    scopes = max(1, len(case.units))
    if len(case.facts) > scopes:
        what = f"{len(case.units)} units" if case.units else "an endpoint without units"
        problems.at((*at, "facts"), f"{len(case.facts)} entries for {what} (one per unit)")
    return tuple(
        {
            evidence: {
                name: _fact(value, (*at, "facts", unit, evidence, name), problems)
                for name, value in facts.items()
            }
            for evidence, facts in per_unit.items()
        }
        for unit, per_unit in enumerate(case.facts)
    )


def _fact(value: object, loc: Loc, problems: Problems) -> FactValue:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float | bool) for v in value):
        return tuple(value)
    problems.at(loc, f"expected a value or a list of values, got {render_value(value)}")
    return None


def _line(problem: RuleProblem) -> int:
    return problem.line or 0

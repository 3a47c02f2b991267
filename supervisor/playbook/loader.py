"""The playbook folder -> valid rules plus located problems. Never raises, whatever the bytes.

One rule per `*.yaml` / `*.yml` file. A broken file is reported (file, line, rule id, field
path) and skipped; the others load. Of two files with the same rule id the first (by file name)
wins and the second is reported. A missing runbook is a warning: the rule still loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from supervisor.config.errors import ConfigError
from supervisor.config.messages import render_value
from supervisor.config.yamlsource import LineMap, parse_yaml
from supervisor.playbook.checks import check_evidence, check_steps, fact_problem
from supervisor.playbook.condparse import FactCheck, parse_condition
from supervisor.playbook.model import RULE_ID, All, EvidenceItem, Rule, Step
from supervisor.playbook.problems import Level, Problems, RuleProblem
from supervisor.playbook.registries import (
    Actions,
    Collectors,
    actions_or_default,
    collectors_or_default,
)

MAX_BYTES = 1_000_000
SUFFIXES = (".yaml", ".yml")
_RULE = "a rule: a mapping with id, title, severity, evidence, when, actions and mode"

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Playbook:
    rules: tuple[Rule, ...] = ()  #: the valid rules, highest priority first, then by id
    problems: tuple[RuleProblem, ...] = ()
    folder: Path | None = None
    unreadable: bool = False  #: the folder itself could not be read: no rule file was looked at

    @property
    def by_id(self) -> Mapping[str, Rule]:
        return {rule.id: rule for rule in self.rules}

    @property
    def errors(self) -> tuple[RuleProblem, ...]:
        """Problems that disabled a rule (or a whole file)."""
        return tuple(p for p in self.problems if p.level is Level.ERROR)

    @property
    def disabled(self) -> tuple[str, ...]:
        """The rule files whose errors disabled them (in file order)."""
        if self.unreadable:
            return ()
        loaded = {rule.source for rule in self.rules}
        return tuple(dict.fromkeys(p.file for p in self.errors if p.file not in loaded))

    def lines(self) -> list[str]:
        """Every problem as one line, for `fleet-supervisor check`."""
        return [str(problem) for problem in self.problems]


def load_playbook(
    folder: Path, *, collectors: Collectors | None = None, actions: Actions | None = None
) -> Playbook:
    """Every rule file in `folder` (not its subfolders), checked against the registries."""
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file())
    except OSError as exc:
        message = f"cannot read the playbook folder: {exc.strerror or exc}"
        problem = RuleProblem(str(folder), None, None, "", message)
        return Playbook(problems=(problem,), unreadable=True)
    playbook = load_rule_files(files, collectors=collectors, actions=actions)
    return Playbook(rules=playbook.rules, problems=playbook.problems, folder=folder)


def check_playbook(
    folder: Path, *, collectors: Collectors | None = None, actions: Actions | None = None
) -> list[str]:
    """The playbook's problems as lines (empty when every rule is valid)."""
    return load_playbook(folder, collectors=collectors, actions=actions).lines()


def load_rule_files(
    files: Iterable[Path], *, collectors: Collectors | None = None, actions: Actions | None = None
) -> Playbook:
    """These rule files, in this order (a later duplicate id is the one skipped)."""
    found_collectors = collectors_or_default(collectors)
    found_actions = actions_or_default(actions)
    rules: dict[str, Rule] = {}
    problems: list[RuleProblem] = []
    for path in files:
        loaded = load_rule_file(path, collectors=found_collectors, actions=found_actions)
        problems.extend(loaded.problems)
        rule = loaded.rule
        if rule is None:
            continue
        if rule.id in rules:
            message = f"duplicate rule id {rule.id!r} (also in {rules[rule.id].source}); skipped"
            line = loaded.lines.line_of(("id",))
            problems.append(RuleProblem(str(path), line, rule.id, "id", message))
            continue
        rules[rule.id] = rule
    ordered = sorted(rules.values(), key=lambda rule: (-rule.priority, rule.id))
    return Playbook(rules=tuple(ordered), problems=tuple(problems))


@dataclass(frozen=True)
class LoadedRule:
    """One rule file: the rule (None when it has errors), its problems, where its keys are."""

    rule: Rule | None
    problems: tuple[RuleProblem, ...] = ()
    lines: LineMap = field(default_factory=LineMap)


def _failed(file: str, line: int | None, message: str) -> LoadedRule:
    return LoadedRule(None, (RuleProblem(file, line, None, "", message),))


def load_rule_file(path: Path, *, collectors: Collectors, actions: Actions) -> LoadedRule:
    """One rule file; a relative `runbook` starts at the folder that holds its folder."""
    file = str(path)
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_BYTES + 1)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return _failed(file, None, f"cannot read: {reason}")
    if len(raw) > MAX_BYTES:
        return _failed(file, None, f"larger than {MAX_BYTES // 1_000_000} MB, not a rule file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        return _failed(file, line, f"not UTF-8 text (byte 0x{raw[exc.start]:02x})")
    base = path.absolute().parent.parent
    return parse_rule(text, file=file, base=base, collectors=collectors, actions=actions)


def parse_rule(
    text: str, *, file: str, base: Path, collectors: Collectors, actions: Actions
) -> LoadedRule:
    """A rule from YAML text; `base` is the folder a relative `runbook` path starts from."""
    try:
        document = parse_yaml(text, file)
    except ConfigError as exc:
        found = (RuleProblem(i.file, i.line, None, i.path, i.message) for i in exc.issues)
        return LoadedRule(None, tuple(found))
    data = document.data
    if data is None:
        return _failed(file, None, f"the file is empty (expected {_RULE})")
    if not isinstance(data, dict):
        return _failed(
            file, document.lines.line_of(()), f"expected {_RULE}, got {render_value(data)}"
        )
    rule_id = data.get("id") if isinstance(data.get("id"), str) else None
    problems = Problems(file, document.lines, rule_id)
    for issue in document.issues:  # duplicate keys
        problems.found.append(RuleProblem(file, issue.line, rule_id, issue.path, issue.message))
    rule = _build(data, problems, base=base, collectors=collectors, actions=actions)
    ordered = tuple(sorted(problems.found, key=lambda p: p.line or 0))
    return LoadedRule(rule if not problems.errors else None, ordered, document.lines)


def _build(
    data: dict[object, object],
    problems: Problems,
    *,
    base: Path,
    collectors: Collectors,
    actions: Actions,
) -> Rule | None:
    if isinstance(data.get("id"), str) and not RULE_ID.fullmatch(str(data["id"])):
        message = "invalid rule id (use lowercase letters, digits and '-', starting with either)"
        problems.at(("id",), message)
    if "source" in data:
        names = ", ".join(sorted(set(Rule.model_fields) - {"source"}))
        problems.at_key(("source",), f"unknown key (expected one of: {names})")
    fields: dict[object, object] = {**data, "source": problems.file}
    evidence = _items(data, "evidence", EvidenceItem, problems)
    steps = _items(data, "actions", Step, problems)
    check_fact: FactCheck | None = None
    if steps is not None:
        fields["actions"] = tuple(step for _, step in steps)
    if evidence is not None:  # else which facts exist is unknown: the type error is enough
        fields["evidence"] = tuple(item for _, item in evidence)
        gathered = check_evidence(evidence, collectors, problems)
        check_steps(steps or [], actions, gathered, collectors, problems)
        check_fact = partial(fact_problem, gathered=gathered, collectors=collectors)
    if "when" in data:
        when = parse_condition(data["when"], ("when",), problems, check_fact)
        fields["when"] = when if when is not None else All(all=())
    try:
        rule = Rule.model_validate(fields)
    except ValidationError as exc:
        problems.validation(exc, Rule, ())
        return None
    _check_runbook(rule, base, problems)
    return rule


def _items(
    data: dict[object, object], key: str, model: type[M], problems: Problems
) -> list[tuple[int, M]] | None:
    """The list at `key` validated item by item (the good ones with their index); None when
    it is not a list (the rule model then reports that)."""
    raw = data.get(key, [])
    if not isinstance(raw, list):
        return None
    good: list[tuple[int, M]] = []
    for index, item in enumerate(raw):
        try:
            good.append((index, model.model_validate(item)))
        except ValidationError as exc:
            problems.validation(exc, model, (key, index))
    return good


def _check_runbook(rule: Rule, base: Path, problems: Problems) -> None:
    if rule.runbook is None:
        return
    path = Path(rule.runbook)
    resolved = path if path.is_absolute() else base / path
    if not resolved.is_file():
        message = f"no such file {str(resolved)!r} (relative paths start at {str(base)!r})"
        problems.at(("runbook",), message, Level.WARNING)

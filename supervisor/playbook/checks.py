"""The checks of one rule that need the registries: collectors, actions, facts, placeholders.

Each check records located problems; none of them raises. They run on the parts of a rule that
passed their own type checks, so one mistake is reported once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from supervisor.config.errors import Loc
from supervisor.playbook.actions.base import Target
from supervisor.playbook.model import (
    BUILTIN_NAMESPACES,
    EVIDENCE_ID,
    EvidenceItem,
    Step,
)
from supervisor.playbook.problems import Problems
from supervisor.playbook.registries import Actions, Collectors
from supervisor.playbook.scopes import BUILTIN_FACTS
from supervisor.playbook.templating import placeholders_in

#: evidence id -> the collector it uses (None when the collector is unknown).
Gathered = Mapping[str, str | None]


def check_evidence(
    items: Sequence[tuple[int, EvidenceItem]], collectors: Collectors, problems: Problems
) -> dict[str, str | None]:
    """Ids, collectors, params and placeholders of the evidence items; returns the valid ids."""
    gathered: dict[str, str | None] = {}
    first_index: dict[str, int] = {}
    every_id = {item.id: index for index, item in reversed(items)}
    for index, item in items:
        at: Loc = ("evidence", index)
        if not EVIDENCE_ID.fullmatch(item.id):
            message = "invalid evidence id (use lowercase letters, digits and '_', "
            problems.at((*at, "id"), message + "starting with a letter)")
        elif item.id in BUILTIN_NAMESPACES:
            names = ", ".join(sorted(BUILTIN_NAMESPACES))
            problems.at((*at, "id"), f"{item.id!r} is a built-in namespace ({names})")
        elif item.id in first_index:
            message = f"duplicate evidence id {item.id!r} (also evidence[{first_index[item.id]}])"
            problems.at((*at, "id"), message)
        collector = collectors.get(item.collect)
        if collector is None:
            known = ", ".join(sorted(collectors)) or "none"
            message = f"unknown collector {item.collect!r} (collectors: {known})"
            problems.at((*at, "collect"), message)
        else:
            try:
                collector.params.model_validate(item.params)
            except ValidationError as exc:
                problems.validation(exc, collector.params, (*at, "params"))
        for loc, name in placeholders_in(item.params, (*at, "params")):
            problem = fact_problem(name, gathered, collectors, later=every_id, this=item.id)
            if problem:
                problems.at(loc, f"placeholder {{{name}}}: {problem}")
        if EVIDENCE_ID.fullmatch(item.id) and item.id not in BUILTIN_NAMESPACES:
            first_index.setdefault(item.id, index)
            gathered.setdefault(item.id, item.collect if collector is not None else None)
    return gathered


def check_steps(
    steps: Sequence[tuple[int, Step]],
    actions: Actions,
    gathered: Gathered,
    collectors: Collectors,
    problems: Problems,
) -> None:
    """Actions exist, accept the target, their params fit, placeholders name known facts."""
    for index, step in steps:
        at: Loc = ("actions", index)
        action = actions.get(step.action)
        if action is None:
            known = ", ".join(sorted(actions)) or "none"
            problems.at((*at, "action"), f"unknown action {step.action!r} (actions: {known})")
        else:
            if step.on is not None and step.on not in action.targets:
                accepted = ", ".join(t.value for t in Target if t in action.targets)
                message = f"{action.name} cannot act on {step.on.value!r} (it acts on: {accepted})"
                problems.at((*at, "on"), message)
            try:
                action.params.model_validate(step.params)
            except ValidationError as exc:
                problems.validation(exc, action.params, (*at, "params"))
        for loc, name in placeholders_in(step.params, (*at, "params")):
            problem = fact_problem(name, gathered, collectors)
            if problem:
                problems.at(loc, f"placeholder {{{name}}}: {problem}")


def fact_problem(
    name: str,
    gathered: Gathered,
    collectors: Collectors,
    *,
    later: Mapping[str, int] | None = None,
    this: str | None = None,
) -> str:
    """Why `name` is not a fact this rule can have (empty when it is).

    `gathered` holds the evidence available at this point; for an evidence item's own params,
    `later` holds every evidence id of the rule (-> its index) and `this` the item's own id, so
    that a placeholder naming later evidence (or the item itself) is told apart from a typo.
    """
    namespace, dot, fact = name.partition(".")
    if not dot or not namespace or not fact:
        return f"expected EVIDENCE_ID.FACT, got {name!r}"
    if namespace in BUILTIN_NAMESPACES:
        if name in BUILTIN_FACTS:
            return ""
        facts = sorted(key.split(".", 1)[1] for key in BUILTIN_FACTS if key.startswith(namespace))
        return f"unknown fact {name!r} (built-in {namespace} facts: {', '.join(facts)})"
    if namespace not in gathered:
        if this is not None and namespace == this:
            return f"evidence {namespace!r} cannot fill its own params"
        if later is not None and namespace in later:
            where = f"evidence[{later[namespace]}]"
            return f"evidence {namespace!r} is gathered later ({where}); only earlier evidence can"
        return _unknown_evidence(namespace, gathered)
    collector_name = gathered[namespace]
    collector = collectors.get(collector_name) if collector_name is not None else None
    if collector is None or fact in collector.facts:
        return ""  # an unknown collector is reported where it is named
    declared = ", ".join(sorted(collector.facts)) or "no facts"
    return f"unknown fact {name!r} ({collector.name} has: {declared})"


def _unknown_evidence(namespace: str, gathered: Gathered) -> str:
    known = ", ".join(sorted(gathered)) or "none before this point"
    builtin = ", ".join(sorted(BUILTIN_NAMESPACES))
    return f"unknown evidence {namespace!r} (evidence: {known}; built-in: {builtin})"

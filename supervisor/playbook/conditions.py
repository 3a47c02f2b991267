"""Evaluating a rule's condition tree over one scope's facts, keeping a trace of every leaf.

Every leaf is evaluated (no short cut), so a trace answers "why did this rule not match?" in
full: `explain(trace)` gives lines such as `status.exec_main_status = 127: in [127, 203]: yes`
and `journal.text: missing (journal: cannot connect to spark1): regex 'EADDRINUSE': no`.
The operators themselves live in `supervisor.playbook.operators`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from supervisor.playbook.facts import Facts
from supervisor.playbook.model import All, Any, Condition, Leaf, LeafValue
from supervisor.playbook.operators import (
    OPERATORS,
    Actual,
    Missing,
    apply_operator,
    show,
)

__all__ = ["GroupTrace", "LeafTrace", "Trace", "evaluate", "explain", "first_failure"]


@dataclass(frozen=True)
class LeafTrace:
    fact: str
    op: str
    expected: LeafValue
    actual: Actual  #: MISSING when the scope has no such fact
    passed: bool
    reason: str = ""  #: why it is missing, or why the fact's type does not fit the operator

    def line(self) -> str:
        """`status.exec_main_status = 127: in [127, 203]: yes`."""
        verdict = "yes" if self.passed else "no"
        test = f"{self.op} {show(self.expected)}"
        if isinstance(self.actual, Missing):
            why = f" ({self.reason})" if self.reason else ""
            return f"{self.fact}: missing{why}: {test}: {verdict}"
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.fact} = {show(self.actual)}: {test}: {verdict}{why}"


@dataclass(frozen=True)
class GroupTrace:
    kind: Literal["all", "any", "not"]
    passed: bool
    children: tuple[Trace, ...]


Trace = LeafTrace | GroupTrace


def evaluate(condition: Condition, facts: Facts) -> Trace:
    """The condition's verdict over `facts`, with every leaf's actual value. Never raises."""
    if isinstance(condition, Leaf):
        return _leaf(condition, facts)
    if isinstance(condition, All):
        children = tuple(evaluate(child, facts) for child in condition.all)
        return GroupTrace("all", all(child.passed for child in children), children)
    if isinstance(condition, Any):
        children = tuple(evaluate(child, facts) for child in condition.any)
        return GroupTrace("any", any(child.passed for child in children), children)
    inner = evaluate(condition.not_, facts)
    return GroupTrace("not", not inner.passed, (inner,))


def _leaf(leaf: Leaf, facts: Facts) -> LeafTrace:
    actual = facts.get(leaf.fact)
    expected = leaf.pattern if leaf.pattern is not None else leaf.value
    passed, reason = apply_operator(OPERATORS[leaf.op], actual, expected)
    if isinstance(actual, Missing):
        reason = facts.why_missing(leaf.fact)
    return LeafTrace(leaf.fact, leaf.op, leaf.value, actual, passed, reason)


def explain(trace: Trace, indent: str = "") -> list[str]:
    """The trace as indented lines: groups as `all: no`, leaves as in `LeafTrace.line`."""
    if isinstance(trace, LeafTrace):
        return [indent + trace.line()]
    lines = [f"{indent}{trace.kind}: {'yes' if trace.passed else 'no'}"]
    for child in trace.children:
        lines.extend(explain(child, indent + "  "))
    return lines


def first_failure(trace: Trace) -> str:
    """In plain words, the first reason the condition does not hold (empty when it does)."""
    if trace.passed:
        return ""
    if isinstance(trace, LeafTrace):
        return trace.line()
    if trace.kind == "all":
        return next(first_failure(child) for child in trace.children if not child.passed)
    if trace.kind == "any":
        return "none of these holds: " + "; ".join(first_failure(c) for c in trace.children)
    inner = trace.children[0]
    held = inner.line() if isinstance(inner, LeafTrace) else f"its {inner.kind} holds"
    return f"not: {held}"

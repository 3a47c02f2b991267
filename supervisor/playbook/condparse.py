"""A rule's `when:` as written in YAML -> a `Condition` tree, every problem located.

A condition is a mapping with exactly one of `all` (a list), `any` (a list), `not` (one
condition), or a leaf `{fact, op, value}`. Operators come from the table; each value is checked
against what its operator takes, and regular expressions are compiled here, at load time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from supervisor.config.errors import Loc
from supervisor.config.messages import render_value
from supervisor.playbook.model import All, Any, Condition, Leaf, LeafValue, Not
from supervisor.playbook.operators import OPERATORS, ValueKind, unknown_operator
from supervisor.playbook.problems import Problems

GROUPS = ("all", "any", "not")
LEAF_KEYS = ("fact", "op", "value")
MAX_DEPTH = 32
_EXPECTED = "expected a condition: a mapping with all, any or not, or a leaf {fact, op, value}"


FactCheck = Callable[[str], str]
"""Why a fact name is not one the rule can have (empty when it is)."""


def parse_condition(
    data: object, loc: Loc, problems: Problems, check_fact: FactCheck | None = None
) -> Condition | None:
    """The condition at `loc`, or None after recording why it cannot be used. `check_fact`
    (when given) checks every leaf's `fact` against the rule's evidence."""
    if not isinstance(data, dict):
        problems.at(loc, f"{_EXPECTED}, got {render_value(data)}")
        return None
    if len(loc) > 2 * MAX_DEPTH:  # each level adds a key and an index to the path
        problems.at(loc, f"conditions nested too deeply (at most {MAX_DEPTH} levels)")
        return None
    groups = [key for key in GROUPS if key in data]
    if len(groups) > 1 or (groups and any(key in data for key in LEAF_KEYS)):
        problems.at(loc, "a condition holds exactly one of all, any, not, or fact/op/value")
        return None
    allowed = groups or list(LEAF_KEYS)
    unknown = [key for key in data if key not in allowed]
    for key in unknown:
        problems.at_key((*loc, key), f"unknown key (expected one of: {', '.join(allowed)})")
    if not groups:
        leaf = _leaf(data, loc, problems, check_fact)
        return None if unknown else leaf
    group = groups[0]
    inner = data[group]
    if group == "not":
        parsed = parse_condition(inner, (*loc, "not"), problems, check_fact)
        return Not(not_=parsed) if parsed is not None and not unknown else None
    if not isinstance(inner, list) or not inner:
        got = "an empty list" if inner == [] else render_value(inner)
        problems.at((*loc, group), f"expected a list of conditions, got {got}")
        return None
    items = [
        parse_condition(item, (*loc, group, i), problems, check_fact)
        for i, item in enumerate(inner)
    ]
    if unknown or any(item is None for item in items):
        return None
    children = tuple(item for item in items if item is not None)
    return All(all=children) if group == "all" else Any(any=children)


def _leaf(
    data: dict[object, object], loc: Loc, problems: Problems, check_fact: FactCheck | None
) -> Leaf | None:
    ok = all(key in data for key in LEAF_KEYS)
    for key in LEAF_KEYS:
        if key not in data:
            problems.at((*loc, key), "required")
    fact, op = data.get("fact"), data.get("op")
    if "fact" in data and not isinstance(fact, str):
        problems.at((*loc, "fact"), f"expected EVIDENCE_ID.FACT, got {render_value(fact)}")
        ok = False
    elif isinstance(fact, str) and check_fact is not None and check_fact(fact):
        problems.at((*loc, "fact"), check_fact(fact))
        ok = False
    if "op" in data and (not isinstance(op, str) or op not in OPERATORS):
        problems.at((*loc, "op"), unknown_operator(op))
        return None
    if not isinstance(op, str) or "value" not in data:
        return None
    value = _value(data["value"], op, (*loc, "value"), problems)
    if isinstance(value, _Bad) or not ok or not isinstance(fact, str):
        return None
    return Leaf(fact=fact, op=op, value=value)


class _Bad:
    """The value did not fit its operator (already reported)."""


_BAD = _Bad()
_SCALARS = (str, int, float, bool, type(None))


def _value(value: object, op: str, loc: Loc, problems: Problems) -> LeafValue | _Bad:
    kind = OPERATORS[op].value_kind
    fits = {
        ValueKind.ANY: _is_scalar(value) or _is_list(value),
        ValueKind.LIST: _is_list(value),
        ValueKind.SCALAR: _is_scalar(value),
        ValueKind.NUMBER: isinstance(value, int | float) and not isinstance(value, bool),
        ValueKind.REGEX: isinstance(value, str),
        ValueKind.BOOL: isinstance(value, bool),
        ValueKind.COUNT: isinstance(value, int) and not isinstance(value, bool) and value >= 0,
    }[kind]
    if not fits:
        problems.at(loc, f"expected {kind} for {op!r}, got {render_value(value)}")
        return _BAD
    if kind is ValueKind.REGEX and isinstance(value, str):
        try:
            re.compile(value)
        except re.error as exc:
            problems.at(loc, f"invalid regular expression {value!r}: {exc}")
            return _BAD
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return _BAD  # unreachable: every kind above is a scalar or a list


def _is_scalar(value: object) -> bool:
    return isinstance(value, _SCALARS)


def _is_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, str | int | float | bool) for item in value
    )


def leaves(condition: Condition, loc: Loc = ("when",)) -> Iterator[tuple[Loc, Leaf]]:
    """Every leaf with its document path (`('when', 'all', 1)`), in the order written."""
    if isinstance(condition, Leaf):
        yield loc, condition
    elif isinstance(condition, All):
        for index, child in enumerate(condition.all):
            yield from leaves(child, (*loc, "all", index))
    elif isinstance(condition, Any):
        for index, child in enumerate(condition.any):
            yield from leaves(child, (*loc, "any", index))
    else:
        yield from leaves(condition.not_, (*loc, "not"))

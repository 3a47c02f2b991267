"""The operator table: every comparison a rule's `when` may use, as pure functions.

The table is the single source for evaluation, for the unknown-operator error text and for the
operators table of `playbooks/README.md` (`operators_markdown()`). An operator never raises on a
fact of the wrong type: `check` returns false with the reason (`not a number`). A missing fact
fails every operator except `exists`. No rule text is ever evaluated as code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from supervisor.playbook.evidence.base import FactValue


class Missing:
    """The value of a fact that is not there (its evidence failed, or never gives it)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = Missing()
Actual = FactValue | Missing


class OperandError(Exception):
    """The fact's type does not fit the operator; the message says why (`not a number`)."""


class ValueKind(StrEnum):
    """What an operator's `value:` must be; the text is what load errors say is expected."""

    ANY = "a value or a list of values"
    LIST = "a list of values"
    NUMBER = "a number"
    SCALAR = "a single value"
    REGEX = "a regular expression"
    BOOL = "true or false"
    COUNT = "a whole number"


@dataclass(frozen=True)
class Operator:
    name: str
    fn: Callable[[FactValue, object], bool]  #: (present fact, value) -> holds; OperandError
    value_kind: ValueKind
    doc: str
    passes_example: tuple[Actual, object]  #: (fact, value) for which it holds
    fails_example: tuple[Actual, object]  #: (fact, value) for which it does not


def _same(actual: object, expected: object) -> bool:
    """Equality without Python's `True == 1`; a list value equals a list fact item by item."""
    if isinstance(actual, tuple | list) or isinstance(expected, tuple | list):
        if not (isinstance(actual, tuple | list) and isinstance(expected, tuple | list)):
            return False
        return len(actual) == len(expected) and all(map(_same, actual, expected))
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual is expected
    return actual == expected


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OperandError("not a number")
    return value


def _items(value: object) -> tuple[object, ...]:
    if not isinstance(value, tuple | list):
        raise OperandError("not a list")
    return tuple(value)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise OperandError("not text")
    return value


def _count(value: object) -> int:
    if isinstance(value, tuple | list):
        return len(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise OperandError("not a list or a count")


def _pattern(value: object) -> re.Pattern[str]:
    return value if isinstance(value, re.Pattern) else re.compile(str(value))


def _searches(actual: FactValue, expected: object) -> bool:
    pattern = _pattern(expected)
    if isinstance(actual, tuple):
        return any(pattern.search(_text(item)) for item in actual)
    return pattern.search(_text(actual)) is not None


def _contains(actual: FactValue, expected: object) -> bool:
    if isinstance(actual, tuple):
        return any(_same(item, expected) for item in actual)
    if not isinstance(expected, str):
        raise OperandError("text contains only text; the value is not text")
    return expected in _text(actual)


def _all_match(actual: FactValue, expected: object) -> bool:
    items = _items(actual)
    pattern = _pattern(expected)
    return bool(items) and all(pattern.search(_text(item)) for item in items)


def _any_match(actual: FactValue, expected: object) -> bool:
    pattern = _pattern(expected)
    return any(pattern.search(_text(item)) for item in _items(actual))


def _compare(test: Callable[[float, float], bool]) -> Callable[[FactValue, object], bool]:
    return lambda actual, expected: test(_number(actual), _number(expected))


def _count_compare(test: Callable[[int, int], bool]) -> Callable[[FactValue, object], bool]:
    return lambda actual, expected: test(_count(actual), _count(expected))


_COUNT = "the number of items of a list fact (or an integer fact such as `count`) is"
_CMDS = ("python3 -m vllm", "VLLM::Worker_TP0")
_WORKERS = ("VLLM::Worker_TP0", "VLLM::Worker_TP1")
_MIXED = ("VLLM::Worker_TP0", "nginx: master")

Function = Callable[[FactValue, object], bool]
_FUNCTIONS: Mapping[str, tuple[Function, ValueKind]] = {
    "eq": (_same, ValueKind.ANY),
    "ne": (lambda a, e: not _same(a, e), ValueKind.ANY),
    "in": (lambda a, e: any(_same(a, item) for item in _items(e)), ValueKind.LIST),
    "not_in": (lambda a, e: not any(_same(a, item) for item in _items(e)), ValueKind.LIST),
    "gt": (_compare(lambda a, e: a > e), ValueKind.NUMBER),
    "ge": (_compare(lambda a, e: a >= e), ValueKind.NUMBER),
    "lt": (_compare(lambda a, e: a < e), ValueKind.NUMBER),
    "le": (_compare(lambda a, e: a <= e), ValueKind.NUMBER),
    "regex": (_searches, ValueKind.REGEX),
    "not_regex": (lambda a, e: not _searches(a, e), ValueKind.REGEX),
    "contains": (_contains, ValueKind.SCALAR),
    "exists": (lambda a, e: e is True, ValueKind.BOOL),
    "count_eq": (_count_compare(lambda a, e: a == e), ValueKind.COUNT),
    "count_ne": (_count_compare(lambda a, e: a != e), ValueKind.COUNT),
    "count_gt": (_count_compare(lambda a, e: a > e), ValueKind.COUNT),
    "count_ge": (_count_compare(lambda a, e: a >= e), ValueKind.COUNT),
    "count_lt": (_count_compare(lambda a, e: a < e), ValueKind.COUNT),
    "count_le": (_count_compare(lambda a, e: a <= e), ValueKind.COUNT),
    "all_match": (_all_match, ValueKind.REGEX),
    "any_match": (_any_match, ValueKind.REGEX),
}
_DOCS: Mapping[str, str] = {
    "eq": "the fact equals the value",
    "ne": "the fact is there and does not equal the value",
    "in": "the fact equals one of the values",
    "not_in": "the fact is there and equals none of the values",
    "gt": "the fact is greater than the value",
    "ge": "the fact is greater than or equal to the value",
    "lt": "the fact is less than the value",
    "le": "the fact is less than or equal to the value",
    "regex": "the text matches the regular expression somewhere (Python `re.search`); "
    "on a list fact, at least one item does",
    "not_regex": "the text does not match the regular expression; on a list fact, no item does",
    "contains": "the text contains the value; on a list fact, the value is one of its items",
    "exists": "`true`: the fact is there (its evidence ran and gave it); `false`: it is missing",
    "count_eq": f"{_COUNT} the value",
    "count_ne": f"{_COUNT} not the value",
    "count_gt": f"{_COUNT} more than the value",
    "count_ge": f"{_COUNT} at least the value",
    "count_lt": f"{_COUNT} less than the value",
    "count_le": f"{_COUNT} at most the value",
    "all_match": "every item of a list fact matches the regular expression "
    "(false on an empty list)",
    "any_match": "at least one item of a list fact matches the regular expression",
}
Example = tuple[Actual, object]
_EXAMPLES: Mapping[str, tuple[Example, Example]] = {  # (fact, value) that holds, that does not
    "eq": (("exit-code", "exit-code"), (127, 203)),
    "ne": ((203, 127), (127, 127)),
    "in": ((127, [127, 203]), (1, [127, 203])),
    "not_in": ((1, [127, 203]), (203, [127, 203])),
    "gt": ((41, 5), (5, 5)),
    "ge": ((5, 5), (4.75, 5)),
    "lt": ((4.7, 8), (96.2, 8)),
    "le": ((8, 8), (8.5, 8)),
    "regex": (("code: -98, name: EADDRINUSE", "EADDRINUSE"), ("Loading weights", "EADDRINUSE")),
    "not_regex": ((_CMDS, "--headless"), (_CMDS, "VLLM::")),
    "contains": (("bash: /w/head.sh: No such file", "No such file"), ((4242, 4243), 17)),
    "exists": (("/workspace/vllm-head.sh", True), (MISSING, True)),
    "count_eq": (((4242, 4243), 2), ((4242,), 2)),
    "count_ne": ((3, 2), (2, 2)),
    "count_gt": ((3, 2), (2, 2)),
    "count_ge": (((4242,), 1), ((), 1)),
    "count_lt": (((), 1), ((4242,), 1)),
    "count_le": ((2, 2), (3, 2)),
    "all_match": ((_WORKERS, "^VLLM::Worker"), (_MIXED, "^VLLM::Worker")),
    "any_match": ((_MIXED, "^VLLM::"), ((), "^VLLM::")),
}
_TABLE = tuple(
    Operator(name, fn, kind, _DOCS[name], *_EXAMPLES[name])
    for name, (fn, kind) in _FUNCTIONS.items()
)

OPERATORS: Mapping[str, Operator] = {op.name: op for op in _TABLE}


def operator_names() -> str:
    """`eq, ne, in, ...` in table order, for error messages."""
    return ", ".join(OPERATORS)


def unknown_operator(name: object) -> str:
    """`unknown operator 'equals' (operators: eq, ne, in, ...)`."""
    return f"unknown operator {show(name)} (operators: {operator_names()})"


def apply_operator(op: Operator, actual: Actual, expected: object) -> tuple[bool, str]:
    """(holds, why not when the fact's type does not fit); never raises."""
    if isinstance(actual, Missing):
        return (op.name == "exists" and expected is False), ""
    if op.name == "exists":
        return expected is True, ""
    try:
        return op.fn(actual, expected), ""
    except OperandError as exc:
        return False, str(exc)


_MAX_TEXT = 80
_MAX_ITEMS = 8


def show(value: object) -> str:
    """A value as a rule would write it: `127`, `true`, `'exit-code'`, `[127, 203]`, `null`."""
    if isinstance(value, Missing):
        return "missing"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, re.Pattern):
        value = value.pattern
    if isinstance(value, tuple | list):
        shown = [show(item) for item in value[:_MAX_ITEMS]]
        if len(value) > _MAX_ITEMS:
            shown.append(f"... {len(value)} in all")
        return "[" + ", ".join(shown) + "]"
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        text = value.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        if len(text) > _MAX_TEXT - 2:
            text = text[: _MAX_TEXT - 5] + "..."
        return f"'{text}'"
    return str(value)


def operators_markdown() -> str:
    """The operators table of `playbooks/README.md`: name, value, meaning, and an example that
    passes / fails."""
    lines = [
        "| Operator | `value:` | Holds when | Holds | Does not hold |",
        "|---|---|---|---|---|",
    ]
    for op in _TABLE:
        lines.append(
            f"| `{op.name}` | {op.value_kind} | {op.doc} | {_example(op, op.passes_example)} "
            f"| {_example(op, op.fails_example)} |"
        )
    return "\n".join(lines) + "\n"


def _example(op: Operator, example: tuple[Actual, object]) -> str:
    actual, expected = example
    fact = "fact missing" if isinstance(actual, Missing) else f"fact `{show(actual)}`"
    return f"{fact}, value `{show(expected)}`".replace("|", "\\|")

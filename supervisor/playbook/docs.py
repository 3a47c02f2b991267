"""The reference tables of `playbooks/README.md`, generated from the code they describe.

`python -m supervisor.playbook.docs` prints every table; paste each over its section of the
README (a test checks that the rule fields, the operators and the built-in facts match).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from datetime import timedelta
from enum import Enum
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from supervisor.core.docgen import field_default
from supervisor.playbook.actions.base import Target
from supervisor.playbook.model import AppliesTo, Budget, EvidenceItem, Rule, Step, Verify
from supervisor.playbook.operators import operators_markdown
from supervisor.playbook.registries import (
    Actions,
    Collectors,
    actions_or_default,
    collectors_or_default,
)
from supervisor.playbook.scopes import BUILTIN_FACTS

_NESTED: dict[str, tuple[str, type[BaseModel]]] = {
    "applies_to": ("applies_to.", AppliesTo),
    "evidence": ("evidence[].", EvidenceItem),
    "actions": ("actions[].", Step),
    "verify": ("verify.", Verify),
    "budget": ("budget.", Budget),
}
_DEFAULTS = {
    "description": "none",
    "applies_to.kinds": "all kinds",
    "applies_to.endpoints": "all endpoints",
    "applies_to.states": "`[down, degraded]`",
    "verify.within": "the endpoint's `startup_grace`",
    "when": "required",
}


def rule_fields_markdown() -> str:
    """Every key of a rule file: key, meaning, default."""
    rows = ["| Key | Meaning | Default |", "|---|---|---|"]
    for name, info in Rule.model_fields.items():
        if name == "source":
            continue
        rows.append(
            f"| `{name}` | {info.description} | {_DEFAULTS.get(name) or field_default(info)} |"
        )
        if name in _NESTED:
            prefix, model = _NESTED[name]
            for inner, field in model.model_fields.items():
                key = prefix + inner
                default = _DEFAULTS.get(key) or field_default(field)
                rows.append(f"| `{key}` | {field.description} | {default} |")
    return "\n".join(rows) + "\n"


def builtin_facts_markdown() -> str:
    rows = ["| Fact | Meaning |", "|---|---|"]
    rows += [f"| `{name}` | {meaning} |" for name, meaning in BUILTIN_FACTS.items()]
    return "\n".join(rows) + "\n"


def collectors_markdown(collectors: Collectors | None = None) -> str:
    """Per collector: what it runs, its params and the facts it gives."""
    sections = []
    for collector in sorted(collectors_or_default(collectors).values(), key=lambda c: c.name):
        lines = [f"### `{collector.name}`", "", f"{collector.doc}.", ""]
        lines += _params_lines(collector.params)
        lines += ["Facts:", ""]
        lines += [f"- `{name}`: {meaning}" for name, meaning in collector.facts.items()]
        sections.append("\n".join(lines) + "\n")
    return "\n".join(sections)


def actions_markdown(actions: Actions | None = None) -> str:
    """Per action: what it does, whom it acts on, its params."""
    sections = []
    for action in sorted(actions_or_default(actions).values(), key=lambda a: a.name):
        accepted = ", ".join(f"`{t.value}`" for t in Target if t in action.targets)
        lines = [f"### `{action.name}`", "", f"{action.doc}.", ""]
        lines += [f"Acts on `{action.target.value}` by default (`on:` may be {accepted}).", ""]
        lines += _params_lines(action.params)
        sections.append("\n".join(lines).rstrip("\n") + "\n")
    return "\n".join(sections)


def _params_lines(model: type[BaseModel]) -> list[str]:
    if not model.model_fields:
        return ["No params.", ""]
    lines = ["| Param | Type | Default | Meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        meaning = info.description or ""
        lines.append(f"| `{name}` | {_type(info.annotation)} | {field_default(info)} | {meaning} |")
    return [*lines, ""]


def _type(annotation: Any) -> str:
    """A type in YAML words: `text`, `integer`, `true/false`, `duration`, `list of text`."""
    words = list(_type_words(annotation))
    return " or ".join(dict.fromkeys(words))


def _type_words(annotation: Any) -> Iterator[str]:
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        yield from _type_words(get_args(annotation)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in get_args(annotation):
            yield from _type_words(arg)
    elif origin is Literal:
        yield " / ".join(f"`{value}`" for value in get_args(annotation))
    elif origin in (tuple, list):
        inner = [arg for arg in get_args(annotation) if arg is not Ellipsis]
        yield "list of " + (_type(inner[0]) if inner else "values")
    elif isinstance(annotation, type) and issubclass(annotation, Enum):
        yield " / ".join(f"`{member.value}`" for member in annotation)
    else:
        yield _SIMPLE.get(annotation, getattr(annotation, "__name__", str(annotation)))


_SIMPLE: dict[Any, str] = {
    str: "text",
    int: "integer",
    float: "number",
    bool: "true/false",
    timedelta: "duration",
    type(None): "null",
}


def render_all() -> str:
    parts = [
        ("Rule fields", rule_fields_markdown()),
        ("Operators", operators_markdown()),
        ("Built-in facts", builtin_facts_markdown()),
        ("Collectors", collectors_markdown()),
        ("Actions", actions_markdown()),
    ]
    return "\n".join(f"<!-- {title} -->\n{text}" for title, text in parts)


if __name__ == "__main__":
    print(render_all(), end="")

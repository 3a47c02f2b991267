"""Placeholders in rule params: `"{unit.known_good}"`, `"{status.exec_start_script}"`.

A placeholder is exactly `{NAME.NAME}` (letters, digits and `_`); every other brace is plain text,
so regular expressions such as `Worker_TP\\d{1,2}` need no escaping. `{{a.b}}` is the literal
text `{a.b}`. Placeholders are filled from a scope's facts just before a collector or an action
runs; one naming a missing fact stops that item with a plain error. Nothing here is ever handed
to a shell: filled text stays one argument.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from supervisor.config.errors import Loc
from supervisor.playbook.facts import Facts, fact_text

_NAME = r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*"
PLACEHOLDER = re.compile(rf"\{{\{{(?P<literal>{_NAME})\}}\}}|\{{(?P<name>{_NAME})\}}", re.ASCII)


class PlaceholderError(Exception):
    """A placeholder names a fact that is missing; the message says which and why."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        why = f" ({reason})" if reason else ""
        super().__init__(f"placeholder {{{name}}}: {name} is missing{why}")


def placeholders(text: str) -> tuple[str, ...]:
    """The fact names `text` refers to, in order: `("unit.container", "unit.known_good")`."""
    return tuple(m["name"] for m in PLACEHOLDER.finditer(text) if m["name"])


MAX_DEPTH = 32  #: params deeper than this (only reachable through a YAML anchor loop) are text-free


def placeholders_in(value: object, loc: Loc = ()) -> Iterator[tuple[Loc, str]]:
    """(document path, fact name) of every placeholder in a params value, depth first."""
    if len(loc) > MAX_DEPTH:
        return
    if isinstance(value, str):
        for name in placeholders(value):
            yield loc, name
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from placeholders_in(item, (*loc, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from placeholders_in(item, (*loc, index))


def fill(text: str, facts: Facts) -> str:
    """`text` with every placeholder replaced by its fact; raises `PlaceholderError`."""

    def replace(match: re.Match[str]) -> str:
        if match["literal"]:
            return "{" + match["literal"] + "}"
        name = match["name"]
        if name not in facts.values:
            raise PlaceholderError(name, facts.why_missing(name))
        return fact_text(facts.values[name])

    return PLACEHOLDER.sub(replace, text)


def fill_params(value: object, facts: Facts) -> object:
    """Every text inside a params value filled (mappings and lists walked); the rest as is."""
    if isinstance(value, str):
        return fill(value, facts)
    if isinstance(value, Mapping):
        return {key: fill_params(item, facts) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [fill_params(item, facts) for item in value]
    return value
